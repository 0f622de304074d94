// Sample models shaped like real ones (a transformer's embedding, attention, feed-forward and
// norm tensors, mixed dtypes), with deterministic pseudo-random bytes: for the demo, the
// tests and the benchmarks.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "format/tensor_directory.h"

namespace hoist {

struct SampleSpec {
  std::string format = "gguf";  // "gguf" or "safetensors"
  uint64_t target_bytes = 64ull << 20;
  // dtypes used in turn for the weight matrices; norms are always F32. Empty: F16 and BF16
  // for safetensors, F16, Q8_0 and Q4_K for GGUF.
  std::vector<std::string> dtypes;
  int shards = 1;  // more than 1: an index (safetensors) or split files (GGUF)
  uint64_t seed = 1;
  // F32, F16 and BF16 tensors hold values drawn from a normal distribution of mean 0 and
  // standard deviation 0.02, as an initialised LLM's layers (what packing is measured on);
  // false: pseudo-random bytes, which no coder compresses.
  bool normal_values = false;
};

// Writes the sample model at path (for shards: path is the index or the first split, and the
// other files go beside it). Returns its directory.
Result<TensorDirectory> WriteSampleModel(const std::string& path, const SampleSpec& spec);

// The bytes of a sample tensor: byte p of tensor `tensor` depends only on (seed, tensor, p),
// so any piece can be produced alone.
void FillSampleBytes(uint64_t seed, size_t tensor, uint64_t offset, std::span<unsigned char> out);
// The same for a tensor of normal values (SampleSpec::normal_values) of a float dtype ("F32",
// "F16", "BF16"); false for another dtype.
bool FillSampleNormals(uint64_t seed, size_t tensor, const std::string& dtype, uint64_t offset,
                       std::span<unsigned char> out);

}  // namespace hoist
