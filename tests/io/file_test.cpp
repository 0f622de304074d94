#include "io/file.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <numeric>
#include <vector>

#ifndef _WIN32
#include <sys/stat.h>
#endif

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

#ifndef _WIN32
TEST(FileTest, OnlyRegularFilesOpenAndAFifoDoesNotBlock) {
  testing::TempDir dir;
  const std::string fifo = dir.File("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto file = OpenFile(fifo);  // would block forever without a writer
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(file.status().message(),
            fifo + ": is a FIFO (named pipe); a model is read from regular files");
  // Linux refuses O_DIRECT on a FIFO (EINVAL) before it could block.
  EXPECT_FALSE(OpenFile(fifo, OpenOptions{true}).ok());
  auto dev = OpenFile("/dev/null");
  ASSERT_FALSE(dev.ok());
  EXPECT_EQ(dev.status().message(),
            "/dev/null: is a character device; a model is read from regular files");
  auto directory = OpenFile(dir.path());
  ASSERT_FALSE(directory.ok());
  EXPECT_EQ(directory.status().message(),
            dir.path() + ": is a directory; a model is read from regular files");
  auto mapped = MapFile(fifo);
  ASSERT_FALSE(mapped.ok());
  EXPECT_EQ(mapped.status().code(), Code::kInvalidArgument);
}
#endif

TEST(FileTest, IdentityTellsAReplacedFileFromAWrittenOneFromTheSame) {
  testing::TempDir dir;
  testing::WriteBytes(dir.File("f"), Pattern(5000));
  auto file = OpenFile(dir.File("f"));
  ASSERT_TRUE(file.ok());
  const FileIdentity at_open = (*file)->identity();
  ASSERT_TRUE(at_open.known);
  EXPECT_EQ(at_open.size, 5000u);
  {
    auto again = OpenFile(dir.File("f"));
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(DescribeFileChange(at_open, (*again)->identity()), "");
  }
  // Another file renamed over the name: the name leads elsewhere, the open handle does not.
  testing::WriteBytes(dir.File("g"), Pattern(5000));
#ifdef _WIN32
  file->reset();  // wine refuses to rename over an open file, whatever its sharing mode
#endif
  std::filesystem::rename(dir.File("g"), dir.File("f"));
  auto replaced = OpenFile(dir.File("f"));
  ASSERT_TRUE(replaced.ok());
  EXPECT_EQ(DescribeFileChange(at_open, (*replaced)->identity()), "replaced by another file");
#ifndef _WIN32
  auto through_handle = (*file)->CurrentIdentity();
  ASSERT_TRUE(through_handle.ok());
  EXPECT_EQ(DescribeFileChange(at_open, *through_handle), "");
#endif
  // Written to through the name: the open handle sees it.
  testing::WriteBytes(dir.File("f"), Pattern(6000));
  auto written = (*replaced)->CurrentIdentity();
  ASSERT_TRUE(written.ok());
  EXPECT_EQ(DescribeFileChange((*replaced)->identity(), *written),
            "written to (its size went from 5000 to 6000 bytes)");
  // Sources without an identity are never compared.
  MemoryFile memory("m", Pattern(10));
  EXPECT_EQ(DescribeFileChange(at_open, memory.identity()), "");
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
