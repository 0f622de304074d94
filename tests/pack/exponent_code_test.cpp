// The exponent coder alone: every bit pattern of every coded dtype round-trips, the codes stay
// within their length limit, and a corrupted stream is an error naming the group.
#include "pack/exponent_code.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

namespace hoist {
namespace {

std::vector<uint8_t> RoundTrip(const std::vector<uint8_t>& bytes, FloatSplit split, int threads,
                               ExponentCoded* coded_out = nullptr) {
  const uint64_t values = bytes.size() / split.value_bytes;
  ExponentCoded coded = EncodeExponents(bytes.data(), values, split, threads);
  auto table = DecodingTable(coded.code_lengths, "t");
  EXPECT_TRUE(table.ok()) << table.status().ToString();
  std::vector<uint8_t> out(bytes.size());
  const Status s =
      DecodeGroups(ViewOf(coded), *table, 0, coded.group_start_bits.size(), out.data(), "t");
  EXPECT_TRUE(s.ok()) << s.ToString();
  if (coded_out != nullptr) *coded_out = std::move(coded);
  return out;
}

// `values` BF16 values drawn from N(0, 0.02) (truncated from f32), as trained weights are.
std::vector<uint8_t> NormalBf16(size_t values, unsigned seed) {
  std::mt19937 random(seed);
  std::normal_distribution<float> normal(0, 0.02f);
  std::vector<uint8_t> bytes(2 * values);
  for (size_t i = 0; i < values; ++i) {
    const float f = normal(random);
    uint32_t x = 0;
    std::memcpy(&x, &f, 4);
    const auto h = static_cast<uint16_t>(x >> 16);
    std::memcpy(&bytes[2 * i], &h, 2);
  }
  return bytes;
}

TEST(ExponentCode, EveryBitPatternOfEveryDtypeRoundTrips) {
  // All 65536 16-bit patterns (NaNs, infinities, subnormals, both zeros), in a scrambled order
  // and several groups' worth, for bf16 and f16; f32 from random words and the special values.
  std::vector<uint8_t> halves;
  std::mt19937 random(7);
  for (int round = 0; round < 3; ++round) {
    std::vector<uint16_t> all(65536);
    for (uint32_t i = 0; i < 65536; ++i) all[i] = static_cast<uint16_t>(i);
    std::shuffle(all.begin(), all.end(), random);
    const auto* p = reinterpret_cast<const uint8_t*>(all.data());
    halves.insert(halves.end(), p, p + all.size() * 2);
  }
  halves.resize(halves.size() - 6);  // a last unit and group that are not full
  for (const char* dtype : {"BF16", "F16"}) {
    SCOPED_TRACE(dtype);
    EXPECT_EQ(RoundTrip(halves, *SplitOf(dtype), 1), halves);
    EXPECT_EQ(RoundTrip(halves, *SplitOf(dtype), 4), halves);
  }
  std::vector<float> floats = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1e-45f, -3.4e38f};
  std::normal_distribution<float> normal(0, 0.02f);
  for (int i = 0; i < 100000; ++i) floats.push_back(normal(random));
  std::vector<uint8_t> f32(floats.size() * 4);
  std::memcpy(f32.data(), floats.data(), f32.size());
  EXPECT_EQ(RoundTrip(f32, *SplitOf("F32"), 3), f32);
  EXPECT_FALSE(SplitOf("Q4_K").has_value());
  EXPECT_FALSE(SplitOf("I32").has_value());
}

TEST(ExponentCode, TrainedLikeWeightsShrinkAndCodesStayWithinTheirLimit) {
  const std::vector<uint8_t> bf16 = NormalBf16(200000, 3);
  ExponentCoded coded;
  EXPECT_EQ(RoundTrip(bf16, *SplitOf("BF16"), 2, &coded), bf16);
  EXPECT_LT(static_cast<double>(coded.bytes()) / static_cast<double>(bf16.size()), 0.70);
  for (uint8_t length : coded.code_lengths) EXPECT_LE(length, kMaxCodeBits);
  // One value repeated: a one-symbol code still decodes.
  std::vector<uint8_t> same(2 * 5000, 0x3c);
  EXPECT_EQ(RoundTrip(same, *SplitOf("F16"), 1), same);
}

TEST(ExponentCode, ACorruptedStreamIsAnErrorNamingTheGroupNeverWrongBytes) {
  const std::vector<uint8_t> bytes = NormalBf16(kGroupValues * 3, 5);
  const ExponentCoded good = EncodeExponents(bytes.data(), bytes.size() / 2, *SplitOf("BF16"));
  auto table = DecodingTable(good.code_lengths, "t");
  ASSERT_TRUE(table.ok());
  std::vector<uint8_t> out(bytes.size());
  // A flipped bit in group 1's codes, in its kept bits, in a recorded unit length.
  for (int fault = 0; fault < 3; ++fault) {
    ExponentCoded bad = good;
    if (fault == 0) bad.coded[bad.group_start_bits[1] / 8 + 100] ^= 0x10;
    if (fault == 1) bad.rest[kGroupValues + 7] ^= 0x01;
    if (fault == 2) bad.unit_bits[kGroupUnits + 3] += 1;
    const Status s = DecodeGroups(ViewOf(bad), *table, 0, 3, out.data(), "m.hoistpack: tensor w");
    ASSERT_FALSE(s.ok()) << fault;
    EXPECT_EQ(s.code(), Code::kInvalidModel);
    EXPECT_EQ(s.message().rfind("m.hoistpack: tensor w, block 1 (values 32768-65535): ", 0), 0u)
        << s.message();
    EXPECT_NE(s.message().find("(the packed file is corrupt)"), std::string::npos);
  }
  // A unit recorded shorter than its codes, at the very end of the coded bytes held: the reads
  // stop at its recorded end (ASan sees any past it) and the group is named.
  {
    ExponentCoded bad = good;
    bad.unit_bits[0] = 64;
    const uint64_t held = (bad.unit_bits[0] + 7) / 8 + 8;
    const std::vector<uint8_t> coded(bad.coded.begin(),
                                     bad.coded.begin() + static_cast<std::ptrdiff_t>(held));
    ExponentView view = ViewOf(bad);
    view.coded = coded;
    const Status s = DecodeGroups(view, *table, 0, 1, out.data(), "t");
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.message().rfind("t, block 0 (values 0-32767): ", 0), 0u) << s.message();
  }
  // Lengths that are no prefix code, or too long, are refused when the table is built.
  std::array<uint8_t, 256> lengths{};
  lengths[0] = lengths[1] = lengths[2] = 1;
  EXPECT_EQ(DecodingTable(lengths, "t").status().code(), Code::kInvalidModel);
  lengths = {};
  lengths[9] = 13;
  EXPECT_EQ(DecodingTable(lengths, "t").status().code(), Code::kInvalidModel);
}

}  // namespace
}  // namespace hoist
