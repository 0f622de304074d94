// CUDA: the driver's virtual memory API (cuMemCreate with POSIX file-descriptor handles), reached
// through the runtime's driver entry points so that the library links no libcuda of its own.
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <unistd.h>

#include <cstdint>
#include <mutex>
#include <unordered_map>

#include "device/gpu_shared_memory.h"

namespace hoist {
namespace {

// The driver functions this file calls, looked up once.
struct Driver {
  decltype(&cuMemGetAllocationGranularity) granularity = nullptr;
  decltype(&cuMemCreate) create = nullptr;
  decltype(&cuMemRelease) release = nullptr;
  decltype(&cuMemAddressReserve) reserve = nullptr;
  decltype(&cuMemAddressFree) address_free = nullptr;
  decltype(&cuMemMap) map = nullptr;
  decltype(&cuMemUnmap) unmap = nullptr;
  decltype(&cuMemSetAccess) set_access = nullptr;
  decltype(&cuMemExportToShareableHandle) export_handle = nullptr;
  decltype(&cuMemImportFromShareableHandle) import_handle = nullptr;
  decltype(&cuDeviceGetAttribute) attribute = nullptr;
  decltype(&cuGetErrorString) error_string = nullptr;
  std::string missing;  // the first function not found; empty when all were
};

template <typename F>
void Find(const char* symbol, F& fn, std::string& missing) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult found{};
  if (cudaGetDriverEntryPointByVersion(symbol, &p, 12000, cudaEnableDefault, &found) !=
          cudaSuccess ||
      found != cudaDriverEntryPointSuccess || p == nullptr) {
    if (missing.empty()) missing = symbol;
    return;
  }
  fn = reinterpret_cast<F>(p);
}

const Driver& TheDriver() {
  static const Driver* driver = [] {
    auto* d = new Driver();
    Find("cuMemGetAllocationGranularity", d->granularity, d->missing);
    Find("cuMemCreate", d->create, d->missing);
    Find("cuMemRelease", d->release, d->missing);
    Find("cuMemAddressReserve", d->reserve, d->missing);
    Find("cuMemAddressFree", d->address_free, d->missing);
    Find("cuMemMap", d->map, d->missing);
    Find("cuMemUnmap", d->unmap, d->missing);
    Find("cuMemSetAccess", d->set_access, d->missing);
    Find("cuMemExportToShareableHandle", d->export_handle, d->missing);
    Find("cuMemImportFromShareableHandle", d->import_handle, d->missing);
    Find("cuDeviceGetAttribute", d->attribute, d->missing);
    Find("cuGetErrorString", d->error_string, d->missing);
    return d;
  }();
  return *driver;
}

Status DriverStatus(CUresult r, const std::string& who, const std::string& what) {
  const char* text = nullptr;
  if (TheDriver().error_string != nullptr) (void)TheDriver().error_string(r, &text);
  return Status::DeviceError(who + ": " + what + ": " + (text != nullptr ? text : "CUDA error") +
                             " (" + std::to_string(static_cast<int>(r)) + ")");
}

Result<const Driver*> Ready(int ordinal, const std::string& who) {
  const Driver& d = TheDriver();
  if (!d.missing.empty()) {
    return Status::Unavailable(who + ": the CUDA driver has no " + d.missing +
                               ": GPU memory cannot be shared with other processes");
  }
  // The runtime makes the device's primary context current, which the driver calls use.
  if (cudaSetDevice(ordinal) != cudaSuccess || cudaFree(nullptr) != cudaSuccess) {
    return Status::DeviceError(who + ": cannot select the device");
  }
  return &d;
}

struct Mapping {
  CUmemGenericAllocationHandle handle = 0;
  size_t bytes = 0;  // as reserved and mapped
  int ordinal = 0;
};

std::mutex g_mappings_mutex;
std::unordered_map<uintptr_t, Mapping>& Mappings() {
  static auto* mappings = new std::unordered_map<uintptr_t, Mapping>();
  return *mappings;
}

CUmemAllocationProp PropertiesFor(int ordinal) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = ordinal;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  return prop;
}

CUmemAccessDesc AccessFor(int ordinal, CUmemAccess_flags flags) {
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = ordinal;
  access.flags = flags;
  return access;
}

// Reserves an address range for handle's `bytes`, maps it and gives ordinal the access `flags`;
// undoes what it did on failure (the handle stays the caller's).
Result<void*> MapHandle(const Driver& d, int ordinal, CUmemGenericAllocationHandle handle,
                        size_t bytes, size_t alignment, CUmemAccess_flags flags,
                        const std::string& who) {
  CUdeviceptr at = 0;
  CUresult r = d.reserve(&at, bytes, alignment, 0, 0);
  if (r != CUDA_SUCCESS)
    return DriverStatus(r, who, "reserving " + std::to_string(bytes) + " bytes of addresses");
  r = d.map(at, bytes, 0, handle, 0);
  if (r != CUDA_SUCCESS) {
    (void)d.address_free(at, bytes);
    return DriverStatus(r, who, "mapping shared memory");
  }
  const CUmemAccessDesc access = AccessFor(ordinal, flags);
  r = d.set_access(at, bytes, &access, 1);
  if (r != CUDA_SUCCESS) {
    (void)d.unmap(at, bytes);
    (void)d.address_free(at, bytes);
    return DriverStatus(r, who, "giving the device access to shared memory");
  }
  std::lock_guard<std::mutex> lock(g_mappings_mutex);
  Mappings()[static_cast<uintptr_t>(at)] = Mapping{handle, bytes, ordinal};
  return reinterpret_cast<void*>(static_cast<uintptr_t>(at));
}

}  // namespace

