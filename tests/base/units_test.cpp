#include "base/units.h"

#include <gtest/gtest.h>

#include "base/checksum.h"

namespace hoist {
namespace {

TEST(UnitsTest, ParsesBinaryAndDecimalSizes) {
  EXPECT_EQ(ParseByteSize("4096").value(), 4096u);
  EXPECT_EQ(ParseByteSize("64KiB").value(), 65536u);
  EXPECT_EQ(ParseByteSize("1.5GiB").value(), 1610612736u);
  EXPECT_EQ(ParseByteSize("512MB").value(), 512000000u);
  EXPECT_EQ(ParseByteSize("2 GB").value(), 2000000000u);
  EXPECT_EQ(ParseByteSize("1mib").value(), 1048576u);
  EXPECT_EQ(ParseByteSize("0").value(), 0u);
}

TEST(UnitsTest, RejectsNonsense) {
  EXPECT_FALSE(ParseByteSize("").ok());
  EXPECT_FALSE(ParseByteSize("-5").ok());
  EXPECT_FALSE(ParseByteSize("12 parsecs").ok());
  EXPECT_FALSE(ParseByteSize("99999999999TB").ok());
}

TEST(UnitsTest, ParsesRates) {
  EXPECT_DOUBLE_EQ(ParseByteRate("5GB/s").value(), 5e9);
  EXPECT_DOUBLE_EQ(ParseByteRate("800MiB/s").value(), 800.0 * 1048576);
  EXPECT_FALSE(ParseByteRate("0GB/s").ok());
  EXPECT_DOUBLE_EQ(ParseByteRate("100B/s").value(), 100.0);
  EXPECT_DOUBLE_EQ(ParseByteRate("5 GB/s").value(), 5e9);
  // A bare number would be bytes a second, which nobody means: a rate says its unit.
  EXPECT_EQ(ParseByteRate("5").status().message(),
            "rate '5' needs a unit, such as 5GB/s, 800MiB/s or 100B/s");
}

TEST(UnitsTest, FormatsBytes) {
  EXPECT_EQ(FormatBytes(17), "17 B");
  EXPECT_EQ(FormatBytes(1536), "1.50 KiB");
  EXPECT_EQ(FormatBytes(3 * kGiB), "3.00 GiB");
}

TEST(UnitsTest, AlignAndOverflowHelpers) {
  EXPECT_EQ(AlignUp(33, 32), 64u);
  EXPECT_TRUE(IsPowerOfTwo(4096));
  EXPECT_FALSE(IsPowerOfTwo(0));
  EXPECT_FALSE(IsPowerOfTwo(48));
  uint64_t out = 0;
  EXPECT_FALSE(CheckedMul(UINT64_MAX / 2, 3, &out));
  EXPECT_TRUE(CheckedAdd(1, 2, &out));
  EXPECT_EQ(out, 3u);
}

TEST(ChecksumTest, StreamEqualsOneShot) {
  std::string text(10000, 'x');
  for (size_t i = 0; i < text.size(); ++i) text[i] = static_cast<char>(i * 31);
  Xxh3Stream stream;
  stream.Update(text.data(), 3000);
  stream.Update(text.data() + 3000, 7000);
  EXPECT_EQ(stream.Digest(), Xxh3(text.data(), text.size()));
  EXPECT_EQ(HexDigest(0x1234), "0000000000001234");
  // XXH3-64 of the empty input, from the reference implementation.
  EXPECT_EQ(HexDigest(Xxh3("", 0)), "2d06800538d394c2");
}

}  // namespace
}  // namespace hoist
