#include <cuda_runtime.h>

#include "pack/exponent_decode_gpu.h"
#include "pack/exponent_layout.h"

namespace hoist {
namespace {

constexpr int kThreads = kGroupUnits;  // one per unit
constexpr int kTableEntries = 1 << kMaxCodeBits;

template <int kValueBytes>
__global__ void __launch_bounds__(kThreads) DecodeGroupsKernel(GpuExponentTensor t) {
  __shared__ uint16_t table[kTableEntries];
  __shared__ __align__(16) uint8_t symbols[kGroupValues];
  __shared__ uint32_t unit_offset[kThreads];
  const uint64_t group = blockIdx.x;
  const int lane = static_cast<int>(threadIdx.x);
  for (int i = lane; i < kTableEntries; i += kThreads) table[i] = t.table[i];

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
}

}  // namespace

int LaunchExponentDecode(const GpuExponentTensor& t, void* stream) {
  const uint64_t groups = (t.values + kGroupValues - 1) / kGroupValues;
  if (groups == 0) return 0;
  auto s = static_cast<cudaStream_t>(stream);
  if (t.value_bytes == 2) {
    DecodeGroupsKernel<2><<<static_cast<unsigned>(groups), kThreads, 0, s>>>(t);
  } else {
    DecodeGroupsKernel<4><<<static_cast<unsigned>(groups), kThreads, 0, s>>>(t);
  }
  return static_cast<int>(cudaGetLastError());
}

}  // namespace hoist
