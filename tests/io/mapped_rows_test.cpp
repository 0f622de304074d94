// Column slices gathered out of the page cache (File::GatherCachedRows) and the SIGBUS guard
// under it: the bytes are the file's, anything the gather cannot do is a plain "no", and a
// mapping that loses its pages fails the copy instead of killing the process.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "io/file.h"
#include "io/memory_file.h"
#include "test_util.h"

#ifndef _WIN32
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <sys/wait.h>

#include <csignal>
#include <cstdio>

#include "io/mapped_rows.h"
#endif

namespace hoist {
namespace {

std::vector<unsigned char> RandomBytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<unsigned char> v(n);
  for (auto& b : v) b = static_cast<unsigned char>(rng());
  return v;
}

std::vector<unsigned char> Expected(const std::vector<unsigned char>& file, uint64_t offset,
                                    uint64_t width, uint64_t pitch, uint64_t rows) {
  std::vector<unsigned char> out;
  for (uint64_t r = 0; r < rows; ++r) {
    const auto* at = file.data() + offset + r * pitch;
    out.insert(out.end(), at, at + width);
  }
  return out;
}

TEST(RowsInsideTest, CountsRowsToTheLastByteWithoutOverflow) {
  EXPECT_TRUE(RowsInside(100, 0, 10, 30, 4));   // last row ends at 100
  EXPECT_FALSE(RowsInside(100, 1, 10, 30, 4));  // ... at 101
  EXPECT_TRUE(RowsInside(100, 90, 10, 0, 1));   // one row needs no pitch
  EXPECT_FALSE(RowsInside(100, 0, 10, 5, 2));   // rows wider than their pitch
  EXPECT_FALSE(RowsInside(100, 0, 0, 30, 2));   // nothing asked
  EXPECT_FALSE(RowsInside(100, 0, 10, 30, 0));
  EXPECT_FALSE(RowsInside(100, 101, 1, 1, 1));
  EXPECT_FALSE(RowsInside(UINT64_MAX, 0, 1, UINT64_MAX / 2, 4));  // (rows - 1) * pitch overflows
}

TEST(GatherCachedRowsTest, MemoryFilesGatherByteExact) {
  const auto bytes = RandomBytes(1 << 16, 1);
  MemoryFile file("m", bytes);
  std::vector<unsigned char> got(8 * 100);
  ASSERT_TRUE(file.GatherCachedRows(37, 100, 1000, 8, got.data()));
  EXPECT_TRUE(got == Expected(bytes, 37, 100, 1000, 8));
  EXPECT_FALSE(file.GatherCachedRows(1 << 16, 1, 1, 1, got.data()));
}

#ifndef _WIN32
TEST(GatherCachedRowsTest, CachedRowsOfAFileGatherByteExactAtAnyOffsetWidthAndPitch) {
  testing::TempDir dir;
  const auto bytes = RandomBytes(3 << 20, 2);
  testing::WriteBytes(dir.File("f"), bytes);
  auto file = OpenFile(dir.File("f"));
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  // Written just now, so cached (unless the machine dropped it; then the gather says so).
  std::vector<unsigned char> warm(bytes.size());
  ASSERT_TRUE((*file)->ReadExact(0, warm.data(), warm.size()).ok());
  std::mt19937_64 rng(3);
  for (int k = 0; k < 200; ++k) {
    const uint64_t pitch = 1 + rng() % 40000;
    const uint64_t width = 1 + rng() % pitch;
    const uint64_t rows = 1 + rng() % std::max<uint64_t>(1, (bytes.size() - width) / pitch);
    const uint64_t room = bytes.size() - ((rows - 1) * pitch + width);
    const uint64_t offset = rng() % (room + 1);
    std::vector<unsigned char> got(rows * width);
    ASSERT_TRUE((*file)->GatherCachedRows(offset, width, pitch, rows, got.data()))
        << "offset " << offset << " width " << width << " pitch " << pitch << " rows " << rows;
    ASSERT_TRUE(got == Expected(bytes, offset, width, pitch, rows))
        << "offset " << offset << " width " << width << " pitch " << pitch << " rows " << rows;
  }
  // Rows past the end are refused, not read.
  std::vector<unsigned char> got(4096);
  EXPECT_FALSE((*file)->GatherCachedRows(bytes.size() - 100, 100, 200, 2, got.data()));
  EXPECT_FALSE((*file)->GatherCachedRows(bytes.size(), 1, 1, 1, got.data()));
}

TEST(GatherCachedRowsTest, PagesThatAreNotCachedAreNotGathered) {
  testing::TempDir dir;
  const auto bytes = RandomBytes(4 << 20, 4);
  testing::WriteBytes(dir.File("f"), bytes);
  const int fd = ::open(dir.File("f").c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::fdatasync(fd), 0);
  ASSERT_EQ(::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
  // Whether the pages left the cache is the kernel's call (tmpfs keeps them): ask it.
  void* map = ::mmap(nullptr, bytes.size(), PROT_READ, MAP_SHARED, fd, 0);
  ASSERT_NE(map, MAP_FAILED);
  std::vector<unsigned char> resident(bytes.size() / 4096 + 1);
  ASSERT_EQ(::mincore(map, bytes.size(), resident.data()), 0);
  ::munmap(map, bytes.size());
  ::close(fd);
  if ((resident[0] & 1) != 0) GTEST_SKIP() << "this file system keeps the file cached";
  auto file = OpenFile(dir.File("f"));
  ASSERT_TRUE(file.ok());
  std::vector<unsigned char> got(16 * 1000);
  EXPECT_FALSE((*file)->GatherCachedRows(0, 1000, 8192, 16, got.data()));
  // Read (and so cached), the same rows gather.
  std::vector<unsigned char> whole(16 * 8192);
  ASSERT_TRUE((*file)->ReadExact(0, whole.data(), whole.size()).ok());
  ASSERT_TRUE((*file)->GatherCachedRows(0, 1000, 8192, 16, got.data()));
  EXPECT_TRUE(got == Expected(bytes, 0, 1000, 8192, 16));
}

TEST(GatherCachedRowsTest, DirectFilesDoNotGather) {
  testing::TempDir dir;
  const auto bytes = RandomBytes(1 << 20, 5);
  testing::WriteBytes(dir.File("f"), bytes);
  auto file = OpenFile(dir.File("f"), OpenOptions{true});
  if (!file.ok()) GTEST_SKIP() << file.status().ToString();
  std::vector<unsigned char> got(1000);
  EXPECT_FALSE((*file)->GatherCachedRows(0, 100, 1000, 10, got.data()));
}

TEST(GatherCachedRowsTest, AFileCutShortUnderTheMappingFailsTheGatherAndTheProcessLives) {
  testing::TempDir dir;
  const auto bytes = RandomBytes(1 << 20, 6);
  testing::WriteBytes(dir.File("f"), bytes);
  auto file = OpenFile(dir.File("f"));
  ASSERT_TRUE(file.ok());
  std::vector<unsigned char> got(64 * 1024);
  ASSERT_TRUE((*file)->GatherCachedRows(0, 1024, 16384, 64, got.data()));  // maps the file
  ASSERT_EQ(::truncate(dir.File("f").c_str(), 4096), 0);
  EXPECT_FALSE((*file)->GatherCachedRows(0, 1024, 16384, 64, got.data()));
  // The read that follows a failed gather names the file and the offset.
  std::vector<unsigned char> row(1024);
  const Status read = (*file)->ReadExact(16384, row.data(), row.size());
  EXPECT_FALSE(read.ok());
  EXPECT_NE(read.message().find(dir.File("f")), std::string::npos) << read.ToString();
}

// The guard itself, past the page-cache check: the pages of a mapping beyond a file's new end
// raise SIGBUS when touched.
TEST(CopyRowsFromMappingTest, ASigbusInsideTheMappingFailsTheCopyOnlyThatCopy) {
  testing::TempDir dir;
  const long page = ::sysconf(_SC_PAGESIZE);
  const auto bytes = RandomBytes(static_cast<size_t>(page) * 16, 7);
  testing::WriteBytes(dir.File("f"), bytes);
  const int fd = ::open(dir.File("f").c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  void* map = ::mmap(nullptr, bytes.size(), PROT_READ, MAP_SHARED, fd, 0);
  ASSERT_NE(map, MAP_FAILED);
  const auto* base = static_cast<const unsigned char*>(map);
  std::vector<unsigned char> got(8 * 100);
  ASSERT_TRUE(CopyRowsFromMapping(base + 10, 100, static_cast<uint64_t>(page), 8, got.data(), map,
                                  bytes.size()));
  EXPECT_TRUE(got == Expected(bytes, 10, 100, static_cast<uint64_t>(page), 8));
  ASSERT_EQ(::truncate(dir.File("f").c_str(), page * 2), 0);
  for (int k = 0; k < 3; ++k) {  // again and again: the guard is armed each time
    EXPECT_FALSE(CopyRowsFromMapping(base + 10, 100, static_cast<uint64_t>(page), 8, got.data(),
                                     map, bytes.size()));
  }
  // Rows still inside the file copy as before.
  ASSERT_TRUE(CopyRowsFromMapping(base, 100, static_cast<uint64_t>(page), 2, got.data(), map,
                                  bytes.size()));
  EXPECT_TRUE(std::equal(got.begin(), got.begin() + 200,
                         Expected(bytes, 0, 100, static_cast<uint64_t>(page), 2).begin()));
  ::munmap(map, bytes.size());
  ::close(fd);
}

TEST(CopyRowsFromMappingDeathTest, ASigbusOutsideAGuardedCopyStillEndsTheProcess) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  testing::TempDir dir;
  const long page = ::sysconf(_SC_PAGESIZE);
  testing::WriteBytes(dir.File("f"), RandomBytes(static_cast<size_t>(page) * 4, 8));
  EXPECT_EXIT(
      {
        std::vector<unsigned char> got(100);
        const int fd = ::open(dir.File("f").c_str(), O_RDWR);
        auto* map = static_cast<volatile unsigned char*>(
            ::mmap(nullptr, static_cast<size_t>(page) * 4, PROT_READ, MAP_SHARED, fd, 0));
        // The guard's handler is installed by a first copy.
        CopyRowsFromMapping(const_cast<unsigned char*>(map), 100, 100, 1, got.data(),
                            const_cast<unsigned char*>(map), static_cast<uint64_t>(page) * 4);
        (void)::ftruncate(fd, 0);
        std::printf("%d\n", map[page * 2]);  // not in a guarded copy: SIGBUS as ever
      },
      // Killed by SIGBUS; under a sanitizer, whose handler was there first, reported and exited.
      [](int status) {
        return WIFSIGNALED(status) ? WTERMSIG(status) == SIGBUS : WEXITSTATUS(status) != 0;
      },
      "");
}
#endif

}  // namespace
}  // namespace hoist
