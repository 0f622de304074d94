// One source for CUDA (nvcc) and HIP (hipcc, HOIST_GPU_HIP): the kernel uses the names both
// share; the launch's stream and error are the vendor's.
#if defined(HOIST_GPU_HIP)
#include <hip/hip_runtime.h>
using KernelStream = hipStream_t;
#define HOIST_KERNEL_LAST_ERROR hipGetLastError
#else
#include <cuda_runtime.h>
using KernelStream = cudaStream_t;
#define HOIST_KERNEL_LAST_ERROR cudaGetLastError
#endif

#include "pack/exponent_decode_block.h"

namespace hoist {
namespace {

__constant__ uint8_t kSecret[xxh3::kSecretBytes] = HOIST_XXH3_SECRET;

// exponent_decode_block.h's steps, each on every lane at once, a barrier between them.
template <int kValueBytes>
__global__ void __launch_bounds__(block_decode::kLanes) DecodeGroupsKernel(GpuExponentTensor t) {
  namespace bd = block_decode;
  __shared__ bd::Shared s;
  const uint64_t group = blockIdx.x;
  const int lane = static_cast<int>(threadIdx.x);
  bd::LoadTables(t, s, group, lane, kSecret);
  __syncthreads();
  if (lane == 0) bd::ScanUnitOffsets(s);
  __syncthreads();
  if (!bd::DecodeUnit(t, s, group, lane)) bd::ReportBadGroup(t.first_bad_group, group);
  __syncthreads();
  bd::JoinValues<kValueBytes>(t, s, group, lane);
  // The group's decoded bytes against its recorded checksum: a kept byte (sign, mantissa)
  // corrupted in the file or in transit is caught here, as the CPU decoder catches it.
  if (t.group_checksums == nullptr) return;
  __syncthreads();  // every value written, and the symbols no longer needed
  bd::SumStripes<kValueBytes>(t, s, group, lane);
  __syncthreads();
  if (lane == 0 && !bd::GroupMatchesChecksum<kValueBytes>(t, s, group, kSecret)) {
    bd::ReportBadGroup(t.first_bad_group, group);
  }
}

}  // namespace

int LaunchExponentDecode(const GpuExponentTensor& t, void* stream) {
  const uint64_t groups = block_decode::Groups(t);
  if (groups == 0) return 0;
  auto s = static_cast<KernelStream>(stream);
  if (t.value_bytes == 2) {
    DecodeGroupsKernel<2><<<static_cast<unsigned>(groups), block_decode::kLanes, 0, s>>>(t);
  } else {
    DecodeGroupsKernel<4><<<static_cast<unsigned>(groups), block_decode::kLanes, 0, s>>>(t);
  }
  return static_cast<int>(HOIST_KERNEL_LAST_ERROR());
}

}  // namespace hoist
