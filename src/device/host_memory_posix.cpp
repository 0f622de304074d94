#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>

#include "device/host_memory.h"

namespace hoist {
namespace {
// mmap needs the length back at munmap; small map keyed by address.
std::mutex g_host_memory_mutex;
std::unordered_map<void*, uint64_t>& Sizes() {
  static auto* sizes = new std::unordered_map<void*, uint64_t>();
  return *sizes;
}
// The descriptor of each shared allocation (AllocateSharedHostMemory), closed when it is freed.
std::unordered_map<void*, int>& SharedFiles() {
  static auto* files = new std::unordered_map<void*, int>();
  return *files;
}

#if defined(__linux__)
// The seals a shared allocation carries, and the ones a mapper insists on.
constexpr int kSizeSeals = F_SEAL_SHRINK | F_SEAL_GROW;
// Added when it is first handed out: from then on no descriptor (a copy, a reopening through
// /proc) can write it or map it writable, and no mapping can be made writable (FUTURE_WRITE
// takes VM_MAYWRITE from every later mapping, which F_SEAL_WRITE alone does not on older kernels).
#ifdef F_SEAL_FUTURE_WRITE
constexpr int kWriteSeals = F_SEAL_WRITE | F_SEAL_FUTURE_WRITE;
#else
constexpr int kWriteSeals = F_SEAL_WRITE;
#endif
#endif

Status SharedMemoryError(const char* who, const std::string& what) {
  return Status::DeviceError(std::string(who) + ": " + what + ": " + std::strerror(errno));
}
}  // namespace

Result<void*> AllocateHostMemory(uint64_t bytes, const char* who) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    return Status::DeviceError(std::string(who) + ": cannot allocate " + std::to_string(bytes) +
                               " bytes of host memory: " + std::strerror(errno));
  }
  std::lock_guard<std::mutex> lock(g_host_memory_mutex);
  Sizes()[p] = bytes;
  return p;
}

Result<void*> AllocatePopulatedHostMemory(uint64_t bytes, const char* who) {
  HOIST_ASSIGN_OR_RETURN(void* p, AllocateHostMemory(bytes, who));
#if defined(MADV_HUGEPAGE)
  (void)::madvise(p, bytes, MADV_HUGEPAGE);  // advice only: small pages work as well
#endif
  const long page = ::sysconf(_SC_PAGE_SIZE);
  const uint64_t step = page > 0 ? static_cast<uint64_t>(page) : 4096;
  auto* bytes_at = static_cast<volatile unsigned char*>(p);
  for (uint64_t off = 0; off < bytes; off += step) bytes_at[off] = 0;
  return p;
}

void FreeHostMemory(void* ptr) {
  uint64_t bytes = 0;
  int fd = -1;
  {
    std::lock_guard<std::mutex> lock(g_host_memory_mutex);
    auto it = Sizes().find(ptr);
    if (it == Sizes().end()) return;
    bytes = it->second;
    Sizes().erase(it);
    auto file = SharedFiles().find(ptr);
    if (file != SharedFiles().end()) {
      fd = file->second;
      SharedFiles().erase(file);
    }
  }
  ::munmap(ptr, bytes);
  if (fd >= 0) ::close(fd);
}

bool HostMemoryCanBeShared() {
#if defined(__linux__)
  return true;
#else
  return false;
#endif
}

Result<void*> AllocateSharedHostMemory(uint64_t bytes, const char* who) {
#if defined(__linux__)
  const int fd = ::memfd_create("hoist-held-model", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return SharedMemoryError(who, "cannot create shared memory");
  if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    Status failed =
        SharedMemoryError(who, "cannot size shared memory to " + std::to_string(bytes) + " bytes");
    ::close(fd);
    return failed;
  }
  // Its size fixed for good: a process that maps it can trust fstat, and no one (this process
  // included) can cut pages from under a mapping, which would fault on access (SIGBUS). Writes
  // are sealed when it is handed out (ExportSharedHostMemory), once loaded.
  if (::fcntl(fd, F_ADD_SEALS, kSizeSeals) != 0) {
    Status failed = SharedMemoryError(who, "cannot seal the size of shared memory");
    ::close(fd);
    return failed;
  }
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    Status failed =
        SharedMemoryError(who, "cannot map " + std::to_string(bytes) + " bytes of shared memory");
    ::close(fd);
    return failed;
  }
  std::lock_guard<std::mutex> lock(g_host_memory_mutex);
  Sizes()[p] = bytes;
  SharedFiles()[p] = fd;
  return p;
