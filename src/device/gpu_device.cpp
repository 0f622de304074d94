// The GPU backend for CUDA and HIP (one source, two vendors through gpu_vendor.h): streams,
// asynchronous copies from pinned memory, events polled rather than waited on.
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "base/platform.h"
#include "device/device.h"
#include "device/gpu_shared_memory.h"
#include "device/gpu_vendor.h"
#include "device/host_memory.h"
#if defined(HOIST_GPU_KERNELS)
#include "pack/exponent_decode_gpu.h"
#endif

namespace hoist {

// What ordinal is and can do, asked without opening it (the registry lists devices with it).
DeviceInfo DescribeGpu(int ordinal);

namespace {

// An error from asking for devices, in words: cudart says "driver version is insufficient"
// both when the driver is too old and when there is none, so the driver library is tried.
std::string DescribeGpuError(gpuError_t err) {
  std::string name = gpuGetErrorName(err);
  if (err == gpuErrorInsufficientDriver && !SharedLibraryLoads(kGpuDriverLibrary)) {
    return "no GPU driver: " + std::string(kGpuDriverLibrary) + " cannot be loaded; " + name;
  }
  return name + ": " + gpuGetErrorString(err);
}

Status GpuStatus(gpuError_t err, const std::string& device, const char* what) {
  return Status::DeviceError(device + ": " + what + " failed: " + gpuGetErrorString(err));
}

// The runtime's description of GPU ordinal, asked once per process: it is slow to answer
// (every attribute is queried), and an attach opens its device in a few milliseconds.
bool CachedProperties(int ordinal, gpuDeviceProp_t& out) {
  static std::mutex mutex;
  static auto* cache = new std::map<int, gpuDeviceProp_t>();
  std::lock_guard<std::mutex> lock(mutex);
  auto it = cache->find(ordinal);
  if (it == cache->end()) {
    gpuDeviceProp_t prop{};
    if (gpuGetDeviceProperties(&prop, ordinal) != gpuSuccess) return false;
    it = cache->emplace(ordinal, prop).first;
  }
  out = it->second;
  return true;
}

class GpuDevice;

// Pinned regions kept after a load for the next load in this process: pinning fresh memory
// (faulting in, zeroing and registering it) is the largest fixed cost of a warm load
// (docs/PERFORMANCE.md, "Why the defaults"). A request no kept
// region fits exactly releases them all first, so the cache holds at most one pool's worth.
// Registered memory is portable: one cache serves every GPU. Thread safe.
class PinnedCache {
 public:
  static PinnedCache& Get() {
    static auto* cache = new PinnedCache();  // never destroyed: the OS reclaims it at exit
    return *cache;
  }
  void* Take(uint64_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = kept_.begin(); it != kept_.end(); ++it) {
      if (it->second == bytes) {
        void* p = it->first;
        kept_.erase(it);
        return p;
      }
    }
    return nullptr;
  }
  void Keep(void* p, uint64_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    kept_.emplace_back(p, bytes);
  }
  // Unpins and frees every kept region.
  void Release() {
    std::vector<std::pair<void*, uint64_t>> kept;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      kept.swap(kept_);
    }
    for (const auto& [p, bytes] : kept) {
      if (gpuHostUnregister(p) == gpuSuccess) FreeHostMemory(p);
    }
  }

 private:
  std::mutex mutex_;
  std::vector<std::pair<void*, uint64_t>> kept_;
};

class GpuCopyHandle final : public CopyHandle {
 public:
  GpuCopyHandle(GpuDevice* device, gpuEvent_t event) : device_(device), event_(event) {}
  ~GpuCopyHandle() override;
  Result<bool> Poll() override;

 private:
  GpuDevice* device_;
  gpuEvent_t event_;
};

class GpuDevice final : public Device {
 public:
  static Result<std::unique_ptr<Device>> Open(int ordinal, int streams) {
    int count = 0;
    gpuError_t err = gpuGetDeviceCount(&count);
    if (err != gpuSuccess) {
      return Status::Unavailable(std::string(HOIST_GPU_PREFIX) + ": no usable GPU (" +
                                 DescribeGpuError(err) + ")");
    }
    if (ordinal < 0 || ordinal >= count) {
      return Status::Unavailable(std::string(HOIST_GPU_PREFIX) + ":" + std::to_string(ordinal) +
                                 ": no such GPU (" + std::to_string(count) + " present)");
    }
    auto device = std::unique_ptr<GpuDevice>(new GpuDevice(ordinal));
    HOIST_RETURN_IF_ERROR(device->Start(streams));
    return std::unique_ptr<Device>(std::move(device));
  }

