// safetensors: reader (by the official reader's rules) and writer.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "base/status.h"
#include "format/gguf.h"  // TensorFill
#include "format/tensor_directory.h"
#include "io/file.h"

namespace hoist {

inline constexpr uint64_t kSafetensorsMaxHeaderBytes = 100'000'000;

// Reads the header of one safetensors file: one file (index 0), absolute offsets, tensors in
// the order of their data, __metadata__ as STRING entries.
Result<TensorDirectory> ReadSafetensors(File& file);

struct SafetensorsTensorSpec {
  std::string name;
  std::string dtype;            // "F32", "BF16", "F8_E4M3"
  std::vector<uint64_t> shape;  // outermost first
};

// Writes a safetensors file with tensors laid out in the given order. fill as in WriteGguf; a
// null fill leaves holes (zeros).
Result<TensorDirectory> WriteSafetensors(const std::string& path,
                                         const std::map<std::string, std::string>& metadata,
                                         const std::vector<SafetensorsTensorSpec>& tensors,
                                         const TensorFill& fill);

// Byte size of a tensor of this dtype and shape, or an error naming the rule broken.
Result<uint64_t> SafetensorsTensorBytes(const std::string& dtype,
                                        const std::vector<uint64_t>& shape);

}  // namespace hoist
