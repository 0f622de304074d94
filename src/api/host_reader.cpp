#include "api/host_reader.h"

#include <algorithm>
#include <functional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "api/settings.h"
#include "base/mutex.h"
#include "device/device.h"

namespace hoist {
namespace {

struct SlabPools {
  Mutex mutex;
  std::shared_ptr<HostSlabPool> pinned HOIST_GUARDED_BY(mutex);
  std::shared_ptr<HostSlabPool> pageable HOIST_GUARDED_BY(mutex);
  std::shared_ptr<const std::function<void()>> settle HOIST_GUARDED_BY(mutex);
};

SlabPools& Pools() {
  static auto* pools = new SlabPools();  // never destroyed: slabs handed out may outlive main
  return *pools;
}

// Slabs from a GPU's pinned memory (any GPU's: it is portable), when one is present.
PinnedMemorySource GpuPinnedMemory() {
  Result<std::shared_ptr<CheckedDevice>> gpu = OpenDevice("auto");
  if (!gpu.ok() || (*gpu)->Info().kind != DeviceKind::kGpu) return {};
  std::shared_ptr<CheckedDevice> device = *gpu;
  return {[device](uint64_t bytes) { return device->AllocatePinned(bytes); },
          [device](void* p, uint64_t bytes) { (void)device->ReturnPinned(p, bytes); },
          [] {
            std::shared_ptr<const std::function<void()>> settle;
            {
              SlabPools& pools = Pools();
              MutexLock lock(pools.mutex);
              settle = pools.settle;
            }
            if (settle && *settle) (*settle)();
          }};
}

std::shared_ptr<HostSlabPool> PoolFor(bool pinned, uint64_t pinned_limit_bytes) {
  SlabPools& pools = Pools();
  MutexLock lock(pools.mutex);
  std::shared_ptr<HostSlabPool>& pool = pinned ? pools.pinned : pools.pageable;
  if (!pool) {
    pool =
        HostSlabPool::Create(pinned ? GpuPinnedMemory() : PinnedMemorySource{}, pinned_limit_bytes);
  }
  return pool;
}

// One batch: a load of its tensors onto the host, each into its slab's place.
ReadBatchFn LoadBatches(const TensorDirectory& dir, LoadRequest base) {
  base.device = "host";
  base.options.checksum = false;
  return [&dir, base = std::move(base)](const ReadBatch& batch) {
    LoadRequest request = base;
    request.options.names.clear();
    // Sized to the batch, not the directory: a model of many tensors read in small batches.
    std::unordered_map<size_t, void*> at(batch.indices.size());
    for (size_t k = 0; k < batch.indices.size(); ++k) {
      request.options.names.push_back(dir.tensors[batch.indices[k]].name);
      at.emplace(batch.indices[k], batch.destinations[k]);
    }
    request.options.destination = [&at](size_t index, const TensorEntry& t) -> Result<void*> {
      const auto found = at.find(index);
      if (found == at.end()) return Status::Internal(t.name + " is not in the batch being read");
      return found->second;
    };
    request.options.progress = [&batch](const LoadProgress&) { return !batch.cancelled(); };
    Result<CompletedLoad> loaded = Load(dir, request);
    return loaded.ok() ? Status::Ok() : loaded.status();
  };
}

}  // namespace

Result<std::unique_ptr<ReadAhead>> OpenHostReader(const TensorDirectory& dir,
                                                  const HostReaderRequest& request) {
  HOIST_ASSIGN_OR_RETURN(const Settings settings, ProcessSettings());
  HOIST_RETURN_IF_ERROR(CheckRequest(request.load));
  ReadAhead::Tensors tensors;
  for (const TensorEntry& t : dir.tensors) {
    tensors.names.push_back(t.name);
    tensors.nbytes.push_back(t.nbytes);
  }
  tensors.file_order = request.indices;
  if (tensors.file_order.empty()) {
    for (size_t i = 0; i < dir.tensors.size(); ++i) tensors.file_order.push_back(i);
  }
  for (const size_t i : tensors.file_order) {
    if (i >= dir.tensors.size()) {
      return Status::InvalidArgument("tensor index " + std::to_string(i) + " is past the model's " +
                                     std::to_string(dir.tensors.size()) + " tensors");
    }
  }
  // By the index last, so that an index named twice lands next to itself (tensors that share an
  // offset, zero-byte ones, would otherwise keep the caller's order between its repeats).
  std::sort(tensors.file_order.begin(), tensors.file_order.end(), [&](size_t a, size_t b) {
    const TensorEntry& x = dir.tensors[a];
    const TensorEntry& y = dir.tensors[b];
    if (x.file != y.file) return x.file < y.file;
    return x.offset != y.offset ? x.offset < y.offset : a < b;
  });
  tensors.file_order.erase(std::unique(tensors.file_order.begin(), tensors.file_order.end()),
                           tensors.file_order.end());
  const bool pinned =
      request.pin == HostReaderRequest::Pin::kOn ||
      (request.pin == HostReaderRequest::Pin::kSettings && settings.pin != PinMode::kOff);
  const uint64_t ahead = request.ahead_bytes > 0 ? request.ahead_bytes : settings.ahead_bytes;
  return std::make_unique<ReadAhead>(std::move(tensors), LoadBatches(dir, request.load),
                                     PoolFor(pinned, settings.pinned_limit_bytes), pinned, ahead);
}

void SetHostMemoryReuseHook(std::function<void()> settle) {
  SlabPools& pools = Pools();
  MutexLock lock(pools.mutex);
  pools.settle = std::make_shared<const std::function<void()>>(std::move(settle));
}

void ReleaseHostSlabs() {
  SlabPools& pools = Pools();
  std::shared_ptr<HostSlabPool> pinned;
  {
    MutexLock lock(pools.mutex);
    pinned = pools.pinned;
  }
  if (pinned) pinned->Release();
}

}  // namespace hoist
