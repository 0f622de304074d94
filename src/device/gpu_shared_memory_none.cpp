// GPU memory sharing where it is not written yet (HIP: hipMemCreate with POSIX descriptors is
// the same design as gpu_shared_memory_cuda.cpp) or not possible (Windows' handles).
#include "device/gpu_shared_memory.h"

namespace hoist {

bool GpuCanShareMemory(int /*ordinal*/) { return false; }

Result<void*> AllocateSharedGpuMemory(int /*ordinal*/, uint64_t /*bytes*/, const std::string& who) {
  return Status::Unavailable(who +
                             ": sharing GPU memory with other processes is not built for "
                             "this backend");
}

Result<ExportedMemory> ExportSharedGpuMemory(void* /*ptr*/, const std::string& who) {
  return Status::Unavailable(who +
                             ": sharing GPU memory with other processes is not built for "
                             "this backend");
}

Result<void*> ImportSharedGpuMemory(int /*ordinal*/, int /*fd*/, uint64_t /*bytes*/,
                                    const std::string& who) {
  return Status::Unavailable(who +
                             ": sharing GPU memory with other processes is not built for "
                             "this backend");
}

Result<bool> FreeSharedGpuMemory(void* /*ptr*/, const std::string& /*who*/) { return false; }

}  // namespace hoist
