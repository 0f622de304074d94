#include "io/file.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "io/fault_injection_file.h"
#include "io/memory_file.h"
#include "test_util.h"

namespace hoist {
namespace {

std::vector<unsigned char> Pattern(size_t n) {
  std::vector<unsigned char> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<unsigned char>((i * 131) >> 3);
  return v;
}

TEST(FileTest, ReadsExactBytesAtOffsets) {
  testing::TempDir dir;
  const auto bytes = Pattern(100000);
  testing::WriteBytes(dir.File("f"), bytes);
  auto file = OpenFile(dir.File("f"));
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  EXPECT_EQ((*file)->size(), bytes.size());
  std::vector<unsigned char> got(5000);
  ASSERT_TRUE((*file)->ReadExact(12345, got.data(), got.size()).ok());
  EXPECT_TRUE(std::equal(got.begin(), got.end(), bytes.begin() + 12345));
  EXPECT_TRUE((*file)->Advise(AccessHint::kSequential, 0, bytes.size()).ok());
  EXPECT_TRUE((*file)->Advise(AccessHint::kDropCache, 0, bytes.size()).ok());
}

TEST(FileTest, ReadPastEndNamesFileAndOffset) {
  testing::TempDir dir;
  testing::WriteBytes(dir.File("f"), Pattern(1000));
  auto file = OpenFile(dir.File("f"));
  ASSERT_TRUE(file.ok());
  std::vector<unsigned char> got(100);
  Status s = (*file)->ReadExact(950, got.data(), got.size());
  EXPECT_EQ(s.code(), Code::kIoError);
  EXPECT_EQ(s.message(),
            dir.File("f") + ": unexpected end of file at byte 1000 (50 more bytes expected)");
}

TEST(FileTest, OpenMissingIsNotFound) {
  auto file = OpenFile("/nonexistent/hoist/file");
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.status().code(), Code::kNotFound);
  EXPECT_NE(file.status().message().find("/nonexistent/hoist/file"), std::string::npos);
}

TEST(FileTest, DirectoryIsRejected) {
  testing::TempDir dir;
  auto file = OpenFile(dir.path());
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.status().code(), Code::kInvalidArgument);
}

std::unique_ptr<FaultInjectionFile> Faulty(const std::vector<unsigned char>& bytes,
                                           FaultPlan plan) {
  return std::make_unique<FaultInjectionFile>(std::make_unique<MemoryFile>("mem", bytes), plan);
}

TEST(FaultInjectionTest, ShortReadsAndInterruptsAreRetried) {
  const auto bytes = Pattern(1 << 16);
  FaultPlan plan;
  plan.short_read_max = 7;
  plan.interrupt_every = 3;
  auto file = Faulty(bytes, plan);
  std::vector<unsigned char> got(bytes.size());
  ASSERT_TRUE(file->ReadExact(0, got.data(), got.size()).ok());
  EXPECT_EQ(got, bytes);
  EXPECT_GT(file->reads(), bytes.size() / 7);
}

TEST(FaultInjectionTest, EioNamesTheOffset) {
  FaultPlan plan;
  plan.eio_at = 5000;
  auto file = Faulty(Pattern(10000), plan);
  std::vector<unsigned char> got(10000);
  Status s = file->ReadExact(0, got.data(), got.size());
  EXPECT_EQ(s.code(), Code::kIoError);
  EXPECT_EQ(s.message(), "mem: read failed at byte 5000: Input/output error");
  EXPECT_TRUE(file->ReadExact(0, got.data(), 4000).ok());
}

TEST(FaultInjectionTest, TruncationIsAnErrorWithOffset) {
  FaultPlan plan;
  plan.truncate_at = 6000;
  auto file = Faulty(Pattern(10000), plan);
  std::vector<unsigned char> got(10000);
  Status s = file->ReadExact(0, got.data(), got.size());
  EXPECT_EQ(s.message(), "mem: unexpected end of file at byte 6000 (4000 more bytes expected)");
}

TEST(FaultInjectionTest, EndlessInterruptsGiveUp) {
  FaultPlan plan;
  plan.interrupt_every = 1;
  auto file = Faulty(Pattern(100), plan);
  std::vector<unsigned char> got(100);
  Status s = file->ReadExact(0, got.data(), got.size());
  EXPECT_EQ(s.code(), Code::kIoError);
  EXPECT_NE(s.message().find("interrupted"), std::string::npos);
}

}  // namespace
}  // namespace hoist
