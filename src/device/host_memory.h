// Large page-aligned host allocations and the machine's memory size; one implementation per
// platform (host_memory_posix.cpp).
#pragma once

#include <cstdint>

#include "base/status.h"

namespace hoist {

// Page-aligned, uninitialised. `who` names the caller in the error.
Result<void*> AllocateHostMemory(uint64_t bytes, const char* who);
// Like AllocateHostMemory, but backed by huge pages where the platform gives them on request
// (Linux transparent huge pages) and faulted in, so that pinning it afterwards only has to
// lock it (faster than the runtime's pinned allocation: docs/PERFORMANCE.md, "Why the
// defaults"). Free with FreeHostMemory.
Result<void*> AllocatePopulatedHostMemory(uint64_t bytes, const char* who);
void FreeHostMemory(void* ptr);
uint64_t PhysicalMemoryBytes();
uint64_t AvailableMemoryBytes();

}  // namespace hoist