bool GpuCanShareMemory(int ordinal) {
  const Driver& d = TheDriver();
  if (!d.missing.empty()) return false;
  int supported = 0;
  return d.attribute(&supported, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED,
                     ordinal) == CUDA_SUCCESS &&
         supported != 0;
}

Result<void*> AllocateSharedGpuMemory(int ordinal, uint64_t bytes, const std::string& who) {
  HOIST_ASSIGN_OR_RETURN(const Driver* d, Ready(ordinal, who));
  const CUmemAllocationProp prop = PropertiesFor(ordinal);
  size_t granularity = 0;
  CUresult r = d->granularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED);
  if (r != CUDA_SUCCESS || granularity == 0) return DriverStatus(r, who, "reading the granularity");
  const size_t size = (static_cast<size_t>(bytes) + granularity - 1) / granularity * granularity;
  CUmemGenericAllocationHandle handle = 0;
  r = d->create(&handle, size, &prop, 0);
  if (r != CUDA_SUCCESS) {
    return DriverStatus(r, who,
                        "allocating " + std::to_string(bytes) + " bytes of shareable memory");
  }
  auto mapped =
      MapHandle(*d, ordinal, handle, size, granularity, CU_MEM_ACCESS_FLAGS_PROT_READWRITE, who);
  if (!mapped.ok()) (void)d->release(handle);
  return mapped;
}

Result<ExportedMemory> ExportSharedGpuMemory(void* ptr, const std::string& who) {
  const Driver& d = TheDriver();
  Mapping m;
  {
    std::lock_guard<std::mutex> lock(g_mappings_mutex);
    auto it = Mappings().find(reinterpret_cast<uintptr_t>(ptr));
    if (it == Mappings().end()) {
      return Status::Internal(who + ": export of memory that was not allocated shareable");
    }
    m = it->second;
  }
  // Handed out once loaded: from here the holder's own mapping reads only, as its attachers' do
  // (ImportSharedGpuMemory), so no kernel of either can change the weights the others see.
  // A driver that refuses read-only access leaves the mapping as it was: the weights are still
  // served, only without that guard.
  const CUmemAccessDesc read_only = AccessFor(m.ordinal, CU_MEM_ACCESS_FLAGS_PROT_READ);
  (void)d.set_access(reinterpret_cast<uintptr_t>(ptr), m.bytes, &read_only, 1);
  int fd = -1;
  const CUresult r = d.export_handle(&fd, m.handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
  if (r != CUDA_SUCCESS) return DriverStatus(r, who, "exporting shared memory");
  return ExportedMemory{fd, m.bytes};
}

Result<void*> ImportSharedGpuMemory(int ordinal, int fd, uint64_t bytes, const std::string& who) {
  HOIST_ASSIGN_OR_RETURN(const Driver* d, Ready(ordinal, who));
  const CUmemAllocationProp prop = PropertiesFor(ordinal);
  size_t granularity = 0;
  CUresult r = d->granularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
  if (r != CUDA_SUCCESS || granularity == 0) return DriverStatus(r, who, "reading the granularity");
  if (bytes % granularity != 0) {
    return Status::InvalidArgument(who + ": shared memory of " + std::to_string(bytes) +
                                   " bytes is not a whole number of the driver's " +
                                   std::to_string(granularity) + "-byte pages");
  }
  CUmemGenericAllocationHandle handle = 0;
  r = d->import_handle(&handle, reinterpret_cast<void*>(static_cast<intptr_t>(fd)),
                       CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  if (r != CUDA_SUCCESS) return DriverStatus(r, who, "importing shared memory");
  // Read access only: a process admitted to the weights cannot write what the holder and every
  // other attacher read through a mapping of its own (a kernel's write faults). It holds the
  // handle, though, and could map it again read-write: docs/SERVE.md says whom to admit.
  auto mapped = MapHandle(*d, ordinal, handle, static_cast<size_t>(bytes), granularity,
                          CU_MEM_ACCESS_FLAGS_PROT_READ, who);
  if (!mapped.ok()) {  // a driver without read-only device mappings: as before, read-write
    mapped = MapHandle(*d, ordinal, handle, static_cast<size_t>(bytes), granularity,
                       CU_MEM_ACCESS_FLAGS_PROT_READWRITE, who);
  }
  if (!mapped.ok()) (void)d->release(handle);
  return mapped;
}

Result<bool> FreeSharedGpuMemory(void* ptr, const std::string& who) {
  Mapping m;
  {
    std::lock_guard<std::mutex> lock(g_mappings_mutex);
    auto it = Mappings().find(reinterpret_cast<uintptr_t>(ptr));
    if (it == Mappings().end()) return false;
    m = it->second;
    Mappings().erase(it);
  }
  const Driver& d = TheDriver();
  const auto at = static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(ptr));
  CUresult r = d.unmap(at, m.bytes);
  if (r == CUDA_SUCCESS) r = d.address_free(at, m.bytes);
  const CUresult released = d.release(m.handle);
  if (r != CUDA_SUCCESS) return DriverStatus(r, who, "unmapping shared memory");
  if (released != CUDA_SUCCESS) return DriverStatus(released, who, "releasing shared memory");
  return true;
}

}  // namespace hoist
