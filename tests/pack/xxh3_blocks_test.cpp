// The block-parallel XXH3 that the GPU decoder checks groups with (pack/xxh3_blocks.h) against
// libxxhash's XXH3_64bits: every length up to a few blocks (each of the short paths, each
// partial last block) and the sizes of whole groups, with the blocks summed in reverse order
// as threads would finish them.
#include "pack/xxh3_blocks.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "base/checksum.h"

namespace hoist {
namespace {

constexpr uint8_t kSecret[xxh3::kSecretBytes] = HOIST_XXH3_SECRET;

uint64_t BlockParallelXxh3(const uint8_t* in, uint64_t len) {
  if (len <= 240) return xxh3::HashShort(in, len, kSecret);
  const uint64_t blocks = xxh3::Blocks(len);
  uint64_t words[xxh3::kKeyWords];
  xxh3::KeyWords(kSecret, words);
  std::vector<uint64_t> sums(8 * blocks, 0);
  for (uint64_t b = blocks; b-- > 0;) {
    const uint8_t* block = in + b * xxh3::kBlockBytes;
    const int stripes = xxh3::StripesOfBlock(len, b);
    if (reinterpret_cast<uintptr_t>(in) % 8 == 0) {
      xxh3::AddStripes<true>(sums.data() + 8 * b, block, stripes, words);
    } else {
      xxh3::AddStripes<false>(sums.data() + 8 * b, block, stripes, words);
    }
  }
  return xxh3::Finish(sums.data(), in, len, kSecret);
}

TEST(Xxh3BlocksTest, EqualsLibxxhashOnEveryLengthPath) {
  std::mt19937_64 random(27);
  std::vector<uint8_t> bytes(131072 + 64);
  for (uint8_t& b : bytes) b = static_cast<uint8_t>(random());
  std::vector<uint64_t> lengths;
  for (uint64_t n = 0; n <= 3 * xxh3::kBlockBytes + 130; ++n) lengths.push_back(n);
  for (uint64_t n : {65535ULL, 65536ULL, 65537ULL, 98304ULL, 131071ULL, 131072ULL}) {
    lengths.push_back(n);
  }
  for (uint64_t n : lengths) {
    for (uint64_t at : {0ULL, 3ULL}) {  // aligned and not
      ASSERT_EQ(BlockParallelXxh3(bytes.data() + at, n), Xxh3(bytes.data() + at, n))
          << n << " bytes at " << at;
    }
  }
}

}  // namespace
}  // namespace hoist