  ~GpuDevice() override {
    if (gpuSetDevice(ordinal_) != gpuSuccess) return;
    for (gpuEvent_t e : free_events_) (void)gpuEventDestroy(e);
    for (gpuStream_t s : streams_) (void)gpuStreamDestroy(s);
    if (decode_stream_ != nullptr) (void)gpuStreamDestroy(decode_stream_);
  }

  DeviceInfo Info() override {
    DeviceInfo info = DescribeGpu(ordinal_);
    size_t free_bytes = 0;
    size_t total_bytes = 0;
    if (Bind().ok() && gpuMemGetInfo(&free_bytes, &total_bytes) == gpuSuccess) {
      info.total_memory = total_bytes;
      info.free_memory = free_bytes;
    }
    return info;
  }
  int queues() const override { return static_cast<int>(streams_.size()); }

  Result<void*> AllocateDevice(uint64_t bytes) override {
    HOIST_RETURN_IF_ERROR(Bind());
    void* p = nullptr;
    gpuError_t err = gpuMalloc(&p, bytes);
    if (err != gpuSuccess)
      return GpuStatus(err, name_, ("allocating " + std::to_string(bytes) + " bytes").c_str());
    return p;
  }
  Status FreeDevice(void* ptr) override {
    HOIST_RETURN_IF_ERROR(Bind());
    HOIST_ASSIGN_OR_RETURN(const bool shared, FreeSharedGpuMemory(ptr, name_));
    if (shared) return Status::Ok();
    gpuError_t err = gpuFree(ptr);
    return err == gpuSuccess ? Status::Ok() : GpuStatus(err, name_, "free");
  }
  // Pinned memory is ordinary memory on huge pages, faulted in, then registered: much faster to
  // set up and to free than the runtime's own pinned allocation (docs/PERFORMANCE.md). Freed
  // regions go to the PinnedCache for the next load.
  Result<void*> AllocatePinned(uint64_t bytes) override {
    HOIST_RETURN_IF_ERROR(Bind());
    void* p = PinnedCache::Get().Take(bytes);
    if (p == nullptr) {
      PinnedCache::Get().Release();
      HOIST_ASSIGN_OR_RETURN(p, AllocatePopulatedHostMemory(bytes, name_.c_str()));
      gpuError_t err = gpuHostRegisterPortable(p, bytes);
      if (err != gpuSuccess) {
        FreeHostMemory(p);
        return GpuStatus(err, name_,
                         ("pinning " + std::to_string(bytes) + " bytes of host memory").c_str());
      }
    }
    return p;
  }
  Status ReturnPinned(void* ptr, uint64_t bytes) override {
    PinnedCache::Get().Keep(ptr, bytes);
    return Status::Ok();
  }

  Result<std::unique_ptr<CopyHandle>> CopyToDeviceAsync(void* dst, const void* src, uint64_t n,
                                                        int queue) override {
    HOIST_RETURN_IF_ERROR(Bind());
    gpuStream_t stream = streams_[static_cast<size_t>(queue)];
    const gpuError_t err = gpuMemcpyAsyncH2D(dst, src, n, stream);
    if (err != gpuSuccess) return GpuStatus(err, name_, "asynchronous copy to device");
    return CompletionOf(stream);
  }

  Result<std::unique_ptr<CopyHandle>> CopyRowsToDeviceAsync(void* dst, const void* src,
                                                            uint64_t width, uint64_t rows,
                                                            uint64_t src_pitch,
                                                            int queue) override {
    HOIST_RETURN_IF_ERROR(Bind());
    gpuStream_t stream = streams_[static_cast<size_t>(queue)];
    const gpuError_t err = gpuMemcpy2DAsyncH2D(dst, width, src, src_pitch, width, rows, stream);
    if (err != gpuSuccess) return GpuStatus(err, name_, "asynchronous copy of rows to device");
    return CompletionOf(stream);
  }

  bool CanReachPeer(const Device& peer) const override {
    const auto* other = dynamic_cast<const GpuDevice*>(&peer);
    int can = 0;
    return other != nullptr && other->ordinal_ != ordinal_ &&
           gpuDeviceCanAccessPeer(&can, ordinal_, other->ordinal_) == gpuSuccess && can != 0;
  }

