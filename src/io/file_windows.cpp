// Windows files: CreateFileW on UTF-8 paths, positional ReadFile/WriteFile at 64-bit
// OVERLAPPED offsets, no call moving 4 GiB or more. Compiled only on Windows.
#include <windows.h>
#include <winioctl.h>

#include <cstdint>
#include <memory>
#include <string>

#include "io/file.h"

namespace hoist {
namespace {

// ReadFile and WriteFile take a 32-bit length; stay well below it.
constexpr size_t kMaxIoPerCall = size_t{1} << 30;
// FILE_FLAG_NO_BUFFERING needs sector-aligned offsets, lengths and buffers; 4096 is a
// multiple of every sector size in use.
constexpr uint64_t kDirectAlignment = 4096;

Result<std::wstring> WidePath(const std::string& path) {
  if (path.empty()) return Status::InvalidArgument("empty path");
  const int n = ::MultiByteToWideChar(CP_UTF8, MB_ERR_INVALID_CHARS, path.data(),
                                      static_cast<int>(path.size()), nullptr, 0);
  if (n <= 0) return Status::InvalidArgument(path + ": path is not valid UTF-8");
  std::wstring wide(static_cast<size_t>(n), L'\0');
  ::MultiByteToWideChar(CP_UTF8, MB_ERR_INVALID_CHARS, path.data(), static_cast<int>(path.size()),
                        wide.data(), n);
  return wide;
}

OVERLAPPED OverlappedAt(uint64_t offset, HANDLE event) {
  OVERLAPPED ov{};
  ov.Offset = static_cast<DWORD>(offset & 0xffffffffu);
  ov.OffsetHigh = static_cast<DWORD>(offset >> 32);
  ov.hEvent = event;
  return ov;
}

// A manual-reset event for waiting on one overlapped read, closed with it. One per call, not a
// thread_local: MinGW ran a thread_local's destructor at thread exit over storage already freed
// (an access violation in a bench under wine), and an event costs a microsecond beside a read.
class ReadEvent {
 public:
  ReadEvent() : event_(::CreateEventW(nullptr, TRUE, FALSE, nullptr)) {}
  ~ReadEvent() {
    if (event_ != nullptr) ::CloseHandle(event_);
  }
  ReadEvent(const ReadEvent&) = delete;
  ReadEvent& operator=(const ReadEvent&) = delete;
  HANDLE get() const { return event_; }

 private:
  HANDLE event_;
};

int64_t FileTimeNs(const FILETIME& t) {
  const uint64_t ticks = (static_cast<uint64_t>(t.dwHighDateTime) << 32) | t.dwLowDateTime;
  return static_cast<int64_t>(ticks) * 100;  // 100 ns ticks since 1601; compared, not shown
}

Result<FileIdentity> IdentityOf(HANDLE handle, const std::string& path) {
  BY_HANDLE_FILE_INFORMATION info{};
  if (!::GetFileInformationByHandle(handle, &info)) {
    return WindowsErrorStatus(::GetLastError(), "cannot read the file's information", path);
  }
  FileIdentity id;
  id.known = true;
  id.device = info.dwVolumeSerialNumber;
  id.inode = (static_cast<uint64_t>(info.nFileIndexHigh) << 32) | info.nFileIndexLow;
  id.size = (static_cast<uint64_t>(info.nFileSizeHigh) << 32) | info.nFileSizeLow;
  id.modified_ns = FileTimeNs(info.ftLastWriteTime);
  return id;
}

// Reads go through an overlapped handle so that threads reading at different offsets run in
// parallel (a synchronous handle serialises every call on it).
class WindowsFile final : public File {
 public:
  WindowsFile(std::string path, HANDLE handle, const FileIdentity& identity, bool direct)
      : path_(std::move(path)), handle_(handle), identity_(identity), direct_(direct) {}
  ~WindowsFile() override { ::CloseHandle(handle_); }

  const std::string& path() const override { return path_; }
  uint64_t size() const override { return identity_.size; }
  bool direct() const override { return direct_; }
  uint64_t direct_alignment() const override { return direct_ ? kDirectAlignment : 1; }
  FileIdentity identity() const override { return identity_; }
  Result<FileIdentity> CurrentIdentity() override { return IdentityOf(handle_, path_); }

