#include <algorithm>
#include <cstring>
#include <numeric>
#include <string>
#include <unordered_set>

#include "base/units.h"
#include "format/dtypes.h"
#include "format/gguf.h"
#include "format/header_cursor.h"

namespace hoist {
namespace {

constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" read as a little-endian u32

const char* ValueTypeName(uint32_t type) {
  static constexpr const char* kNames[] = {"UINT8",  "INT8",    "UINT16", "INT16",  "UINT32",
                                           "INT32",  "FLOAT32", "BOOL",   "STRING", "ARRAY",
                                           "UINT64", "INT64",   "FLOAT64"};
  return type < 13 ? kNames[type] : "UNKNOWN";
}

// The fewest bytes a value of this type occupies; 0 for an unknown type.
uint64_t MinValueBytes(uint32_t type) {
  switch (static_cast<GgufValueType>(type)) {
    case GgufValueType::kUint8:
    case GgufValueType::kInt8:
    case GgufValueType::kBool:
      return 1;
    case GgufValueType::kUint16:
    case GgufValueType::kInt16:
      return 2;
    case GgufValueType::kUint32:
    case GgufValueType::kInt32:
    case GgufValueType::kFloat32:
      return 4;
    case GgufValueType::kUint64:
    case GgufValueType::kInt64:
    case GgufValueType::kFloat64:
    case GgufValueType::kString:
      return 8;
    case GgufValueType::kArray:
      return 12;
  }
  return 0;
}

class GgufParser {
 public:
  explicit GgufParser(File& file) : file_(file), in_(file) {}

  Result<TensorDirectory> Parse() {
    dir_.format = "gguf";
    dir_.files.push_back({file_.path(), file_.size(), file_.identity()});
    HOIST_RETURN_IF_ERROR(ParsePreamble());
    HOIST_RETURN_IF_ERROR(ParseMetadata());
    HOIST_RETURN_IF_ERROR(ParseTensorInfos());
    HOIST_RETURN_IF_ERROR(PlaceTensors());
    dir_.IndexNames();
    return std::move(dir_);
  }

 private:
  // The magic and a version hoist reads (2 or 3), each refusal naming what it found.
  Status ReadMagicAndVersion() {
    uint32_t magic = 0;
    HOIST_RETURN_IF_ERROR(in_.ReadScalar(&magic, "the GGUF magic"));
    if (magic != kGgufMagic) {
      char text[5] = {};
      std::memcpy(text, &magic, 4);
      for (char& c : text) {
        if (c != 0 && (c < 32 || c > 126)) c = '?';
      }
      return in_.Invalid(0,
                         std::string("not a GGUF file: magic is '") + text + "', expected 'GGUF'");
    }
    HOIST_RETURN_IF_ERROR(in_.ReadScalar(&dir_.version, "the GGUF version"));
    if (dir_.version == 2 || dir_.version == 3) return Status::Ok();
    const uint32_t swapped = __builtin_bswap32(dir_.version);
    if (swapped >= 1 && swapped <= 3) {
      return in_.Invalid(4, "GGUF version " + std::to_string(dir_.version) + " is version " +
                                std::to_string(swapped) +
                                " byte-swapped: the file is big-endian, which hoist does not "
                                "read");
    }
    if (dir_.version == 1) {
      return in_.Invalid(4, "GGUF version 1 is not supported (only versions 2 and 3)");
    }
    return in_.Invalid(
        4, "unsupported GGUF version " + std::to_string(dir_.version) + " (only versions 2 and 3)");
  }

  Status ParsePreamble() {
    HOIST_RETURN_IF_ERROR(ReadMagicAndVersion());
    HOIST_RETURN_IF_ERROR(in_.ReadScalar(&tensor_count_, "the tensor count"));
    HOIST_RETURN_IF_ERROR(in_.ReadScalar(&kv_count_, "the metadata count"));
    // Each tensor info takes at least 24 bytes and each key-value pair at least 13.
    const uint64_t left = in_.remaining();
    if (tensor_count_ > left / 24) {
      return in_.Invalid(8, "tensor count " + std::to_string(tensor_count_) +
                                " cannot fit in the " + std::to_string(left) +
                                " bytes left in the file");
    }
    if (kv_count_ > (left - tensor_count_ * 24) / 13) {
      return in_.Invalid(16, "metadata count " + std::to_string(kv_count_) +
                                 " cannot fit in the bytes left in the file");
    }
    return Status::Ok();
  }