  // Over NVLink or PCIe P2P, with peer access enabled once per pair (without it the runtime
  // stages the copy through host memory).
  Result<std::unique_ptr<CopyHandle>> CopyToPeerAsync(void* dst, Device& peer, const void* src,
                                                      uint64_t n, int queue) override {
    auto* other = dynamic_cast<GpuDevice*>(&peer);
    if (other == nullptr || !CanReachPeer(peer))
      return Device::CopyToPeerAsync(dst, peer, src, n, queue);
    HOIST_RETURN_IF_ERROR(EnablePeerAccess(other->ordinal_));
    HOIST_RETURN_IF_ERROR(Bind());
    gpuStream_t stream = streams_[static_cast<size_t>(queue)];
    const gpuError_t err = gpuMemcpyPeerAsync(dst, other->ordinal_, src, ordinal_, n, stream);
    if (err != gpuSuccess) return GpuStatus(err, name_, ("copy to " + other->name_).c_str());
    return CompletionOf(stream);
  }

  // A handle that completes when the work queued on stream so far has.
  Result<std::unique_ptr<CopyHandle>> CompletionOf(gpuStream_t stream) {
    HOIST_ASSIGN_OR_RETURN(gpuEvent_t event, TakeEvent());
    const gpuError_t err = gpuEventRecord(event, stream);
    if (err != gpuSuccess) {
      ReturnEvent(event);
      return GpuStatus(err, name_, "recording a copy's event");
    }
    return std::unique_ptr<CopyHandle>(new GpuCopyHandle(this, event));
  }

#if defined(HOIST_GPU_KERNELS)
  // On a stream of its own, so that decodes never wait behind the copies of later chunks.
  Result<std::unique_ptr<CopyHandle>> DecodeExponentsAsync(const GpuExponentTensor& t) override {
    HOIST_RETURN_IF_ERROR(Bind());
    std::lock_guard<std::mutex> lock(decode_mutex_);
    if (decode_stream_ == nullptr) {
      const gpuError_t err = gpuStreamCreateNonBlocking(&decode_stream_);
      if (err != gpuSuccess) return GpuStatus(err, name_, "creating the decode stream");
    }
    const auto err = static_cast<gpuError_t>(LaunchExponentDecode(t, decode_stream_));
    if (err != gpuSuccess) return GpuStatus(err, name_, "launching a decode");
    return CompletionOf(decode_stream_);
  }
#endif

  Result<void*> AllocateShareable(uint64_t bytes) override {
    return AllocateSharedGpuMemory(ordinal_, bytes, name_);
  }
  Result<ExportedMemory> ExportShareable(void* ptr) override {
    return ExportSharedGpuMemory(ptr, name_);
  }
  Result<void*> ImportShareable(int fd, uint64_t bytes) override {
    return ImportSharedGpuMemory(ordinal_, fd, bytes, name_);
  }
  Status CopyWithinDevice(void* dst, const void* src, uint64_t n) override {
    HOIST_RETURN_IF_ERROR(Bind());
    // On a stream and waited for: cudaMemcpy between device addresses returns before the copy
    // has run, and the caller lets the source go next (an attach unmaps the holder's memory).
    gpuStream_t stream = streams_.empty() ? nullptr : streams_[0];
    gpuError_t err = gpuMemcpyAsyncD2D(dst, src, n, stream);
    if (err == gpuSuccess) err = gpuStreamSynchronize(stream);
    return err == gpuSuccess ? Status::Ok() : GpuStatus(err, name_, "copy within the device");
  }

  Status CopyToHost(void* dst, const void* src, uint64_t n) override {
    HOIST_RETURN_IF_ERROR(Bind());
    gpuError_t err = gpuMemcpyD2H(dst, src, n);
    return err == gpuSuccess ? Status::Ok() : GpuStatus(err, name_, "copy to host");
  }

  Result<bool> Query(gpuEvent_t event) {
    gpuError_t err = gpuEventQuery(event);
    if (err == gpuSuccess) return true;
    if (err == gpuErrorNotReady) return false;
    return GpuStatus(err, name_, "copy");
  }

  void ReturnEvent(gpuEvent_t event) {
    std::lock_guard<std::mutex> lock(mutex_);
    free_events_.push_back(event);
  }

 private:
  explicit GpuDevice(int ordinal)
      : ordinal_(ordinal), name_(std::string(HOIST_GPU_PREFIX) + ":" + std::to_string(ordinal)) {}

