// GGUF (versions 2 and 3): reader and writer.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "format/tensor_directory.h"
#include "io/file.h"

namespace hoist {

inline constexpr uint32_t kGgufDefaultAlignment = 32;
inline constexpr uint32_t kGgufMaxDims = 4;
inline constexpr uint32_t kGgufMaxNameBytes = 64;
inline constexpr int kGgufMaxArrayNesting = 16;

enum class GgufValueType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};

// Reads the header of one GGUF file. The directory has one file (index 0), absolute offsets,
// and warnings for overlapping tensors. Every rule of the format that is broken is an
// invalid-model error naming the file, the byte and the rule.
Result<TensorDirectory> ReadGguf(File& file);

// What the GGUF writer needs to know of one tensor.
struct GgufTensorSpec {
  std::string name;
  std::string dtype;            // a ggml type name: "F32", "Q4_K"
  std::vector<uint64_t> shape;  // outermost first, as TensorEntry::shape
  uint64_t gap_before = 0;      // extra bytes (a multiple of the alignment) left before its data
};

// Writes a GGUF v3 file. metadata values use MetadataEntry's types; general.alignment is
// honoured if present. fill(tensor, offset_in_tensor, out) supplies the tensor's bytes in
// pieces and returns true, or returns false to leave that piece a hole (zeros, sparse where the
// file system allows); a null fill leaves every tensor a hole. Returns the directory written.
using TensorFill = std::function<bool(size_t tensor, uint64_t offset, std::span<unsigned char>)>;
Result<TensorDirectory> WriteGguf(const std::string& path,
                                  const std::vector<MetadataEntry>& metadata,
                                  const std::vector<GgufTensorSpec>& tensors,
                                  const TensorFill& fill);

// Byte size of a tensor of this ggml type and shape, or an error naming the rule broken.
Result<uint64_t> GgmlTensorBytes(const std::string& dtype, const std::vector<uint64_t>& shape);

}  // namespace hoist
