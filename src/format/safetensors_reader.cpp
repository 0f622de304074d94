#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "base/units.h"
#include "format/dtypes.h"
#include "format/header_cursor.h"
#include "format/json_text.h"
#include "format/safetensors.h"

namespace hoist {
namespace {

class SafetensorsParser {
 public:
  explicit SafetensorsParser(File& file) : file_(file), in_(file) {}

  Result<TensorDirectory> Parse() {
    dir_.format = "safetensors";
    dir_.files.push_back({file_.path(), file_.size(), file_.identity()});
    if (file_.size() < 8) {
      return in_.Invalid(0, "file is " + std::to_string(file_.size()) +
                                " bytes, shorter than the 8-byte header length");
    }
    uint64_t header_bytes = 0;
    HOIST_RETURN_IF_ERROR(in_.ReadScalar(&header_bytes, "the header length"));
    if (header_bytes > kSafetensorsMaxHeaderBytes) {
      return in_.Invalid(0, "header length " + std::to_string(header_bytes) +
                                " exceeds the limit of " +
                                std::to_string(kSafetensorsMaxHeaderBytes) + " bytes");
    }
    if (header_bytes > in_.remaining()) {
      return in_.Invalid(0, "header length " + std::to_string(header_bytes) +
                                " runs past the end of the file (" + std::to_string(file_.size()) +
                                " bytes)");
    }
    data_start_ = 8 + header_bytes;
    std::string header(header_bytes, '\0');
    HOIST_RETURN_IF_ERROR(in_.Read(header.data(), header_bytes, "the JSON header"));
    HOIST_RETURN_IF_ERROR(ParseHeader(header));
    HOIST_RETURN_IF_ERROR(CheckLayout());
    dir_.IndexNames();
    return std::move(dir_);
  }

 private:
  Status ParseHeader(const std::string& header) {
    if (header.empty() || header[0] != '{') {
      return in_.Invalid(8, "header does not start with '{'");
    }
    HOIST_ASSIGN_OR_RETURN(nlohmann::json root, ParseModelJson(header, file_.path(), 8));
    if (!root.is_object()) return in_.Invalid(8, "header is not a JSON object");
    for (auto& [key, value] : root.items()) {
      if (key == "__metadata__") {
        HOIST_RETURN_IF_ERROR(ParseMetadata(value));
      } else {
        HOIST_RETURN_IF_ERROR(ParseTensor(key, value));
      }
    }
    return Status::Ok();
  }

  Status ParseMetadata(const nlohmann::json& value) {
    if (!value.is_object()) return in_.Invalid(8, "__metadata__ is not a JSON object");
    for (const auto& [k, v] : value.items()) {
      if (!v.is_string()) {
        return in_.Invalid(8, "__metadata__ value of '" + k + "' is not a string");
      }
      dir_.metadata.push_back({k, "STRING", "", 1, v});
    }
    return Status::Ok();
  }

  Status ParseTensor(const std::string& name, const nlohmann::json& info) {
    const std::string where = "tensor '" + name + "'";
    if (!info.is_object()) return in_.Invalid(8, where + " is not a JSON object");
    const auto dtype = info.find("dtype");
    const auto shape = info.find("shape");
    const auto offsets = info.find("data_offsets");
    if (dtype == info.end() || !dtype->is_string()) {
      return in_.Invalid(8, where + " has no string 'dtype'");
    }
    if (shape == info.end() || !shape->is_array()) {
      return in_.Invalid(8, where + " has no array 'shape'");
    }
    if (offsets == info.end() || !offsets->is_array() || offsets->size() != 2) {
      return in_.Invalid(8, where + " has no 'data_offsets' pair");
    }
    TensorEntry t;
    t.name = name;
    t.dtype = dtype->get<std::string>();
    for (const auto& d : *shape) {
      if (!d.is_number_unsigned() && !(d.is_number_integer() && d.get<int64_t>() >= 0)) {
        return in_.Invalid(8, where + " has a shape entry that is not a non-negative integer");
      }
      t.shape.push_back(d.get<uint64_t>());
    }
    uint64_t range[2] = {0, 0};
    for (int k = 0; k < 2; ++k) {
      const auto& o = (*offsets)[k];
      if (!o.is_number_unsigned() && !(o.is_number_integer() && o.get<int64_t>() >= 0)) {
        return in_.Invalid(8, where + " has a data offset that is not a non-negative integer");
      }
      range[k] = o.get<uint64_t>();
    }
    if (range[1] < range[0]) {
      return in_.Invalid(8, where + " data_offsets [" + std::to_string(range[0]) + ", " +
                                std::to_string(range[1]) + "] end before they begin");
    }
    auto nbytes = SafetensorsTensorBytes(t.dtype, t.shape);
    if (!nbytes.ok()) return in_.Invalid(8, where + ": " + nbytes.status().message());
    if (nbytes.value() != range[1] - range[0]) {
      return in_.Invalid(8, where + " is " + std::to_string(range[1] - range[0]) +
                                " bytes by its data_offsets but " + std::to_string(nbytes.value()) +
                                " by its dtype and shape");
    }
    t.nbytes = nbytes.value();
    t.offset = range[0];  // relative until CheckLayout
    dir_.tensors.push_back(std::move(t));
    return Status::Ok();
  }

  // Ranges sorted by offset start at 0 and touch end to end up to the end of the file.
  Status CheckLayout() {
    auto& tensors = dir_.tensors;
    std::stable_sort(tensors.begin(), tensors.end(),
                     [](const TensorEntry& a, const TensorEntry& b) {
                       return a.offset != b.offset ? a.offset < b.offset : a.nbytes < b.nbytes;
                     });
    uint64_t expected = 0;
    for (const TensorEntry& t : tensors) {
      if (t.offset != expected) {
        return in_.Invalid(data_start_ + std::min(t.offset, expected),
                           "tensor '" + t.name + "' starts at data offset " +
                               std::to_string(t.offset) + " but the previous tensor ends at " +
                               std::to_string(expected) +
                               (t.offset > expected ? " (a hole)" : " (an overlap)"));
      }
      expected = t.offset + t.nbytes;
    }
    const uint64_t data_bytes = file_.size() - data_start_;
    if (expected != data_bytes) {
      return in_.Invalid(data_start_ + std::min(expected, data_bytes),
                         "tensor data ends at data offset " + std::to_string(expected) +
                             " but the file holds " + std::to_string(data_bytes) + " data bytes");
    }
    for (TensorEntry& t : tensors) t.offset += data_start_;
    return Status::Ok();
  }

  File& file_;
  HeaderCursor in_;
  TensorDirectory dir_;
  uint64_t data_start_ = 0;
};

}  // namespace

Result<uint64_t> SafetensorsTensorBytes(const std::string& dtype,
                                        const std::vector<uint64_t>& shape) {
  const SafetensorsDtype* type = FindSafetensorsDtype(dtype);
  if (type == nullptr) return Status::InvalidArgument("unknown dtype '" + dtype + "'");
  uint64_t bits = type->bits;
  for (uint64_t d : shape) {
    if (!CheckedMul(bits, d, &bits)) {
      return Status::InvalidArgument("size of the shape overflows 64 bits");
    }
  }
  if (bits % 8 != 0) {
    return Status::InvalidArgument("the " + dtype + " elements fill " + std::to_string(bits) +
                                   " bits, not a whole number of bytes");
  }
  return bits / 8;
}

Result<TensorDirectory> ReadSafetensors(File& file) { return SafetensorsParser(file).Parse(); }

}  // namespace hoist