  Status ReadString(std::string* out, const char* what) {
    const uint64_t at = in_.position();
    uint64_t length = 0;
    HOIST_RETURN_IF_ERROR(in_.ReadScalar(&length, what));
    if (length > in_.remaining()) {
      return in_.Invalid(at, std::string(what) + " length " + std::to_string(length) +
                                 " runs past the end of the file");
    }
    out->resize(length);
    return in_.Read(out->data(), length, what);
  }

  template <typename T>
  Status ReadNumber(nlohmann::json* out) {
    T v{};
    HOIST_RETURN_IF_ERROR(in_.ReadScalar(&v, "a metadata value"));
    *out = v;
    return Status::Ok();
  }

  Status ReadBool(nlohmann::json* out) {
    const uint64_t at = in_.position();
    uint8_t v = 0;
    HOIST_RETURN_IF_ERROR(in_.ReadScalar(&v, "a metadata value"));
    if (v > 1) return in_.Invalid(at, "boolean value " + std::to_string(v) + " is not 0 or 1");
    *out = v != 0;
    return Status::Ok();
  }

  // An array at nesting `depth`: its element type and length, checked against the bytes left,
  // then its elements.
  Status ReadArray(int depth, nlohmann::json* out, std::string* element_type, uint64_t* count) {
    const uint64_t at = in_.position();
    if (depth >= kGgufMaxArrayNesting) {
      return in_.Invalid(
          at, "arrays nested deeper than " + std::to_string(kGgufMaxArrayNesting) + " levels");
    }
    uint32_t elem = 0;
    uint64_t n = 0;
    HOIST_RETURN_IF_ERROR(in_.ReadScalar(&elem, "an array's element type"));
    HOIST_RETURN_IF_ERROR(in_.ReadScalar(&n, "an array's length"));
    const uint64_t min_bytes = MinValueBytes(elem);
    if (min_bytes == 0) {
      return in_.Invalid(at, "unknown array element type " + std::to_string(elem));
    }
    if (n > in_.remaining() / min_bytes) {
      return in_.Invalid(at + 4, "array length " + std::to_string(n) + " cannot fit in the " +
                                     std::to_string(in_.remaining()) + " bytes left in the file");
    }
    if (element_type != nullptr) *element_type = ValueTypeName(elem);
    if (count != nullptr) *count = n;
    *out = nlohmann::json::array();
    for (uint64_t i = 0; i < n; ++i) {
      nlohmann::json item;
      HOIST_RETURN_IF_ERROR(ReadValue(elem, depth + 1, &item, nullptr, nullptr));
      out->push_back(std::move(item));
    }
    return Status::Ok();
  }

  // Reads one value of `type`; arrays recurse up to kGgufMaxArrayNesting levels.
  Status ReadValue(uint32_t type, int depth, nlohmann::json* out, std::string* element_type,
                   uint64_t* count) {
    switch (static_cast<GgufValueType>(type)) {
      case GgufValueType::kUint8:
        return ReadNumber<uint8_t>(out);
      case GgufValueType::kInt8:
        return ReadNumber<int8_t>(out);
      case GgufValueType::kUint16:
        return ReadNumber<uint16_t>(out);
      case GgufValueType::kInt16:
        return ReadNumber<int16_t>(out);
      case GgufValueType::kUint32:
        return ReadNumber<uint32_t>(out);
      case GgufValueType::kInt32:
        return ReadNumber<int32_t>(out);
      case GgufValueType::kFloat32:
        return ReadNumber<float>(out);
      case GgufValueType::kUint64:
        return ReadNumber<uint64_t>(out);
      case GgufValueType::kInt64:
        return ReadNumber<int64_t>(out);
      case GgufValueType::kFloat64:
        return ReadNumber<double>(out);
      case GgufValueType::kBool:
        return ReadBool(out);
      case GgufValueType::kString: {
        std::string s;
        HOIST_RETURN_IF_ERROR(ReadString(&s, "a string value"));
        *out = std::move(s);
        return Status::Ok();
      }
      case GgufValueType::kArray:
        return ReadArray(depth, out, element_type, count);
    }
    return Status::Internal("unreachable GGUF value type");
  }

  // general.alignment: a UINT32 power of two, which places the tensor data.
  Status TakeAlignment(const MetadataEntry& entry, uint32_t type, uint64_t type_at,
                       uint64_t value_at) {
    if (type != static_cast<uint32_t>(GgufValueType::kUint32)) {
      return in_.Invalid(
          type_at, std::string("general.alignment must be a UINT32, not ") + ValueTypeName(type));
    }
    const uint32_t a = entry.value.get<uint32_t>();
    if (!IsPowerOfTwo(a)) {
      return in_.Invalid(
          value_at, "general.alignment " + std::to_string(a) + " is not a non-zero power of two");
    }
    alignment_ = a;
    return Status::Ok();
  }

