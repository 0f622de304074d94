// XXH3-64 (seed 0, the default secret), cut so that a GPU thread block can compute it: the
// stripes of one 1024-byte block add into the eight accumulators independently of each other
// (AddStripes, one thread per block), and only the scramble between blocks runs in order
// (Finish). The packed form's GPU decoder checks each group's recorded checksum with it; host
// and device compile this header, and the test suite checks it against libxxhash on every
// length path. Transcribed from the XXH3 specification (xxhash 0.8, XXH3_64bits).
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__) || defined(__HIPCC__)
#define HOIST_HOST_DEVICE __host__ __device__
#else
#define HOIST_HOST_DEVICE
#endif
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
#define HOIST_XXH3_DEVICE_CODE 1
#endif

namespace hoist::xxh3 {

inline constexpr int kSecretBytes = 192;
inline constexpr uint64_t kStripeBytes = 64;
inline constexpr int kStripesPerBlock = 16;  // (kSecretBytes - kStripeBytes) / 8
inline constexpr uint64_t kBlockBytes = kStripeBytes * kStripesPerBlock;

// The default secret, as kSecretBytes bytes; the device keeps its own copy in constant memory.
#define HOIST_XXH3_SECRET                                                                         \
  {                                                                                               \
    0xb8, 0xfe, 0x6c, 0x39, 0x23, 0xa4, 0x4b, 0xbe, 0x7c, 0x01, 0x81, 0x2c, 0xf7, 0x21, 0xad,     \
        0x1c, 0xde, 0xd4, 0x6d, 0xe9, 0x83, 0x90, 0x97, 0xdb, 0x72, 0x40, 0xa4, 0xa4, 0xb7, 0xb3, \
        0x67, 0x1f, 0xcb, 0x79, 0xe6, 0x4e, 0xcc, 0xc0, 0xe5, 0x78, 0x82, 0x5a, 0xd0, 0x7d, 0xcc, \
        0xff, 0x72, 0x21, 0xb8, 0x08, 0x46, 0x74, 0xf7, 0x43, 0x24, 0x8e, 0xe0, 0x35, 0x90, 0xe6, \
        0x81, 0x3a, 0x26, 0x4c, 0x3c, 0x28, 0x52, 0xbb, 0x91, 0xc3, 0x00, 0xcb, 0x88, 0xd0, 0x65, \
        0x8b, 0x1b, 0x53, 0x2e, 0xa3, 0x71, 0x64, 0x48, 0x97, 0xa2, 0x0d, 0xf9, 0x4e, 0x38, 0x19, \
        0xef, 0x46, 0xa9, 0xde, 0xac, 0xd8, 0xa8, 0xfa, 0x76, 0x3f, 0xe3, 0x9c, 0x34, 0x3f, 0xf9, \
        0xdc, 0xbb, 0xc7, 0xc7, 0x0b, 0x4f, 0x1d, 0x8a, 0x51, 0xe0, 0x4b, 0xcd, 0xb4, 0x59, 0x31, \
        0xc8, 0x9f, 0x7e, 0xc9, 0xd9, 0x78, 0x73, 0x64, 0xea, 0xc5, 0xac, 0x83, 0x34, 0xd3, 0xeb, \
        0xc3, 0xc5, 0x81, 0xa0, 0xff, 0xfa, 0x13, 0x63, 0xeb, 0x17, 0x0d, 0xdd, 0x51, 0xb7, 0xf0, \
        0xda, 0x49, 0xd3, 0x16, 0x55, 0x26, 0x29, 0xd4, 0x68, 0x9e, 0x2b, 0x16, 0xbe, 0x58, 0x7d, \
        0x47, 0xa1, 0xfc, 0x8f, 0xf8, 0xb8, 0xd1, 0x7a, 0xd0, 0x31, 0xce, 0x45, 0xcb, 0x3a, 0x8f, \
        0x95, 0x16, 0x04, 0x28, 0xaf, 0xd7, 0xfb, 0xca, 0xbb, 0x4b, 0x40, 0x7e                    \
  }

inline constexpr uint64_t kPrime32_1 = 0x9E3779B1U;
inline constexpr uint64_t kPrime32_2 = 0x85EBCA77U;
inline constexpr uint64_t kPrime32_3 = 0xC2B2AE3DU;
inline constexpr uint64_t kPrime64_1 = 0x9E3779B185EBCA87ULL;
inline constexpr uint64_t kPrime64_2 = 0xC2B2AE3D27D4EB4FULL;
inline constexpr uint64_t kPrime64_3 = 0x165667B19E3779F9ULL;
inline constexpr uint64_t kPrime64_4 = 0x85EBCA77C2B2AE63ULL;
inline constexpr uint64_t kPrime64_5 = 0x27D4EB2F165667C5ULL;
inline constexpr uint64_t kPrimeMx1 = 0x165667919E3779F9ULL;
inline constexpr uint64_t kPrimeMx2 = 0x9FB21C651E98DF25ULL;

// Little-endian reads at any alignment.
HOIST_HOST_DEVICE inline uint64_t Read64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
HOIST_HOST_DEVICE inline uint32_t Read32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
         (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
}

HOIST_HOST_DEVICE inline uint64_t Mul128Fold64(uint64_t a, uint64_t b) {
#if defined(HOIST_XXH3_DEVICE_CODE)
  return (a * b) ^ __umul64hi(a, b);
#else
  const uint64_t lo_lo = (a & 0xFFFFFFFFULL) * (b & 0xFFFFFFFFULL);
  const uint64_t hi_lo = (a >> 32) * (b & 0xFFFFFFFFULL);
  const uint64_t lo_hi = (a & 0xFFFFFFFFULL) * (b >> 32);
  const uint64_t hi_hi = (a >> 32) * (b >> 32);
  const uint64_t cross = (lo_lo >> 32) + (hi_lo & 0xFFFFFFFFULL) + lo_hi;
  const uint64_t upper = (hi_lo >> 32) + (cross >> 32) + hi_hi;
  const uint64_t lower = (cross << 32) | (lo_lo & 0xFFFFFFFFULL);
  return lower ^ upper;
#endif
}

HOIST_HOST_DEVICE inline uint64_t Avalanche(uint64_t h) {
  h ^= h >> 37;
  h *= kPrimeMx1;
  return h ^ (h >> 32);
}
HOIST_HOST_DEVICE inline uint64_t Xxh64Avalanche(uint64_t h) {
  h ^= h >> 33;
  h *= kPrime64_2;
  h ^= h >> 29;
  h *= kPrime64_3;
  return h ^ (h >> 32);
}
HOIST_HOST_DEVICE inline uint64_t Rotl64(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
HOIST_HOST_DEVICE inline uint64_t Mix16(const uint8_t* in, const uint8_t* secret) {
  return Mul128Fold64(Read64(in) ^ Read64(secret), Read64(in + 8) ^ Read64(secret + 8));
}

// The hash of len <= 240 bytes (one thread's work).
HOIST_HOST_DEVICE inline uint64_t HashShort(const uint8_t* in, uint64_t len,
                                            const uint8_t* secret) {
  if (len == 0) return Xxh64Avalanche(Read64(secret + 56) ^ Read64(secret + 64));
  if (len <= 3) {
    const uint32_t combined =
        (static_cast<uint32_t>(in[0]) << 16) | (static_cast<uint32_t>(in[len >> 1]) << 24) |
        static_cast<uint32_t>(in[len - 1]) | (static_cast<uint32_t>(len) << 8);
    return Xxh64Avalanche(combined ^ static_cast<uint64_t>(Read32(secret) ^ Read32(secret + 4)));
  }
  if (len <= 8) {
    const uint64_t input64 = Read32(in + len - 4) + (static_cast<uint64_t>(Read32(in)) << 32);
    uint64_t h = input64 ^ (Read64(secret + 8) ^ Read64(secret + 16));
    h ^= Rotl64(h, 49) ^ Rotl64(h, 24);
    h *= kPrimeMx2;
    h ^= (h >> 35) + len;
    h *= kPrimeMx2;
    return h ^ (h >> 28);
  }
  if (len <= 16) {
    const uint64_t lo = Read64(in) ^ (Read64(secret + 24) ^ Read64(secret + 32));
    const uint64_t hi = Read64(in + len - 8) ^ (Read64(secret + 40) ^ Read64(secret + 48));
    const uint64_t swapped = ((lo & 0xFFULL) << 56) | ((lo & 0xFF00ULL) << 40) |
                             ((lo & 0xFF0000ULL) << 24) | ((lo & 0xFF000000ULL) << 8) |
                             ((lo >> 8) & 0xFF000000ULL) | ((lo >> 24) & 0xFF0000ULL) |
                             ((lo >> 40) & 0xFF00ULL) | (lo >> 56);
    return Avalanche(len + swapped + hi + Mul128Fold64(lo, hi));
  }
  uint64_t acc = len * kPrime64_1;
  if (len <= 128) {
    if (len > 32) {
      if (len > 64) {
        if (len > 96) {
          acc += Mix16(in + 48, secret + 96);
          acc += Mix16(in + len - 64, secret + 112);
        }
        acc += Mix16(in + 32, secret + 64);
        acc += Mix16(in + len - 48, secret + 80);
      }
      acc += Mix16(in + 16, secret + 32);
      acc += Mix16(in + len - 32, secret + 48);
    }
    acc += Mix16(in, secret);
    acc += Mix16(in + len - 16, secret + 16);
    return Avalanche(acc);
  }
  for (uint64_t i = 0; i < 8; ++i) acc += Mix16(in + 16 * i, secret + 16 * i);
  acc = Avalanche(acc);
  const uint64_t rounds = len / 16;
  for (uint64_t i = 8; i < rounds; ++i) acc += Mix16(in + 16 * i, secret + 16 * (i - 8) + 3);
  acc += Mix16(in + len - 16, secret + 136 - 17);
  return Avalanche(acc);
}

// The secret's words at every 8 bytes, which the stripes are keyed with: stripe n's word i is
// words[n + i].
inline constexpr int kKeyWords = kStripesPerBlock + 7;
HOIST_HOST_DEVICE inline void KeyWords(const uint8_t* secret, uint64_t* words) {
  for (int k = 0; k < kKeyWords; ++k) words[k] = Read64(secret + 8 * static_cast<uint64_t>(k));
}

// A little-endian 64-bit read, from an 8-byte-aligned address when kAligned.
template <bool kAligned>
HOIST_HOST_DEVICE inline uint64_t Load64(const uint8_t* p) {
  if constexpr (kAligned) {
#if defined(HOIST_XXH3_DEVICE_CODE)
    return *reinterpret_cast<const uint64_t*>(p);
#else
    uint64_t v = 0;
    std::memcpy(&v, p, 8);  // hoist's hosts are little-endian
    return v;
#endif
  } else {
    return Read64(p);
  }
}

// Adds `stripes` stripes from `in` into acc, stripe n keyed by words[n .. n + 7].
template <bool kAligned>
HOIST_HOST_DEVICE inline void AddStripes(uint64_t* acc, const uint8_t* in, int stripes,
                                         const uint64_t* words) {
  for (int s = 0; s < stripes; ++s) {
    const uint8_t* stripe = in + kStripeBytes * static_cast<uint64_t>(s);
    for (int i = 0; i < 8; ++i) {
      const uint64_t data = Load64<kAligned>(stripe + 8 * static_cast<uint64_t>(i));
      const uint64_t keyed = data ^ words[s + i];
      acc[i ^ 1] += data;
      acc[i] += (keyed & 0xFFFFFFFFULL) * (keyed >> 32);
    }
  }
}

// For len > 240: block b's stripes (b < Blocks(len), StripesOfBlock of them) are added into
// its zeroed eight sums, sums[8b, 8b + 8), by anyone, in any order; then Finish folds them in
// order into the hash.
HOIST_HOST_DEVICE inline uint64_t Blocks(uint64_t len) { return (len - 1) / kBlockBytes + 1; }
HOIST_HOST_DEVICE inline int StripesOfBlock(uint64_t len, uint64_t b) {
  const uint64_t full = (len - 1) / kBlockBytes;
  return b < full ? kStripesPerBlock
                  : static_cast<int>(((len - 1) - kBlockBytes * full) / kStripeBytes);
}
HOIST_HOST_DEVICE inline uint64_t Finish(const uint64_t* sums, const uint8_t* in, uint64_t len,
                                         const uint8_t* secret) {
  uint64_t acc[8] = {kPrime32_3, kPrime64_1, kPrime64_2, kPrime64_3,
                     kPrime64_4, kPrime32_2, kPrime64_5, kPrime32_1};
  const uint64_t full = (len - 1) / kBlockBytes;
  for (uint64_t b = 0; b < full; ++b) {
    for (int i = 0; i < 8; ++i) {
      uint64_t a = acc[i] + sums[8 * b + static_cast<uint64_t>(i)];
      a ^= a >> 47;
      a ^= Read64(secret + kSecretBytes - kStripeBytes + 8 * static_cast<uint64_t>(i));
      acc[i] = a * kPrime32_1;
    }
  }
  for (int i = 0; i < 8; ++i) acc[i] += sums[8 * full + static_cast<uint64_t>(i)];
  uint64_t last[8];
  for (int i = 0; i < 8; ++i)
    last[i] = Read64(secret + kSecretBytes - kStripeBytes - 7 + 8 * static_cast<uint64_t>(i));
  AddStripes<false>(acc, in + len - kStripeBytes, 1, last);
  uint64_t result = len * kPrime64_1;
  for (uint64_t i = 0; i < 4; ++i) {
    result += Mul128Fold64(acc[2 * i] ^ Read64(secret + 11 + 16 * i),
                           acc[2 * i + 1] ^ Read64(secret + 11 + 16 * i + 8));
  }
  return Avalanche(result);
}

}  // namespace hoist::xxh3
