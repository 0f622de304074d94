// Host memory for tensors that hoist reads and hands to its caller to keep (the consumer-ordered
// reader, pipeline/read_ahead.h): slabs pinned once and reused, because pinning fresh memory
// (about 2.5 GB/s on the H200 machine) costs more than reading a model's bytes into it. A slab
// goes back to the pool when the last tensor viewing it is dropped; what the pool pins is
// bounded, and past the bound slabs are pageable, so a consumer that keeps every tensor on the
// host never pins the machine's memory away.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "base/mutex.h"
#include "base/status.h"

namespace hoist {

// Every slab is at least this large, and larger ones a multiple of it: slabs of few sizes are
// reused by batches of any size.
inline constexpr uint64_t kHostSlabBytes = 256ULL << 20;
// Where each tensor starts inside a slab: any dtype can view it, DMA engines like it.
inline constexpr uint64_t kHostSlabAlignment = 256;

// How the pool pins memory: a GPU backend's AllocatePinned and ReturnPinned, or nothing.
struct PinnedMemorySource {
  std::function<Result<void*>(uint64_t bytes)> allocate;
  std::function<void(void* ptr, uint64_t bytes)> free;
  // Called before a slab given back is handed out again: returns once every copy a caller
  // started out of it has completed (a framework's non_blocking copy that hoist cannot see).
  std::function<void()> settle;
};

// One slab: its bytes stay valid while any shared_ptr to it lives.
struct HostSlab {
  void* data = nullptr;
  uint64_t bytes = 0;
  bool pinned = false;
};

// Thread safety: every method may be called from any thread; slabs may be dropped on any
// thread, after the pool too (a dropped slab then frees its memory).
class HostSlabPool : public std::enable_shared_from_this<HostSlabPool> {
 public:
  // pinned_limit_bytes bounds what is pinned at once, kept slabs included.
  static std::shared_ptr<HostSlabPool> Create(PinnedMemorySource source,
                                              uint64_t pinned_limit_bytes);
  HostSlabPool(const HostSlabPool&) = delete;
  HostSlabPool& operator=(const HostSlabPool&) = delete;
  ~HostSlabPool();

  // A slab of at least `bytes`: pinned when `pinned` is asked for, the source pins and the bound
  // allows, else pageable. kDeviceError when not even pageable memory is left.
  Result<std::shared_ptr<HostSlab>> Take(uint64_t bytes, bool pinned);
  // Unpins and frees the slabs no tensor uses.
  void Release();
  uint64_t pinned_bytes() const;
  bool can_pin() const { return static_cast<bool>(source_.allocate); }

 private:
  HostSlabPool(PinnedMemorySource source, uint64_t pinned_limit_bytes)
      : source_(std::move(source)), limit_(pinned_limit_bytes) {}
  void GiveBack(HostSlab* slab);
  void Free(const HostSlab& slab);
  std::shared_ptr<HostSlab> Wrap(HostSlab* slab);

  const PinnedMemorySource source_;
  const uint64_t limit_;
  mutable Mutex mutex_;
  std::multimap<uint64_t, HostSlab*> free_ HOIST_GUARDED_BY(mutex_);  // pinned slabs by size
  uint64_t pinned_ HOIST_GUARDED_BY(mutex_) = 0;
};

}  // namespace hoist
