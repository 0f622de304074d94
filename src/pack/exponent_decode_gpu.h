// The packed form's decoder on a CUDA device (exponent_decode.cu): one thread block per group,
// one thread per unit decoding its codes into shared memory, then the block joining symbols and
// kept bits into the values, coalesced. Built with HOIST_GPU_KERNELS (nvcc); the plain types
// here keep the header free of CUDA's.
#pragma once

#include <cstdint>

namespace hoist {

// One coded tensor's parts in device memory (pack/exponent_code.h describes them). `coded`
// must be readable 8 bytes past its end and 4-byte aligned, `rest` 4-byte aligned.
struct GpuExponentTensor {
  const uint16_t* table = nullptr;  // DecodingTable's 4096 entries
  const uint64_t* group_start_bits = nullptr;
  const uint16_t* unit_bits = nullptr;
  const uint8_t* coded = nullptr;
  const uint8_t* rest = nullptr;
  uint64_t values = 0;
  int value_bytes = 0;  // 2 or 4
  int shift = 0;
  void* out = nullptr;  // values * value_bytes bytes
  // Set to 1 + the first group found corrupt (a unit whose codes do not end where unit_bits
  // says, or a code the table lacks); untouched when every group decodes.
  uint64_t* first_bad_group_plus_one = nullptr;
};

// Starts decoding every group of `t` on `stream` (a cudaStream_t). Returns the CUDA error of
// the launch (0: cudaSuccess).
int LaunchExponentDecode(const GpuExponentTensor& t, void* stream);

}  // namespace hoist
