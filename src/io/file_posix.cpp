// POSIX files: pread/pwrite at 64-bit offsets. Compiled on every platform but Windows.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdint>
#include <memory>
#include <string>

#include "io/file.h"

namespace hoist {
namespace {

static_assert(sizeof(off_t) == 8, "hoist needs a 64-bit off_t (build with _FILE_OFFSET_BITS=64)");

// pread and pwrite take at most SSIZE_MAX bytes; Linux moves at most 0x7ffff000 per call.
constexpr size_t kMaxIoPerCall = size_t{1} << 30;

class PosixFile final : public File {
 public:
  PosixFile(std::string path, int fd, uint64_t size, bool direct)
      : path_(std::move(path)), fd_(fd), size_(size), direct_(direct) {}
  ~PosixFile() override { ::close(fd_); }

  const std::string& path() const override { return path_; }
  uint64_t size() const override { return size_; }
  bool direct() const override { return direct_; }
  uint64_t direct_alignment() const override { return direct_ ? 4096 : 1; }

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

 private:
  std::string path_;
  int fd_;
  uint64_t size_;
  bool direct_;
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

}  // namespace

Result<std::unique_ptr<MappedFile>> MapFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, "cannot open", path);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return ErrnoStatus(err, "cannot stat", path);
  }
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
  int flags = O_RDONLY | O_CLOEXEC;
#ifdef O_DIRECT
  if (options.direct) flags |= O_DIRECT;
#else
  if (options.direct) return Status::Unavailable(path + ": direct I/O is not available here");
#endif
  int fd = -1;
  do {
    fd = ::open(path.c_str(), flags);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) {
    if (options.direct && errno == EINVAL) {
      return Status::Unavailable(path + ": the file system does not support direct I/O");
    }
    return ErrnoStatus(errno, "cannot open", path);
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return ErrnoStatus(err, "cannot stat", path);
  }
  if (S_ISDIR(st.st_mode)) {
    ::close(fd);
    return Status::InvalidArgument(path + ": is a directory");
  }
  return std::unique_ptr<File>(
      new PosixFile(path, fd, static_cast<uint64_t>(st.st_size), options.direct));
}

Result<std::unique_ptr<WritableFile>> CreateWritableFile(const std::string& path) {
  int fd = -1;
  do {
    fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return ErrnoStatus(errno, "cannot create", path);
  return std::unique_ptr<WritableFile>(new PosixWritableFile(path, fd));
}

}  // namespace hoist
