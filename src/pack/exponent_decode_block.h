// The packed form's group decoder as the GPU runs it: one thread block per group, one thread
// (lane) per unit, in steps separated by the block's barriers. Written once for both builds:
// the CUDA/HIP kernel (exponent_decode.cu) runs each step on every lane at once, the host
// (exponent_decode_host.cpp, the sim's decoder) runs each step for the lanes in turn. So the
// suite runs the kernel's own checks (a unit whose codes do not end where its length says, a
// code the table lacks, a group whose bytes do not hash to the recorded checksum) and the way
// their verdict reaches the caller (ReportBadGroup).
#pragma once

#include <cstdint>
#include <cstring>

#include "pack/exponent_decode_gpu.h"
#include "pack/exponent_layout.h"
#include "pack/xxh3_blocks.h"

// Host and device functions alike in nvcc's and hipcc's two passes; only their bodies differ
// (HOIST_XXH3_DEVICE_CODE), as xxh3_blocks.h does.
#if defined(__CUDACC__) || defined(__HIPCC__)
#define HOIST_DECODE_INLINE __host__ __device__ __forceinline__
#else
#define HOIST_DECODE_INLINE inline
#endif

namespace hoist::block_decode {

inline constexpr int kLanes = static_cast<int>(kGroupUnits);
inline constexpr int kTableEntries = 1 << kMaxCodeBits;

// What a block's lanes share (the GPU's shared memory, 40.3 KiB).
struct Shared {
  uint16_t table[kTableEntries];
  // The group's symbols; after the values are joined, the checksum's stripe sums (8 words per
  // 1024 decoded bytes: 8 KiB at most).
  alignas(16) uint8_t symbols[kGroupValues];
  uint32_t unit_offset[kLanes];
  uint64_t words[xxh3::kKeyWords];
};

HOIST_DECODE_INLINE uint64_t Min64(uint64_t a, uint64_t b) { return a < b ? a : b; }

// 4-aligned 32-bit reads, 8-aligned 64-bit writes: plain accesses on the device, memcpy on the
// host (where they would break C++'s aliasing rules).
HOIST_DECODE_INLINE uint32_t LoadWord(const uint8_t* p) {
#if defined(HOIST_XXH3_DEVICE_CODE)
  return *reinterpret_cast<const uint32_t*>(p);
#else
  uint32_t v = 0;
  std::memcpy(&v, p, 4);
  return v;
#endif
}
HOIST_DECODE_INLINE void StoreFour(uint16_t* out, const uint16_t v[4]) {
  const uint32_t x = static_cast<uint32_t>(v[0]) | (static_cast<uint32_t>(v[1]) << 16);
  const uint32_t y = static_cast<uint32_t>(v[2]) | (static_cast<uint32_t>(v[3]) << 16);
#if defined(HOIST_XXH3_DEVICE_CODE)
  uint2 packed;
  packed.x = x;
  packed.y = y;
  *reinterpret_cast<uint2*>(out) = packed;
#else
  const uint64_t both = static_cast<uint64_t>(x) | (static_cast<uint64_t>(y) << 32);
  std::memcpy(out, &both, 8);
#endif
}

// Records `group` as corrupt: the flag keeps the lowest such group (kNoBadGroup until then).
// Lanes of any block may call it at once.
HOIST_DECODE_INLINE void ReportBadGroup(uint64_t* flag, uint64_t group) {
#if defined(HOIST_XXH3_DEVICE_CODE)
  atomicMin(reinterpret_cast<unsigned long long*>(flag), static_cast<unsigned long long>(group));
#else
  // The host runs one block at a time on one thread.
  *flag = Min64(*flag, group);
#endif
}

HOIST_DECODE_INLINE uint64_t Units(const GpuExponentTensor& t) {
  return (t.values + kUnitValues - 1) / kUnitValues;
}
HOIST_DECODE_INLINE uint64_t Groups(const GpuExponentTensor& t) {
  return (t.values + kGroupValues - 1) / kGroupValues;
}
HOIST_DECODE_INLINE uint32_t ValuesOfGroup(const GpuExponentTensor& t, uint64_t group) {
  return static_cast<uint32_t>(Min64(kGroupValues, t.values - group * kGroupValues));
}

// Step 1, every lane: the decoding table and the checksum's key into shared memory; the lane's
// unit length into unit_offset[lane].
HOIST_DECODE_INLINE void LoadTables(const GpuExponentTensor& t, Shared& s, uint64_t group, int lane,
                                    const uint8_t* secret) {
  for (int i = lane; i < kTableEntries; i += kLanes) s.table[i] = t.table[i];
  if (lane == 0) xxh3::KeyWords(secret, s.words);
  const uint64_t unit = group * kGroupUnits + static_cast<uint64_t>(lane);
  s.unit_offset[lane] = unit < Units(t) ? t.unit_bits[unit] : 0;
}

// Step 2, lane 0 alone: unit lengths into offsets from the group's start (64 of them: a serial
// scan costs less than the barriers of a parallel one).
HOIST_DECODE_INLINE void ScanUnitOffsets(Shared& s) {
  uint32_t sum = 0;
  for (int i = 0; i < kLanes; ++i) {
    const uint32_t b = s.unit_offset[i];
    s.unit_offset[i] = sum;
    sum += b;
  }
}

// Step 3, every lane: its unit's codes into symbols. False when a code is not in the table or
// the codes do not end exactly at the unit's recorded length (reads stop past it).
HOIST_DECODE_INLINE bool DecodeUnit(const GpuExponentTensor& t, Shared& s, uint64_t group,
                                    int lane) {
  const uint64_t unit = group * kGroupUnits + static_cast<uint64_t>(lane);
  if (unit >= Units(t)) return true;
  const uint32_t bits = t.unit_bits[unit];
  const uint64_t start = t.group_start_bits[group] + s.unit_offset[lane];
  const uint32_t n = static_cast<uint32_t>(
      Min64(kUnitValues, t.values - unit * static_cast<uint64_t>(kUnitValues)));
  uint64_t word = start >> 5;
  const int skip = static_cast<int>(start & 31);
  uint64_t buffer = (static_cast<uint64_t>(LoadWord(t.coded + 4 * word)) |
                     (static_cast<uint64_t>(LoadWord(t.coded + 4 * (word + 1))) << 32)) >>
                    skip;
  int available = 64 - skip;
  word += 2;
  uint32_t used = 0;
  bool bad = false;
  uint8_t* out = s.symbols + static_cast<uint64_t>(lane) * kUnitValues;
  for (uint32_t i = 0; i < n; ++i) {
    if (available < 32) {
      buffer |= static_cast<uint64_t>(LoadWord(t.coded + 4 * word++)) << available;
      available += 32;
    }
    const uint16_t entry = s.table[buffer & (kTableEntries - 1)];
    const int length = entry >> 8;
    bad |= length == 0;
    out[i] = static_cast<uint8_t>(entry);
    buffer >>= length;
    available -= length;
    used += static_cast<uint32_t>(length);
    if (used > bits) break;  // codes running past the unit's end: reads stop there
  }
  return !bad && used == bits;
}

// Step 4, every lane: symbols and kept bits into the group's values, coalesced (lane k writes
// values 4k, 4k + 1, ... then 4(k + kLanes) ...).
template <int kValueBytes>
HOIST_DECODE_INLINE void JoinValues(const GpuExponentTensor& t, const Shared& s, uint64_t group,
                                    int lane) {
  const uint64_t first = group * kGroupValues;
  const uint32_t count = ValuesOfGroup(t, group);
  const uint32_t low_mask = (1u << t.shift) - 1;
  const auto u = static_cast<uint32_t>(lane);
  if constexpr (kValueBytes == 2) {
    const uint8_t* rest = t.rest + first;
    auto* out = static_cast<uint16_t*>(t.out) + first;
    const uint32_t whole = count & ~3u;
    for (uint32_t i = u * 4; i < whole; i += kLanes * 4) {
      const uint32_t r4 = LoadWord(rest + i);  // rest is 4-aligned
      const uint32_t s4 = LoadWord(s.symbols + i);
      uint16_t v[4];
      for (int k = 0; k < 4; ++k) {
        const uint32_t r = (r4 >> (8 * k)) & 0xff;
        const uint32_t sym = (s4 >> (8 * k)) & 0xff;
        v[k] = static_cast<uint16_t>((r & low_mask) | (sym << t.shift) |
                                     ((r >> t.shift) << (t.shift + 8)));
      }
      if ((reinterpret_cast<uintptr_t>(out + i) & 7) == 0) {
        StoreFour(out + i, v);
      } else {
        for (int k = 0; k < 4; ++k) out[i + k] = v[k];
      }
    }
    for (uint32_t i = whole + u; i < count; i += kLanes) {
      const uint32_t r = rest[i];
      const uint32_t sym = s.symbols[i];
      out[i] = static_cast<uint16_t>((r & low_mask) | (sym << t.shift) |
                                     ((r >> t.shift) << (t.shift + 8)));
    }
  } else {
    const uint8_t* rest = t.rest + first * 3;
    auto* out = static_cast<uint32_t*>(t.out) + first;
    for (uint32_t i = u; i < count; i += kLanes) {
      const uint8_t* r3 = rest + 3 * static_cast<uint64_t>(i);
      const uint32_t r = static_cast<uint32_t>(r3[0]) | (static_cast<uint32_t>(r3[1]) << 8) |
                         (static_cast<uint32_t>(r3[2]) << 16);
      const uint32_t sym = s.symbols[i];
      out[i] = (r & low_mask) | (sym << t.shift) | ((r >> t.shift) << (t.shift + 8));
    }
  }
}

// The group's decoded bytes, as the checksum reads them.
template <int kValueBytes>
HOIST_DECODE_INLINE const uint8_t* GroupBytes(const GpuExponentTensor& t, uint64_t group) {
  return static_cast<const uint8_t*>(t.out) + group * kGroupValues * kValueBytes;
}

// Step 5, every lane (when t.group_checksums is given): the stripe sums of the 1024-byte blocks
// lane, lane + kLanes, ... of the group's decoded bytes into shared memory.
template <int kValueBytes>
HOIST_DECODE_INLINE void SumStripes(const GpuExponentTensor& t, Shared& s, uint64_t group,
                                    int lane) {
  const uint64_t n = static_cast<uint64_t>(ValuesOfGroup(t, group)) * kValueBytes;
  if (n <= 240) return;  // hashed whole in step 6
  const uint8_t* in = GroupBytes<kValueBytes>(t, group);
  const bool aligned = (reinterpret_cast<uintptr_t>(in) & 7) == 0;
  auto* sums = reinterpret_cast<uint64_t*>(s.symbols);
  const uint64_t blocks = xxh3::Blocks(n);
  for (uint64_t b = static_cast<uint64_t>(lane); b < blocks; b += kLanes) {
    uint64_t acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    const int stripes = xxh3::StripesOfBlock(n, b);
    if (aligned) {
      xxh3::AddStripes<true>(acc, in + b * xxh3::kBlockBytes, stripes, s.words);
    } else {
      xxh3::AddStripes<false>(acc, in + b * xxh3::kBlockBytes, stripes, s.words);
    }
    for (int i = 0; i < 8; ++i) sums[8 * b + static_cast<uint64_t>(i)] = acc[i];
  }
}

// Step 6, lane 0 alone: whether the group's bytes hash to its recorded checksum.
template <int kValueBytes>
HOIST_DECODE_INLINE bool GroupMatchesChecksum(const GpuExponentTensor& t, const Shared& s,
                                              uint64_t group, const uint8_t* secret) {
  const uint64_t n = static_cast<uint64_t>(ValuesOfGroup(t, group)) * kValueBytes;
  const uint8_t* in = GroupBytes<kValueBytes>(t, group);
  const uint64_t want = t.group_checksums[group];
  if (n <= 240) return xxh3::HashShort(in, n, secret) == want;
  return xxh3::Finish(reinterpret_cast<const uint64_t*>(s.symbols), in, n, secret) == want;
}

}  // namespace hoist::block_decode