  Status ParseMetadata() {
    std::unordered_set<std::string> keys;
    for (uint64_t i = 0; i < kv_count_; ++i) {
      const uint64_t key_at = in_.position();
      MetadataEntry entry;
      HOIST_RETURN_IF_ERROR(ReadString(&entry.key, "a metadata key"));
      if (!keys.insert(entry.key).second) {
        return in_.Invalid(key_at, "duplicate metadata key '" + entry.key + "'");
      }
      const uint64_t type_at = in_.position();
      uint32_t type = 0;
      HOIST_RETURN_IF_ERROR(in_.ReadScalar(&type, "a metadata value type"));
      if (MinValueBytes(type) == 0) {
        return in_.Invalid(type_at, "unknown metadata value type " + std::to_string(type) +
                                        " for key '" + entry.key + "'");
      }
      entry.type = ValueTypeName(type);
      const uint64_t value_at = in_.position();
      HOIST_RETURN_IF_ERROR(ReadValue(type, 0, &entry.value, &entry.element_type, &entry.count));
      if (entry.key == "general.alignment") {
        HOIST_RETURN_IF_ERROR(TakeAlignment(entry, type, type_at, value_at));
      }
      dir_.metadata.push_back(std::move(entry));
    }
    return Status::Ok();
  }

  Status ParseTensorInfos() {
    std::unordered_set<std::string> names;
    for (uint64_t i = 0; i < tensor_count_; ++i) {
      TensorEntry t;
      HOIST_RETURN_IF_ERROR(ReadTensorName(&names, &t));
      const uint64_t dims_at = in_.position();
      std::vector<uint64_t> ne;
      HOIST_RETURN_IF_ERROR(ReadDimensions(t, &ne));
      HOIST_RETURN_IF_ERROR(ReadTypeAndOffset(dims_at, ne, &t));
      dir_.tensors.push_back(std::move(t));
    }
    return Status::Ok();
  }

  // A tensor's name: within the length bound and not seen before.
  Status ReadTensorName(std::unordered_set<std::string>* names, TensorEntry* t) {
    const uint64_t info_at = in_.position();
    HOIST_RETURN_IF_ERROR(ReadString(&t->name, "a tensor name"));
    if (t->name.size() > kGgufMaxNameBytes) {
      return in_.Invalid(info_at, "tensor name '" + t->name.substr(0, 32) + "...' is " +
                                      std::to_string(t->name.size()) + " bytes, more than " +
                                      std::to_string(kGgufMaxNameBytes));
    }
    if (!names->insert(t->name).second) {
      return in_.Invalid(info_at, "duplicate tensor name '" + t->name + "'");
    }
    return Status::Ok();
  }

  // A tensor's dimensions, innermost first as GGUF stores them.
  Status ReadDimensions(const TensorEntry& t, std::vector<uint64_t>* ne) {
    const uint64_t dims_at = in_.position();
    uint32_t n_dims = 0;
    HOIST_RETURN_IF_ERROR(in_.ReadScalar(&n_dims, "a tensor's dimension count"));
    if (n_dims > kGgufMaxDims) {
      return in_.Invalid(dims_at, "tensor '" + t.name + "' has " + std::to_string(n_dims) +
                                      " dimensions, more than " + std::to_string(kGgufMaxDims));
    }
    ne->assign(n_dims, 0);
    for (uint32_t d = 0; d < n_dims; ++d) {
      HOIST_RETURN_IF_ERROR(in_.ReadScalar(&(*ne)[d], "a tensor's dimensions"));
      if ((*ne)[d] > static_cast<uint64_t>(INT64_MAX)) {
        return in_.Invalid(dims_at + 4 + uint64_t{8} * d, "tensor '" + t.name + "' dimension " +
                                                              std::to_string(d) + " is negative");
      }
    }
    return Status::Ok();
  }