  Result<RawRead> ReadSome(uint64_t offset, void* dst, size_t n) override {
    const ReadEvent event;
    if (event.get() == nullptr)
      return WindowsErrorStatus(::GetLastError(), "CreateEvent failed", path_);
    const size_t want = n < kMaxIoPerCall ? n : kMaxIoPerCall;
    OVERLAPPED ov = OverlappedAt(offset, event.get());
    DWORD got = 0;
    if (!::ReadFile(handle_, dst, static_cast<DWORD>(want), &got, &ov)) {
      DWORD err = ::GetLastError();
      if (err == ERROR_IO_PENDING) {
        if (::GetOverlappedResult(handle_, &ov, &got, TRUE)) return RawRead{got, false};
        err = ::GetLastError();
      }
      if (err == ERROR_HANDLE_EOF) return RawRead{0, false};
      return WindowsErrorStatus(err, "read failed", path_, offset);
    }
    return RawRead{got, false};
  }

  // Windows has no per-range cache advice; the hints are accepted and do nothing.
  Status Advise(AccessHint, uint64_t, uint64_t) override { return Status::Ok(); }

 private:
  std::string path_;
  HANDLE handle_;
  FileIdentity identity_;
  bool direct_;
};

class WindowsWritableFile final : public WritableFile {
 public:
  WindowsWritableFile(std::string path, HANDLE handle) : path_(std::move(path)), handle_(handle) {}
  ~WindowsWritableFile() override {
    if (handle_ != INVALID_HANDLE_VALUE) ::CloseHandle(handle_);
  }

  const std::string& path() const override { return path_; }

  Status WriteAt(uint64_t offset, const void* src, size_t n) override {
    const auto* in = static_cast<const unsigned char*>(src);
    size_t done = 0;
    while (done < n) {
      const size_t want = (n - done) < kMaxIoPerCall ? (n - done) : kMaxIoPerCall;
      OVERLAPPED ov = OverlappedAt(offset + done, nullptr);
      DWORD put = 0;
      if (!::WriteFile(handle_, in + done, static_cast<DWORD>(want), &put, &ov)) {
        return WindowsErrorStatus(::GetLastError(), "write failed", path_, offset + done);
      }
      if (put == 0) return Status::IoError(path_ + ": write made no progress");
      done += put;
    }
    return Status::Ok();
  }

  Status Truncate(uint64_t size) override {
    FILE_END_OF_FILE_INFO info{};
    info.EndOfFile.QuadPart = static_cast<LONGLONG>(size);
    if (!::SetFileInformationByHandle(handle_, FileEndOfFileInfo, &info, sizeof(info))) {
      return WindowsErrorStatus(::GetLastError(), "cannot set the file size", path_, size);
    }
    return Status::Ok();
  }

  Status Close() override {
    if (handle_ == INVALID_HANDLE_VALUE) return Status::Ok();
    const BOOL ok = ::CloseHandle(handle_);
    handle_ = INVALID_HANDLE_VALUE;
    if (!ok) return WindowsErrorStatus(::GetLastError(), "close failed", path_);
    return Status::Ok();
  }

 private:
  std::string path_;
  HANDLE handle_;
};

class WindowsMappedFile final : public MappedFile {
 public:
  WindowsMappedFile(HANDLE mapping, const void* data, uint64_t size)
      : mapping_(mapping), data_(data), size_(size) {}
  ~WindowsMappedFile() override {
    if (data_ != nullptr) ::UnmapViewOfFile(data_);
    if (mapping_ != nullptr) ::CloseHandle(mapping_);
  }
  const unsigned char* data() const override { return static_cast<const unsigned char*>(data_); }
  uint64_t size() const override { return size_; }

