#include <cstring>
#include <string>
#include <vector>

#include "base/units.h"
#include "format/dtypes.h"
#include "format/gguf.h"
#include "format/writer_common.h"

namespace hoist {
namespace {

class ByteWriter {
 public:
  template <typename T>
  void Put(T v) {
    const auto* p = reinterpret_cast<const unsigned char*>(&v);
    bytes_.insert(bytes_.end(), p, p + sizeof(T));
  }
  void PutString(const std::string& s) {
    Put<uint64_t>(s.size());
    bytes_.insert(bytes_.end(), s.begin(), s.end());
  }
  std::vector<unsigned char>& bytes() { return bytes_; }

 private:
  std::vector<unsigned char> bytes_;
};

Result<uint32_t> TypeId(const std::string& name) {
  static constexpr const char* kNames[] = {"UINT8",  "INT8",    "UINT16", "INT16",  "UINT32",
                                           "INT32",  "FLOAT32", "BOOL",   "STRING", "ARRAY",
                                           "UINT64", "INT64",   "FLOAT64"};
  for (uint32_t i = 0; i < 13; ++i) {
    if (name == kNames[i]) return i;
  }
  return Status::InvalidArgument("unknown GGUF value type '" + name + "'");
}

Status PutValue(ByteWriter& w, uint32_t type, const std::string& element_type,
                const nlohmann::json& value) {
  switch (static_cast<GgufValueType>(type)) {
    case GgufValueType::kUint8:
      w.Put(value.get<uint8_t>());
      break;
    case GgufValueType::kInt8:
      w.Put(value.get<int8_t>());
      break;
    case GgufValueType::kUint16:
      w.Put(value.get<uint16_t>());
      break;
    case GgufValueType::kInt16:
      w.Put(value.get<int16_t>());
      break;
    case GgufValueType::kUint32:
      w.Put(value.get<uint32_t>());
      break;
    case GgufValueType::kInt32:
      w.Put(value.get<int32_t>());
      break;
    case GgufValueType::kFloat32:
      w.Put(value.get<float>());
      break;
    case GgufValueType::kUint64:
      w.Put(value.get<uint64_t>());
      break;
    case GgufValueType::kInt64:
      w.Put(value.get<int64_t>());
      break;
    case GgufValueType::kFloat64:
      w.Put(value.get<double>());
      break;
    case GgufValueType::kBool:
      w.Put<uint8_t>(value.get<bool>() ? 1 : 0);
      break;
    case GgufValueType::kString:
      w.PutString(value.get<std::string>());
      break;
    case GgufValueType::kArray: {
      HOIST_ASSIGN_OR_RETURN(uint32_t elem, TypeId(element_type));
      if (elem == static_cast<uint32_t>(GgufValueType::kArray)) {
        return Status::InvalidArgument("the GGUF writer does not write nested arrays");
      }
      w.Put(elem);
      w.Put<uint64_t>(value.size());
      for (const auto& item : value) HOIST_RETURN_IF_ERROR(PutValue(w, elem, "", item));
      break;
    }
  }
  return Status::Ok();
}

}  // namespace

Result<TensorDirectory> WriteGguf(const std::string& path,
                                  const std::vector<MetadataEntry>& metadata,
                                  const std::vector<GgufTensorSpec>& tensors,
                                  const TensorFill& fill) {
  TensorDirectory dir;
  dir.format = "gguf";
  dir.version = 3;
  dir.metadata = metadata;
  uint64_t alignment = kGgufDefaultAlignment;
  ByteWriter w;
  w.Put<uint32_t>(0x46554747);
  w.Put<uint32_t>(3);
  w.Put<uint64_t>(tensors.size());
  w.Put<uint64_t>(metadata.size());
  for (const MetadataEntry& m : metadata) {
    HOIST_ASSIGN_OR_RETURN(uint32_t type, TypeId(m.type));
    w.PutString(m.key);
    w.Put(type);
    HOIST_RETURN_IF_ERROR(PutValue(w, type, m.element_type, m.value));
    if (m.key == "general.alignment") alignment = m.value.get<uint32_t>();
  }
  uint64_t relative = 0;
  for (const GgufTensorSpec& spec : tensors) {
    const GgmlType* type = FindGgmlTypeByName(spec.dtype);
    if (type == nullptr) return Status::InvalidArgument("unknown ggml type " + spec.dtype);
    HOIST_ASSIGN_OR_RETURN(uint64_t nbytes, GgmlTensorBytes(spec.dtype, spec.shape));
    relative += AlignUp(spec.gap_before, alignment);
    w.PutString(spec.name);
    w.Put<uint32_t>(static_cast<uint32_t>(spec.shape.size()));
    for (auto it = spec.shape.rbegin(); it != spec.shape.rend(); ++it) w.Put<uint64_t>(*it);
    w.Put<uint32_t>(type->id);
    w.Put<uint64_t>(relative);
    dir.tensors.push_back({spec.name, spec.dtype, spec.shape, 0, relative, nbytes});
    relative = AlignUp(relative + nbytes, alignment);
  }
  const uint64_t data_start = AlignUp(w.bytes().size(), alignment);
  w.bytes().resize(data_start, 0);
  uint64_t file_size = data_start;
  for (TensorEntry& t : dir.tensors) {
    t.offset += data_start;
    file_size = std::max(file_size, t.offset + t.nbytes);
  }
  if (!tensors.empty()) file_size = AlignUp(file_size, alignment);

  const std::string header(w.bytes().begin(), w.bytes().end());
  HOIST_RETURN_IF_ERROR(WriteModelFile(path, header, file_size, dir, fill));
  return dir;
}

}  // namespace hoist