#else
  (void)bytes;
  return Status::Unavailable(std::string(who) +
                             ": memory shared with other processes needs Linux (memfd)");
#endif
}

Result<ExportedMemory> ExportSharedHostMemory(void* ptr) {
  std::lock_guard<std::mutex> lock(g_host_memory_mutex);
  auto it = SharedFiles().find(ptr);
  if (it == SharedFiles().end()) {
    return Status::Internal("export of host memory that was not allocated shared");
  }
  const uint64_t bytes = Sizes()[ptr];
#if defined(__linux__)
  // What is sent is a read-only descriptor (reopened through /proc: a duplicate would share the
  // writable one's mode), of memory sealed against writing before anyone else sees it.
  const std::string self = "/proc/self/fd/" + std::to_string(it->second);
  const int fd = ::open(self.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return SharedMemoryError("host", "cannot reopen held memory read-only");
  const int seals = ::fcntl(it->second, F_GET_SEALS);
  if (seals >= 0 && (seals & F_SEAL_WRITE) == 0) {
    // F_SEAL_WRITE is refused while a mapping that may write exists: this process's own one is
    // made again, in place, from the read-only descriptor (the load wrote through it; nothing
    // writes held memory after).
    if (::mmap(ptr, bytes, PROT_READ, MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED ||
        ::fcntl(it->second, F_ADD_SEALS, kWriteSeals | F_SEAL_SEAL) != 0) {
      Status failed = SharedMemoryError("host", "cannot seal held memory against writing");
      ::close(fd);
      return failed;
    }
  }
#else
  const int fd = ::fcntl(it->second, F_DUPFD_CLOEXEC, 0);
  if (fd < 0) return SharedMemoryError("host", "cannot duplicate a shared memory descriptor");
#endif
  return ExportedMemory{fd, bytes};
}

Result<void*> MapSharedHostMemory(int fd, uint64_t bytes, const char* who) {
#if defined(__linux__)
  // Memory another process made: unless its size is sealed, that process could shrink it under
  // the mapping and this one would die on the next read. A regular file or a pipe has no seals.
  const int seals = ::fcntl(fd, F_GET_SEALS);
  if (seals < 0 || (seals & kSizeSeals) != kSizeSeals) {
    return Status::IoError(
        std::string(who) + ": the shared memory sent is " +
        (seals < 0 ? "not sealable memory (memfd)" : "not sealed against shrinking and growing") +
        ": the process that sent it could cut it under the mapping; refused");
  }
  if ((seals & F_SEAL_WRITE) == 0) {
    return Status::IoError(std::string(who) +
                           ": the shared memory sent is not sealed against writing: the process "
                           "that sent it, or anyone it sent it to, could change the weights "
                           "under the mapping; refused");
  }
#endif
  struct stat st {};
  if (::fstat(fd, &st) != 0) return SharedMemoryError(who, "cannot read shared memory's size");
  if (st.st_size < 0 || static_cast<uint64_t>(st.st_size) < bytes) {
    return Status::IoError(std::string(who) + ": shared memory of " + std::to_string(st.st_size) +
                           " bytes is said to hold " + std::to_string(bytes));
  }
  if (bytes == 0) return Status::InvalidArgument(std::string(who) + ": no shared memory to map");
  // Private and writable: the memory is sealed, so what this process writes lands in pages of
  // its own (copy on write) that no other process sees, and a tensor written in place neither
  // corrupts the holder nor kills the writer.
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
  if (p == MAP_FAILED) {
    return SharedMemoryError(who,
                             "cannot map " + std::to_string(bytes) + " bytes of shared memory");
  }
  std::lock_guard<std::mutex> lock(g_host_memory_mutex);
  Sizes()[p] = bytes;
  return p;
}

uint64_t PhysicalMemoryBytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long size = ::sysconf(_SC_PAGE_SIZE);
  return pages > 0 && size > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(size) : 0;
}

uint64_t AvailableMemoryBytes() {
#ifdef _SC_AVPHYS_PAGES
  const long pages = ::sysconf(_SC_AVPHYS_PAGES);
  const long size = ::sysconf(_SC_PAGE_SIZE);
  return pages > 0 && size > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(size) : 0;
#else
  return 0;
#endif
}

}  // namespace hoist
