// Large page-aligned host allocations and the machine's memory size; one implementation per
// platform (host_memory_posix.cpp).
#pragma once

#include <cstdint>

#include "base/status.h"
#include "device/device.h"

namespace hoist {

// Page-aligned, uninitialised. `who` names the caller in the error.
Result<void*> AllocateHostMemory(uint64_t bytes, const char* who);
// Like AllocateHostMemory, but backed by huge pages where the platform gives them on request
// (Linux transparent huge pages) and faulted in, so that pinning it afterwards only has to
// lock it (faster than the runtime's pinned allocation: docs/PERFORMANCE.md, "Why the
// defaults"). Free with FreeHostMemory.
Result<void*> AllocatePopulatedHostMemory(uint64_t bytes, const char* who);
// Frees what any function here allocated or mapped.
void FreeHostMemory(void* ptr);

// Whether AllocateSharedHostMemory works here.
bool HostMemoryCanBeShared();
// Host memory another process of this machine can map (hoist serve): an anonymous file
// (Linux's memfd) mapped shared, read and written here, its size sealed. Its pages live while
// any process maps it or holds a descriptor of it. kUnavailable where the platform has none.
Result<void*> AllocateSharedHostMemory(uint64_t bytes, const char* who);
// A new descriptor of the file behind shared memory at ptr (from AllocateSharedHostMemory),
// the caller's to close.
Result<ExportedMemory> ExportSharedHostMemory(void* ptr);
// Maps `bytes` of the shared memory behind descriptor fd, read-only; fd stays the caller's.
// kIoError for memory whose size is not sealed or is shorter than `bytes` (its pages could
// fault past the end): another process sent it.
Result<void*> MapSharedHostMemory(int fd, uint64_t bytes, const char* who);
uint64_t PhysicalMemoryBytes();
uint64_t AvailableMemoryBytes();

}  // namespace hoist
