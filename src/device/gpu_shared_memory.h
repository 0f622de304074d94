// GPU memory shared with other processes (hoist serve): physical allocations made with the
// driver's virtual memory API, exported as POSIX file descriptors and mapped by the process that
// receives one, so the memory lives while any process maps it. One implementation per vendor:
// gpu_shared_memory_cuda.cpp; HIP's is not written yet (gpu_shared_memory_none.cpp).
// Thread safety: every function may be called from any thread.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"
#include "device/device.h"

namespace hoist {

// Whether GPU `ordinal` can export memory as a file descriptor.
bool GpuCanShareMemory(int ordinal);
// `bytes` (rounded up to the driver's granularity) on GPU ordinal, mapped read-write there.
Result<void*> AllocateSharedGpuMemory(int ordinal, uint64_t bytes, const std::string& who);
// A new descriptor of the allocation at ptr, the caller's to close.
Result<ExportedMemory> ExportSharedGpuMemory(void* ptr, const std::string& who);
// Maps the allocation behind fd (of `bytes`, as exported) on GPU ordinal; fd stays the caller's.
Result<void*> ImportSharedGpuMemory(int ordinal, int fd, uint64_t bytes, const std::string& who);
// Unmaps and releases ptr when it was allocated or imported here: true; false for other memory.
Result<bool> FreeSharedGpuMemory(void* ptr, const std::string& who);

}  // namespace hoist
