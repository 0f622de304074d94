#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include "device/host_memory.h"

namespace hoist {
namespace {
// mmap needs the length back at munmap; small map keyed by address.
std::mutex g_mutex;
std::unordered_map<void*, uint64_t>& Sizes() {
  static auto* sizes = new std::unordered_map<void*, uint64_t>();
  return *sizes;
}
}  // namespace

Result<void*> AllocateHostMemory(uint64_t bytes, const char* who) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    return Status::DeviceError(std::string(who) + ": cannot allocate " + std::to_string(bytes) +
                               " bytes of host memory: " + std::strerror(errno));
  }
  std::lock_guard<std::mutex> lock(g_mutex);
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
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    auto it = Sizes().find(ptr);
    if (it == Sizes().end()) return;
    bytes = it->second;
    Sizes().erase(it);
  }
  ::munmap(ptr, bytes);
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