  Status Start(int streams) {
    HOIST_RETURN_IF_ERROR(Bind());
    gpuDeviceProp_t prop{};
    if (CachedProperties(ordinal_, prop)) description_ = prop.name;
    for (int i = 0; i < streams; ++i) {
      gpuStream_t s = nullptr;
      gpuError_t err = gpuStreamCreateNonBlocking(&s);
      if (err != gpuSuccess) return GpuStatus(err, name_, "creating a stream");
      streams_.push_back(s);
    }
    return Status::Ok();
  }

  Status EnablePeerAccess(int other) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (peers_enabled_.count(other) != 0) return Status::Ok();
    HOIST_RETURN_IF_ERROR(Bind());
    gpuError_t err = gpuDeviceEnablePeerAccess(other, 0);
    if (err == gpuErrorPeerAccessAlreadyEnabled) {
      (void)gpuGetLastError();  // the runtime keeps this one as the thread's last error
      err = gpuSuccess;
    }
    if (err != gpuSuccess) return GpuStatus(err, name_, "enabling peer access");
    peers_enabled_.insert(other);
    return Status::Ok();
  }

  // The runtime's current device is per thread; every thread that calls in binds first.
  Status Bind() {
    gpuError_t err = gpuSetDevice(ordinal_);
    return err == gpuSuccess ? Status::Ok() : GpuStatus(err, name_, "selecting the device");
  }

  Result<gpuEvent_t> TakeEvent() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!free_events_.empty()) {
        gpuEvent_t e = free_events_.back();
        free_events_.pop_back();
        return e;
      }
    }
    gpuEvent_t e = nullptr;
    gpuError_t err = gpuEventCreateNoTiming(&e);
    if (err != gpuSuccess) return GpuStatus(err, name_, "creating an event");
    return e;
  }

  int ordinal_;
  std::string name_;
  std::string description_;
  std::vector<gpuStream_t> streams_;
  std::mutex mutex_;
  std::vector<gpuEvent_t> free_events_;
  std::set<int> peers_enabled_;  // ordinals this device's context may access (under mutex_)
  std::mutex decode_mutex_;
  gpuStream_t decode_stream_ = nullptr;  // created with the first decode
};

}  // namespace

DeviceInfo DescribeGpu(int ordinal) {
  DeviceInfo info;
  info.name = std::string(HOIST_GPU_PREFIX) + ":" + std::to_string(ordinal);
  info.kind = DeviceKind::kGpu;
  gpuDeviceProp_t prop{};
  if (CachedProperties(ordinal, prop)) {
    info.description = prop.name;
    info.total_memory = prop.totalGlobalMem;
  }
  DeviceCapabilities& caps = info.capabilities;
  caps.async_copies = true;
  caps.staging_domain = StagingDomain::kGpuPinned;
#if defined(HOIST_GPU_HIP)
  caps.pageable_copies_can_hang = true;
#endif
  caps.caches_pinned_memory = true;  // PinnedCache
#if defined(HOIST_GPU_KERNELS)
  caps.decodes_exponents = true;
#endif
  caps.shares_memory = GpuCanShareMemory(ordinal);
  int count = 0;
  if (gpuGetDeviceCount(&count) == gpuSuccess) {
    for (int other = 0; other < count; ++other) {
      int can = 0;
      if (other != ordinal && gpuDeviceCanAccessPeer(&can, ordinal, other) == gpuSuccess &&
          can != 0) {
        caps.peers.push_back(std::string(HOIST_GPU_PREFIX) + ":" + std::to_string(other));
      }
    }
  }
  return info;
}

namespace {

GpuCopyHandle::~GpuCopyHandle() { device_->ReturnEvent(event_); }
Result<bool> GpuCopyHandle::Poll() { return device_->Query(event_); }

}  // namespace

Result<std::unique_ptr<Device>> MakeGpuDevice(int ordinal, int streams) {
  return GpuDevice::Open(ordinal, streams);
}

void ReleaseCachedGpuMemory() { PinnedCache::Get().Release(); }

std::string GpuUnusableReason() {
  int count = 0;
  const gpuError_t err = gpuGetDeviceCount(&count);
  if (err == gpuSuccess && count > 0) return "";
  std::string why = std::string(HOIST_GPU_PREFIX) + ": no usable GPU (";
  if (err == gpuSuccess) return why + "the driver reports none)";
  return why + DescribeGpuError(err) + ")";
}

int GpuDeviceCount() {
  int count = 0;
  return gpuGetDeviceCount(&count) == gpuSuccess ? count : 0;
}

}  // namespace hoist
