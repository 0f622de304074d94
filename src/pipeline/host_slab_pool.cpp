#include "pipeline/host_slab_pool.h"

#include <utility>

#include "device/host_memory.h"

namespace hoist {

std::shared_ptr<HostSlabPool> HostSlabPool::Create(PinnedMemorySource source,
                                                   uint64_t pinned_limit_bytes) {
  return std::shared_ptr<HostSlabPool>(new HostSlabPool(std::move(source), pinned_limit_bytes));
}

HostSlabPool::~HostSlabPool() { Release(); }

Result<std::shared_ptr<HostSlab>> HostSlabPool::Take(uint64_t bytes, bool pinned) {
  const uint64_t size = bytes <= kHostSlabBytes
                            ? kHostSlabBytes
                            : (bytes + kHostSlabBytes - 1) / kHostSlabBytes * kHostSlabBytes;
  if (pinned && can_pin()) {
    HostSlab* kept = nullptr;
    bool room = false;
    {
      MutexLock lock(mutex_);
      const auto it = free_.find(size);
      if (it != free_.end()) {
        kept = it->second;
        free_.erase(it);
      } else if (pinned_ + size <= limit_) {
        pinned_ += size;  // held while pinning, so that two threads stay within the bound
        room = true;
      }
    }
    if (kept != nullptr) {
      if (source_.settle) source_.settle();
      return Wrap(kept);
    }
    if (room) {
      Result<void*> p = source_.allocate(size);
      if (p.ok()) return Wrap(new HostSlab{*p, size, true});
      MutexLock lock(mutex_);
      pinned_ -= size;  // cannot pin (memlock limit): pageable, as past the bound
    }
  }
  // Pageable memory is not kept: a slab of the batch's own size.
  HOIST_ASSIGN_OR_RETURN(void* p, AllocateHostMemory(bytes, "host tensors"));
  return Wrap(new HostSlab{p, bytes, false});
}

std::shared_ptr<HostSlab> HostSlabPool::Wrap(HostSlab* slab) {
  std::weak_ptr<HostSlabPool> pool = weak_from_this();
  return {slab, [pool](HostSlab* s) {
            if (s->pinned) {
              if (const std::shared_ptr<HostSlabPool> owner = pool.lock()) {
                owner->GiveBack(s);
                return;
              }
            }
            // A pageable slab, or a pinned one whose pool is gone (at exit): its memory goes.
            if (!s->pinned) FreeHostMemory(s->data);
            delete s;
          }};
}

void HostSlabPool::GiveBack(HostSlab* slab) {
  MutexLock lock(mutex_);
  free_.emplace(slab->bytes, slab);
}

void HostSlabPool::Free(const HostSlab& slab) { source_.free(slab.data, slab.bytes); }

void HostSlabPool::Release() {
  std::multimap<uint64_t, HostSlab*> slabs;
  {
    MutexLock lock(mutex_);
    slabs.swap(free_);
    for (const auto& [size, slab] : slabs) pinned_ -= size;
  }
  for (const auto& [size, slab] : slabs) {
    Free(*slab);
    delete slab;
  }
}

uint64_t HostSlabPool::pinned_bytes() const {
  MutexLock lock(mutex_);
  return pinned_;
}

}  // namespace hoist