 private:
  HANDLE mapping_;
  const void* data_;
  uint64_t size_;
};

}  // namespace

Result<std::unique_ptr<MappedFile>> MapFile(const std::string& path) {
  HOIST_ASSIGN_OR_RETURN(std::wstring wide, WidePath(path));
  HANDLE file = ::CreateFileW(wide.c_str(), GENERIC_READ, FILE_SHARE_READ | FILE_SHARE_DELETE,
                              nullptr, OPEN_EXISTING, FILE_ATTRIBUTE_NORMAL, nullptr);
  if (file == INVALID_HANDLE_VALUE)
    return WindowsErrorStatus(::GetLastError(), "cannot open", path);
  LARGE_INTEGER size{};
  if (!::GetFileSizeEx(file, &size)) {
    const DWORD err = ::GetLastError();
    ::CloseHandle(file);
    return WindowsErrorStatus(err, "cannot read the file size", path);
  }
  if (size.QuadPart == 0) {
    ::CloseHandle(file);
    return std::unique_ptr<MappedFile>(new WindowsMappedFile(nullptr, nullptr, 0));
  }
  HANDLE mapping = ::CreateFileMappingW(file, nullptr, PAGE_READONLY, 0, 0, nullptr);
  const DWORD map_error = ::GetLastError();
  ::CloseHandle(file);
  if (mapping == nullptr) return WindowsErrorStatus(map_error, "cannot map", path);
  const void* data = ::MapViewOfFile(mapping, FILE_MAP_READ, 0, 0, 0);
  if (data == nullptr) {
    const DWORD err = ::GetLastError();
    ::CloseHandle(mapping);
    return WindowsErrorStatus(err, "cannot map", path);
  }
  return std::unique_ptr<MappedFile>(
      new WindowsMappedFile(mapping, data, static_cast<uint64_t>(size.QuadPart)));
}

Result<std::unique_ptr<File>> OpenFile(const std::string& path, const OpenOptions& options) {
  HOIST_ASSIGN_OR_RETURN(std::wstring wide, WidePath(path));
  const DWORD attributes = ::GetFileAttributesW(wide.c_str());
  if (attributes != INVALID_FILE_ATTRIBUTES && (attributes & FILE_ATTRIBUTE_DIRECTORY) != 0) {
    return Status::InvalidArgument(path + ": is a directory; a model is read from regular files");
  }
  DWORD flags = FILE_ATTRIBUTE_NORMAL | FILE_FLAG_OVERLAPPED;
  if (options.direct) flags |= FILE_FLAG_NO_BUFFERING;
  HANDLE handle = ::CreateFileW(wide.c_str(), GENERIC_READ,
                                FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE, nullptr,
                                OPEN_EXISTING, flags, nullptr);
  if (handle == INVALID_HANDLE_VALUE) {
    const DWORD err = ::GetLastError();
    if (options.direct && err == ERROR_INVALID_PARAMETER) {
      return Status::Unavailable(path + ": the file system does not support unbuffered I/O");
    }
    return WindowsErrorStatus(err, "cannot open", path);
  }
  // A named pipe or a console opens like a file; only disk files are models.
  if (::GetFileType(handle) != FILE_TYPE_DISK) {
    ::CloseHandle(handle);
    return Status::InvalidArgument(path +
                                   ": is not a regular file (a pipe or a device); a model "
                                   "is read from regular files");
  }
  auto identity = IdentityOf(handle, path);
  if (!identity.ok()) {
    ::CloseHandle(handle);
    return identity.status();
  }
  return std::unique_ptr<File>(new WindowsFile(path, handle, *identity, options.direct));
}

Result<std::unique_ptr<WritableFile>> CreateWritableFile(const std::string& path, bool exclusive) {
  HOIST_ASSIGN_OR_RETURN(std::wstring wide, WidePath(path));
  // CREATE_NEW fails on any existing name, a link's included.
  HANDLE handle = ::CreateFileW(
      wide.c_str(), GENERIC_WRITE | GENERIC_READ, FILE_SHARE_READ, nullptr,
      exclusive ? CREATE_NEW : CREATE_ALWAYS,
      FILE_ATTRIBUTE_NORMAL | (exclusive ? FILE_FLAG_OPEN_REPARSE_POINT : 0), nullptr);
  if (handle == INVALID_HANDLE_VALUE) {
    return WindowsErrorStatus(::GetLastError(), "cannot create", path);
  }
  // Sparse where the file system allows, so that growing the file leaves holes; a file
  // system without sparse files writes the zeros instead.
  DWORD returned = 0;
  ::DeviceIoControl(handle, FSCTL_SET_SPARSE, nullptr, 0, nullptr, 0, &returned, nullptr);
  return std::unique_ptr<WritableFile>(new WindowsWritableFile(path, handle));
}

}  // namespace hoist
