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

#include "pack/exponent_decode_gpu.h"
#include "pack/exponent_layout.h"
#include "pack/xxh3_blocks.h"

namespace hoist {
namespace {

constexpr int kThreads = kGroupUnits;  // one per unit
constexpr int kTableEntries = 1 << kMaxCodeBits;
__constant__ uint8_t kSecret[xxh3::kSecretBytes] = HOIST_XXH3_SECRET;

// Whether the group's decoded bytes, `bytes` of them at `in` (just written by this block), hash
// to `want`: the blocks' stripes summed by the threads in parallel into `sums` (shared memory,
// 8 words per 1024 bytes), folded by one thread. Every thread calls it; lane 0's answer counts.
template <bool kAligned>
__device__ bool GroupHashes(const uint8_t* in, uint64_t bytes, uint64_t want, uint64_t* sums,
                            const uint64_t* words, int lane) {
  if (bytes <= 240) return lane != 0 || xxh3::HashShort(in, bytes, kSecret) == want;
  const uint64_t blocks = xxh3::Blocks(bytes);
  for (uint64_t b = static_cast<uint64_t>(lane); b < blocks; b += kThreads) {
    uint64_t acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    xxh3::AddStripes<kAligned>(acc, in + b * xxh3::kBlockBytes, xxh3::StripesOfBlock(bytes, b),
                               words);
    for (int i = 0; i < 8; ++i) sums[8 * b + i] = acc[i];
  }
  __syncthreads();
  return lane != 0 || xxh3::Finish(sums, in, bytes, kSecret) == want;
}

template <int kValueBytes>
__global__ void __launch_bounds__(kThreads) DecodeGroupsKernel(GpuExponentTensor t) {
  __shared__ uint16_t table[kTableEntries];
  __shared__ __align__(16) uint8_t symbols[kGroupValues];
  __shared__ uint32_t unit_offset[kThreads];
  __shared__ uint64_t words[xxh3::kKeyWords];
  const uint64_t group = blockIdx.x;
  const int lane = static_cast<int>(threadIdx.x);
  for (int i = lane; i < kTableEntries; i += kThreads) table[i] = t.table[i];
  if (lane == 0) xxh3::KeyWords(kSecret, words);

  // Where this thread's unit starts: the group's start plus the lengths of the units before it.
  const uint64_t units = (t.values + kUnitValues - 1) / kUnitValues;
  const uint64_t unit = group * kGroupUnits + static_cast<uint64_t>(lane);
  const uint32_t bits = unit < units ? t.unit_bits[unit] : 0;
  unit_offset[lane] = bits;
  __syncthreads();
  if (lane == 0) {  // 64 lengths: a serial scan costs less than the barriers of a parallel one
    uint32_t sum = 0;
    for (int i = 0; i < kThreads; ++i) {
      const uint32_t b = unit_offset[i];
      unit_offset[i] = sum;
      sum += b;
    }
  }
  __syncthreads();

  if (unit < units) {
    const uint64_t start = t.group_start_bits[group] + unit_offset[lane];
    const uint64_t first_value = unit * kUnitValues;
    const uint32_t n =
        static_cast<uint32_t>(min(static_cast<uint64_t>(kUnitValues), t.values - first_value));
    const auto* words = reinterpret_cast<const uint32_t*>(t.coded);
    uint64_t word = start >> 5;
    const int skip = static_cast<int>(start & 31);
    uint64_t buffer =
        (static_cast<uint64_t>(words[word]) | (static_cast<uint64_t>(words[word + 1]) << 32)) >>
        skip;
    int available = 64 - skip;
    word += 2;
    uint32_t used = 0;
    bool bad = false;
    uint8_t* out = symbols + lane * kUnitValues;
    for (uint32_t i = 0; i < n; ++i) {
      if (available < 32) {
        buffer |= static_cast<uint64_t>(words[word++]) << available;
        available += 32;
      }
      const uint16_t entry = table[buffer & (kTableEntries - 1)];
      const int length = entry >> 8;
      bad |= length == 0;
      out[i] = static_cast<uint8_t>(entry);
      buffer >>= length;
      available -= length;
      used += static_cast<uint32_t>(length);
      if (used > bits) break;  // codes running past the unit's end: reads stop there
    }
    if (bad || used != bits) {
      atomicMin(reinterpret_cast<unsigned long long*>(t.first_bad_group_plus_one),
                static_cast<unsigned long long>(group + 1));
    }
  }
  __syncthreads();

  // Symbols and kept bits into values, four values per thread per step, coalesced.
  const uint64_t first = group * kGroupValues;
  const uint32_t count =
      static_cast<uint32_t>(min(static_cast<uint64_t>(kGroupValues), t.values - first));
  const uint32_t low_mask = (1u << t.shift) - 1;
  if constexpr (kValueBytes == 2) {
    const uint8_t* rest = t.rest + first;
    auto* out = static_cast<uint16_t*>(t.out) + first;
    const uint32_t whole = count & ~3u;
    for (uint32_t i = static_cast<uint32_t>(lane) * 4; i < whole; i += kThreads * 4) {
      const uint32_t r4 = *reinterpret_cast<const uint32_t*>(rest + i);  // rest is 4-aligned
      const uint32_t s4 = *reinterpret_cast<const uint32_t*>(symbols + i);
      uint16_t v[4];
      for (int k = 0; k < 4; ++k) {
        const uint32_t r = (r4 >> (8 * k)) & 0xff;
        const uint32_t s = (s4 >> (8 * k)) & 0xff;
        v[k] = static_cast<uint16_t>((r & low_mask) | (s << t.shift) |
                                     ((r >> t.shift) << (t.shift + 8)));
      }
      uint2 packed;
      packed.x = static_cast<uint32_t>(v[0]) | (static_cast<uint32_t>(v[1]) << 16);
      packed.y = static_cast<uint32_t>(v[2]) | (static_cast<uint32_t>(v[3]) << 16);
      if ((reinterpret_cast<uintptr_t>(out + i) & 7) == 0) {
        *reinterpret_cast<uint2*>(out + i) = packed;
      } else {
        for (int k = 0; k < 4; ++k) out[i + k] = v[k];
      }
    }
    for (uint32_t i = whole + static_cast<uint32_t>(lane); i < count; i += kThreads) {
      const uint32_t r = rest[i];
      const uint32_t s = symbols[i];
      out[i] = static_cast<uint16_t>((r & low_mask) | (s << t.shift) |
                                     ((r >> t.shift) << (t.shift + 8)));
    }
  } else {
    const uint8_t* rest = t.rest + first * 3;
    auto* out = static_cast<uint32_t*>(t.out) + first;
    for (uint32_t i = static_cast<uint32_t>(lane); i < count; i += kThreads) {
      const uint32_t r = static_cast<uint32_t>(rest[3 * i]) |
                         (static_cast<uint32_t>(rest[3 * i + 1]) << 8) |
                         (static_cast<uint32_t>(rest[3 * i + 2]) << 16);
      const uint32_t s = symbols[i];
      out[i] = (r & low_mask) | (s << t.shift) | ((r >> t.shift) << (t.shift + 8));
    }
  }

  // The group's decoded bytes against its recorded checksum: a kept byte (sign, mantissa)
  // corrupted in the file or in transit is caught here, as the CPU decoder catches it.
  if (t.group_checksums == nullptr) return;
  __syncthreads();  // every value written, and the symbols no longer needed
  const auto* bytes = static_cast<const uint8_t*>(t.out) + first * kValueBytes;
  const uint64_t n = static_cast<uint64_t>(count) * kValueBytes;
  auto* sums = reinterpret_cast<uint64_t*>(symbols);  // 8 KiB at most of its 32
  const bool same = (reinterpret_cast<uintptr_t>(bytes) & 7) == 0
                        ? GroupHashes<true>(bytes, n, t.group_checksums[group], sums, words, lane)
                        : GroupHashes<false>(bytes, n, t.group_checksums[group], sums, words, lane);
  if (!same) {
    atomicMin(reinterpret_cast<unsigned long long*>(t.first_bad_group_plus_one),
              static_cast<unsigned long long>(group + 1));
  }
}

}  // namespace

int LaunchExponentDecode(const GpuExponentTensor& t, void* stream) {
  const uint64_t groups = (t.values + kGroupValues - 1) / kGroupValues;
  if (groups == 0) return 0;
  auto s = static_cast<KernelStream>(stream);
  if (t.value_bytes == 2) {
    DecodeGroupsKernel<2><<<static_cast<unsigned>(groups), kThreads, 0, s>>>(t);
  } else {
    DecodeGroupsKernel<4><<<static_cast<unsigned>(groups), kThreads, 0, s>>>(t);
  }
  return static_cast<int>(HOIST_KERNEL_LAST_ERROR());
}

}  // namespace hoist