  // A tensor's ggml type and data offset; its dtype, shape and size from them.
  Status ReadTypeAndOffset(uint64_t dims_at, const std::vector<uint64_t>& ne, TensorEntry* t) {
    const uint64_t type_at = in_.position();
    uint32_t type_id = 0;
    HOIST_RETURN_IF_ERROR(in_.ReadScalar(&type_id, "a tensor's type"));
    const GgmlType* type = FindGgmlType(type_id);
    if (type == nullptr) {
      return in_.Invalid(
          type_at, "tensor '" + t->name + "' has unknown ggml type " + std::to_string(type_id));
    }
    const uint64_t offset_at = in_.position();
    uint64_t relative = 0;
    HOIST_RETURN_IF_ERROR(in_.ReadScalar(&relative, "a tensor's data offset"));
    t->dtype = std::string(type->name);
    t->shape.assign(ne.rbegin(), ne.rend());
    auto nbytes = GgmlTensorBytes(t->dtype, t->shape);
    if (!nbytes.ok()) {
      return in_.Invalid(dims_at, "tensor '" + t->name + "': " + nbytes.status().message());
    }
    t->nbytes = nbytes.value();
    if (relative % alignment_ != 0) {
      return in_.Invalid(offset_at,
                         "tensor '" + t->name + "' data offset " + std::to_string(relative) +
                             " is not a multiple of the alignment " + std::to_string(alignment_));
    }
    t->offset = relative;  // made absolute in PlaceTensors
    offset_fields_.push_back(offset_at);
    return Status::Ok();
  }

  Status PlaceTensors() {
    const uint64_t data_start = AlignUp(in_.position(), alignment_);
    const uint64_t size = file_.size();
    for (size_t i = 0; i < dir_.tensors.size(); ++i) {
      TensorEntry& t = dir_.tensors[i];
      uint64_t begin = 0;
      uint64_t end = 0;
      if (!CheckedAdd(data_start, t.offset, &begin) || !CheckedAdd(begin, t.nbytes, &end) ||
          end > size) {
        return in_.Invalid(offset_fields_[i],
                           "tensor '" + t.name + "' (" + std::to_string(t.nbytes) +
                               " bytes at data offset " + std::to_string(t.offset) +
                               ") extends past the end of the file (" + std::to_string(size) +
                               " bytes)");
      }
      t.offset = begin;
    }
    std::vector<size_t> order(dir_.tensors.size());
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(),
              [&](size_t a, size_t b) { return dir_.tensors[a].offset < dir_.tensors[b].offset; });
    for (size_t i = 1; i < order.size(); ++i) {
      const TensorEntry& prev = dir_.tensors[order[i - 1]];
      const TensorEntry& cur = dir_.tensors[order[i]];
      if (cur.offset < prev.offset + prev.nbytes) {
        dir_.warnings.push_back(file_.path() + ": tensor '" + cur.name + "' at byte " +
                                std::to_string(cur.offset) + " overlaps tensor '" + prev.name +
                                "'");
      }
    }
    return Status::Ok();
  }

  File& file_;
  HeaderCursor in_;
  TensorDirectory dir_;
  uint64_t tensor_count_ = 0;
  uint64_t kv_count_ = 0;
  uint32_t alignment_ = kGgufDefaultAlignment;
  std::vector<uint64_t> offset_fields_;
};

}  // namespace

Result<uint64_t> GgmlTensorBytes(const std::string& dtype, const std::vector<uint64_t>& shape) {
  const GgmlType* type = FindGgmlTypeByName(dtype);
  if (type == nullptr) return Status::InvalidArgument("unknown ggml type " + dtype);
  if (shape.size() > kGgufMaxDims) {
    return Status::InvalidArgument("more than " + std::to_string(kGgufMaxDims) + " dimensions");
  }
  const uint64_t row = shape.empty() ? 1 : shape.back();
  if (row % type->block_size != 0) {
    return Status::InvalidArgument("row length " + std::to_string(row) +
                                   " is not a multiple of the block size " +
                                   std::to_string(type->block_size) + " of " + dtype);
  }
  uint64_t elements = 1;
  for (uint64_t d : shape) {
    if (!CheckedMul(elements, d, &elements) || elements > static_cast<uint64_t>(INT64_MAX)) {
      return Status::InvalidArgument("element count overflows 63 bits");
    }
  }
  uint64_t bytes = row / type->block_size * type->block_bytes;
  for (size_t d = 0; d + 1 < shape.size(); ++d) {
    if (!CheckedMul(bytes, shape[d], &bytes)) {
      return Status::InvalidArgument("byte size overflows 64 bits");
    }
  }
  if (bytes > static_cast<uint64_t>(INT64_MAX)) {
    return Status::InvalidArgument("byte size overflows 63 bits");
  }
  return bytes;
}

Result<TensorDirectory> ReadGguf(File& file) { return GgufParser(file).Parse(); }

}  // namespace hoist
