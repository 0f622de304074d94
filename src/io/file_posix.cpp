// POSIX files: pread/pwrite at 64-bit offsets. Compiled on every platform but Windows.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "io/file.h"
#include "io/mapped_rows.h"

namespace hoist {
namespace {

static_assert(sizeof(off_t) == 8, "hoist needs a 64-bit off_t (build with _FILE_OFFSET_BITS=64)");

// pread and pwrite take at most SSIZE_MAX bytes; Linux moves at most 0x7ffff000 per call.
constexpr size_t kMaxIoPerCall = size_t{1} << 30;

FileIdentity IdentityOf(const struct stat& st) {
  auto ns = [](const struct timespec& t) {
    return static_cast<int64_t>(t.tv_sec) * 1'000'000'000 + static_cast<int64_t>(t.tv_nsec);
  };
  FileIdentity id;
  id.known = true;
  id.device = static_cast<uint64_t>(st.st_dev);
  id.inode = static_cast<uint64_t>(st.st_ino);
  id.size = static_cast<uint64_t>(st.st_size);
  id.modified_ns = ns(st.st_mtim);
  return id;
}

// What a file of this type is called in an error message.
const char* FileTypeName(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

class PosixFile final : public File {
 public:
  PosixFile(std::string path, int fd, const FileIdentity& identity, bool direct)
      : path_(std::move(path)), fd_(fd), identity_(identity), direct_(direct) {}
  ~PosixFile() override {
    if (mapping_ != nullptr) ::munmap(mapping_, identity_.size);
    ::close(fd_);
  }

  const std::string& path() const override { return path_; }
  uint64_t size() const override { return identity_.size; }
  bool direct() const override { return direct_; }
  uint64_t direct_alignment() const override { return direct_ ? 4096 : 1; }
  FileIdentity identity() const override { return identity_; }
  Result<FileIdentity> CurrentIdentity() override {
    struct stat st {};
    if (::fstat(fd_, &st) != 0) return ErrnoStatus(errno, "cannot stat", path_);
    return IdentityOf(st);
  }

  Result<RawRead> ReadSome(uint64_t offset, void* dst, size_t n) override {
    if (offset > static_cast<uint64_t>(INT64_MAX)) {
      return Status::IoError(path_ + ": read offset " + std::to_string(offset) + " out of range");
    }
    const size_t want = n < kMaxIoPerCall ? n : kMaxIoPerCall;
    const ssize_t got = ::pread(fd_, dst, want, static_cast<off_t>(offset));
    if (got < 0) {
      if (errno == EINTR) return RawRead{0, true};
      return ErrnoStatus(errno, "read failed", path_, offset);
    }
    return RawRead{static_cast<size_t>(got), false};
  }

  Status Advise(AccessHint hint, uint64_t offset, uint64_t length) override {
#if defined(POSIX_FADV_SEQUENTIAL)
    int advice = POSIX_FADV_NORMAL;
    switch (hint) {
      case AccessHint::kSequential:
        advice = POSIX_FADV_SEQUENTIAL;
        break;
      case AccessHint::kWillNeed:
        advice = POSIX_FADV_WILLNEED;
        break;
      case AccessHint::kDropCache:
        advice = POSIX_FADV_DONTNEED;
        break;
    }
    const int rc =
        ::posix_fadvise(fd_, static_cast<off_t>(offset), static_cast<off_t>(length), advice);
    if (rc != 0) return ErrnoStatus(rc, "posix_fadvise failed", path_, offset);
#else
    (void)hint;
    (void)offset;
    (void)length;
#endif
    return Status::Ok();
  }

  // Out of a read-only mapping of the whole file (made on first use, kept while the file is
  // open), after mincore says every page is cached: a page that is not would be read from the
  // disk by a page fault, a slower way than the whole rows' one large read.
  bool GatherCachedRows(uint64_t offset, uint64_t width, uint64_t pitch, uint64_t rows,
                        unsigned char* dst) override {
#if defined(__linux__)
    if (direct_ || !RowsInside(identity_.size, offset, width, pitch, rows)) return false;
    const auto* mapping = static_cast<const unsigned char*>(Mapping());
    if (mapping == nullptr) return false;
    static const auto kPage = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
    const uint64_t first = offset / kPage * kPage;
    const uint64_t pages = (offset + (rows - 1) * pitch + width - first + kPage - 1) / kPage;
    thread_local std::vector<unsigned char> resident;
    resident.resize(pages);
    if (::mincore(const_cast<unsigned char*>(mapping) + first, pages * kPage, resident.data()) !=
        0) {
      return false;
    }
    for (unsigned char page : resident) {
      if ((page & 1) == 0) return false;
    }
    return CopyRowsFromMapping(mapping + offset, width, pitch, rows, dst, mapping, identity_.size);
#else
    (void)offset;
    (void)width;
    (void)pitch;
    (void)rows;
    (void)dst;
    return false;
#endif
  }

 private:
  // The whole file mapped read-only, or nullptr when it cannot be (empty, or a file system
  // without mmap).
  void* Mapping() {
    std::call_once(map_once_, [this] {
      if (identity_.size == 0 || identity_.size > SIZE_MAX) return;
      void* p = ::mmap(nullptr, static_cast<size_t>(identity_.size), PROT_READ, MAP_SHARED, fd_, 0);
      if (p != MAP_FAILED) mapping_ = p;
    });
    return mapping_;
  }

  std::string path_;
  int fd_;
  FileIdentity identity_;
  bool direct_;
  std::once_flag map_once_;
  void* mapping_ = nullptr;
};

class PosixWritableFile final : public WritableFile {
 public:
  PosixWritableFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  ~PosixWritableFile() override {
    if (fd_ >= 0) ::close(fd_);
  }

  const std::string& path() const override { return path_; }

  Status WriteAt(uint64_t offset, const void* src, size_t n) override {
    const auto* in = static_cast<const unsigned char*>(src);
    size_t done = 0;
    while (done < n) {
      const size_t want = (n - done) < kMaxIoPerCall ? (n - done) : kMaxIoPerCall;
      const ssize_t put = ::pwrite(fd_, in + done, want, static_cast<off_t>(offset + done));
      if (put < 0) {
        if (errno == EINTR) continue;
        return ErrnoStatus(errno, "write failed", path_, offset + done);
      }
      if (put == 0) return Status::IoError(path_ + ": write made no progress");
      done += static_cast<size_t>(put);
    }
    return Status::Ok();
  }

  Status Truncate(uint64_t size) override {
    if (::ftruncate(fd_, static_cast<off_t>(size)) != 0) {
      return ErrnoStatus(errno, "ftruncate failed", path_, size);
    }
    return Status::Ok();
  }

  Status Close() override {
    if (fd_ < 0) return Status::Ok();
    const int rc = ::close(fd_);
    fd_ = -1;
    if (rc != 0) return ErrnoStatus(errno, "close failed", path_);
    return Status::Ok();
  }

 private:
  std::string path_;
  int fd_;
};

class PosixMappedFile final : public MappedFile {
 public:
  PosixMappedFile(void* data, uint64_t size) : data_(data), size_(size) {}
  ~PosixMappedFile() override {
    if (size_ > 0) ::munmap(data_, size_);
  }
  const unsigned char* data() const override { return static_cast<const unsigned char*>(data_); }
  uint64_t size() const override { return size_; }

 private:
  void* data_;
  uint64_t size_;
};

// Opens path with flags and fstats it into *st; anything but a regular file is refused.
// O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer, forever and deaf
// to signals. Reads of a regular file ignore the flag; it is cleared all the same, so that
// nothing built on the descriptor later meets EAGAIN.
Result<int> OpenRegularFile(const std::string& path, int flags, struct stat* st) {
  int fd = -1;
  do {
    fd = ::open(path.c_str(), flags | O_CLOEXEC | O_NONBLOCK);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) {
#ifdef O_DIRECT
    if ((flags & O_DIRECT) != 0 && errno == EINVAL) {
      return Status::Unavailable(path + ": the file system does not support direct I/O");
    }
#endif
    return ErrnoStatus(errno, "cannot open", path);
  }
  const char* refused = nullptr;
  int err = 0;
  if (::fstat(fd, st) != 0) {
    err = errno;
    refused = "cannot stat";
  } else if (!S_ISREG(st->st_mode)) {
    ::close(fd);
    return Status::InvalidArgument(path + ": is " + FileTypeName(st->st_mode) +
                                   "; a model is read from regular files");
  } else if (::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
    err = errno;
    refused = "cannot set the file's flags";
  }
  if (refused != nullptr) {
    ::close(fd);
    return ErrnoStatus(err, refused, path);
  }
  return fd;
}

}  // namespace

Result<std::unique_ptr<MappedFile>> MapFile(const std::string& path) {
  struct stat st {};
  HOIST_ASSIGN_OR_RETURN(const int fd, OpenRegularFile(path, O_RDONLY, &st));
  const auto size = static_cast<uint64_t>(st.st_size);
  void* data = nullptr;
  if (size > 0) {
    data = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
    if (data == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      return ErrnoStatus(err, "cannot map", path);
    }
  }
  ::close(fd);
  return std::unique_ptr<MappedFile>(new PosixMappedFile(data, size));
}

Result<std::unique_ptr<File>> OpenFile(const std::string& path, const OpenOptions& options) {
  int flags = O_RDONLY;
#ifdef O_DIRECT
  if (options.direct) flags |= O_DIRECT;
#else
  if (options.direct) return Status::Unavailable(path + ": direct I/O is not available here");
#endif
  struct stat st {};
  HOIST_ASSIGN_OR_RETURN(const int fd, OpenRegularFile(path, flags, &st));
  return std::unique_ptr<File>(new PosixFile(path, fd, IdentityOf(st), options.direct));
}

Result<std::unique_ptr<WritableFile>> CreateWritableFile(const std::string& path, bool exclusive) {
  const int flags = O_WRONLY | O_CREAT | O_CLOEXEC | (exclusive ? O_EXCL | O_NOFOLLOW : O_TRUNC);
  int fd = -1;
  do {
    fd = ::open(path.c_str(), flags, 0644);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return ErrnoStatus(errno, "cannot create", path);
  return std::unique_ptr<WritableFile>(new PosixWritableFile(path, fd));
}

}  // namespace hoist
