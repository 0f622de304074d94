// The packed form's decoder on a device: on a CUDA or HIP GPU (exponent_decode.cu), one thread
// block per group, one thread per unit decoding its codes into shared memory, then the block
// joining symbols and kept bits into the values, coalesced; built with HOIST_GPU_KERNELS. The
// sim runs the same steps on the host (exponent_decode_block.h). The plain types here keep the
// header free of CUDA's.
#pragma once

#include <cstdint>

namespace hoist {

// One coded tensor's parts in device memory (pack/exponent_code.h describes them). `coded` and
// `rest` 4-byte aligned.
struct GpuExponentTensor {
  const uint16_t* table = nullptr;  // DecodingTable's 4096 entries
  const uint64_t* group_start_bits = nullptr;
  const uint16_t* unit_bits = nullptr;
  const uint8_t* coded = nullptr;
  uint64_t coded_bytes = 0;  // with its 8 closing bytes
  const uint8_t* rest = nullptr;
  // XXH3-64 of each group's decoded bytes, checked when given.
  const uint64_t* group_checksums = nullptr;
  uint64_t values = 0;
  int value_bytes = 0;  // 2 or 4
  int shift = 0;
  void* out = nullptr;  // values * value_bytes bytes
  // Holds kNoBadGroup before the decode (the caller sets it); lowered to the first group found
  // corrupt (a unit whose codes do not end where unit_bits says, a code the table lacks, or,
  // where checked, a checksum that differs); untouched when every group decodes.
  uint64_t* first_bad_group = nullptr;
};
inline constexpr uint64_t kNoBadGroup = ~uint64_t{0};

// Starts decoding every group of `t` on `stream` (a cudaStream_t, or a hipStream_t in a HIP
// build). Returns the vendor's error of the launch (0: success).
int LaunchExponentDecode(const GpuExponentTensor& t, void* stream);

// The same decode on the host, on the calling thread, block after block (the sim's decoder).
void RunExponentDecodeOnHost(const GpuExponentTensor& t);

}  // namespace hoist
