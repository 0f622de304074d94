#include <windows.h>

#include <string>

#include "device/host_memory.h"

namespace hoist {

Result<void*> AllocateHostMemory(uint64_t bytes, const char* who) {
  void* p =
      ::VirtualAlloc(nullptr, static_cast<SIZE_T>(bytes), MEM_RESERVE | MEM_COMMIT, PAGE_READWRITE);
  if (p == nullptr) {
    return Status::DeviceError(std::string(who) + ": cannot allocate " + std::to_string(bytes) +
                               " bytes of host memory (Windows error " +
                               std::to_string(::GetLastError()) + ")");
  }
  return p;
}

Result<void*> AllocatePopulatedHostMemory(uint64_t bytes, const char* who) {
  HOIST_ASSIGN_OR_RETURN(void* p, AllocateHostMemory(bytes, who));
  SYSTEM_INFO info{};
  ::GetSystemInfo(&info);
  auto* bytes_at = static_cast<volatile unsigned char*>(p);
  for (uint64_t off = 0; off < bytes; off += info.dwPageSize) bytes_at[off] = 0;
  return p;
}

void FreeHostMemory(void* ptr) {
  if (ptr != nullptr) ::VirtualFree(ptr, 0, MEM_RELEASE);
}

bool HostMemoryCanBeShared() { return false; }

Result<void*> AllocateSharedHostMemory(uint64_t /*bytes*/, const char* who) {
  return Status::Unavailable(std::string(who) +
                             ": memory shared with other processes is not "
                             "built for Windows");
}

Result<ExportedMemory> ExportSharedHostMemory(void* /*ptr*/) {
  return Status::Unavailable("memory shared with other processes is not built for Windows");
}

Result<void*> MapSharedHostMemory(int /*fd*/, uint64_t /*bytes*/, const char* who) {
  return Status::Unavailable(std::string(who) +
                             ": memory shared with other processes is not "
                             "built for Windows");
}

uint64_t PhysicalMemoryBytes() {
  MEMORYSTATUSEX status{};
  status.dwLength = sizeof(status);
  return ::GlobalMemoryStatusEx(&status) ? status.ullTotalPhys : 0;
}

uint64_t AvailableMemoryBytes() {
  MEMORYSTATUSEX status{};
  status.dwLength = sizeof(status);
  return ::GlobalMemoryStatusEx(&status) ? status.ullAvailPhys : 0;
}

}  // namespace hoist
