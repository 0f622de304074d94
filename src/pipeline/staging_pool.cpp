#include "pipeline/staging_pool.h"

#include <algorithm>

#include "base/threads.h"
#include "base/units.h"
#include "device/host_memory.h"

namespace hoist {

StagingBuffer& StagingBuffer::operator=(StagingBuffer&& other) noexcept {
  if (this != &other) {
    Release();
    pool_ = other.pool_;
    index_ = other.index_;
    data_ = other.data_;
    other.pool_ = nullptr;
    other.data_ = nullptr;
  }
  return *this;
}

void StagingBuffer::Abandon() {
  if (pool_ != nullptr && data_ != nullptr) pool_->Leak(index_);
  pool_ = nullptr;
  data_ = nullptr;
}

void StagingBuffer::Release() {
  if (pool_ != nullptr && data_ != nullptr) pool_->Return(index_);
  pool_ = nullptr;
  data_ = nullptr;
}

Result<std::unique_ptr<StagingPool>> StagingPool::Create(std::shared_ptr<CheckedDevice> device,
                                                         uint64_t budget_bytes,
                                                         uint64_t buffer_bytes) {
  constexpr size_t kUpFront = 4;  // buffers allocated before streaming starts
  std::unique_ptr<StagingPool> pool(new StagingPool());
  pool->device_ = std::move(device);
  // At least two buffers so reading and copying overlap. Whole pages, so that every buffer
  // carved from an allocation starts on a page: direct reads need 4096-byte-aligned buffers
  // whatever chunk size was asked for.
  constexpr uint64_t kPage = 4096;
  buffer_bytes =
      AlignUp(std::max<uint64_t>(kPage, std::min(buffer_bytes, budget_bytes / 2)), kPage);
  for (uint64_t size = buffer_bytes;; size = AlignUp(size / 2, kPage)) {
    const size_t count = static_cast<size_t>(std::max<uint64_t>(2, budget_bytes / size));
    // All of the first buffers in one allocation, else just two.
    for (size_t first : {std::min(count, kUpFront), size_t{2}}) {
      auto p = pool->device_->AllocatePinned(first * size);
      if (!p.ok()) continue;
      pool->buffer_bytes_ = size;
      pool->planned_buffers_ = count;
      {
        MutexLock lock(pool->mutex_);  // not shared yet; the analysis asks for it all the same
        pool->report_.buffer_bytes = size;
        if (size < buffer_bytes) {
          pool->report_.fallbacks.push_back("pinned buffers of " + FormatBytes(buffer_bytes) +
                                            " could not be had; staging in " + FormatBytes(size));
        }
        pool->buffers_.reserve(count);
      }
      pool->AddRegion(static_cast<unsigned char*>(p.value()), first);
      if (count > first) pool->GrowInBackground(first, count);
      return pool;
    }
    if (size / 2 < kMinPinnedBufferBytes || size / 2 < 4096) break;
  }
  // No pinned memory at all: stage in ordinary memory, copied in small pieces.
  pool->pinned_ = false;
  pool->buffer_bytes_ = buffer_bytes;
  const size_t pageable = static_cast<size_t>(std::max<uint64_t>(2, budget_bytes / buffer_bytes));
  pool->planned_buffers_ = pageable;
  {
    MutexLock lock(pool->mutex_);
    pool->report_.pinned = false;
    pool->report_.buffer_bytes = buffer_bytes;
    pool->buffers_.reserve(pageable);
  }
  HOIST_ASSIGN_OR_RETURN(void* memory, AllocateHostMemory(pageable * buffer_bytes, "staging"));
  pool->AddRegion(static_cast<unsigned char*>(memory), pageable);
  MutexLock lock(pool->mutex_);
  pool->report_.fallbacks.push_back(
      "no pinned memory could be allocated: staging in ordinary (pageable) memory with "
      "device copies of at most " +
      FormatBytes(kPageableCopyBytes) + ", which is slower");
  return pool;
}

void StagingPool::AddRegion(unsigned char* memory, size_t count) {
  {
    MutexLock lock(mutex_);
    regions_.push_back({memory, false});
    for (size_t i = 0; i < count; ++i) {
      buffers_.push_back(memory + i * buffer_bytes_);
      region_of_.push_back(regions_.size() - 1);
      free_.push_back(buffers_.size() - 1);
    }
    report_.buffers = buffers_.size();
  }
  available_.notify_all();
}

bool StagingPool::TryAddRegion(size_t count) {
  auto p = device_->AllocatePinned(count * buffer_bytes_);
  if (!p.ok()) return false;
  AddRegion(static_cast<unsigned char*>(p.value()), count);
  return true;
}

void StagingPool::Grow(size_t have, size_t count) {
  // First the rest in up to 4 allocations made at once: faulting in (zeroing) fresh pages
  // runs in parallel, so the readers waiting for buffers get them sooner.
  const size_t rest = count - have;
  const size_t parts = std::min<size_t>(4, rest);
  std::vector<size_t> sizes(parts, rest / parts);
  for (size_t i = 0; i < rest % parts; ++i) ++sizes[i];
  std::atomic<size_t> added{0};
  std::vector<std::thread> helpers;
  for (size_t i = 1; i < parts; ++i) {
    auto helper = StartThread("a staging allocation thread", [this, &added, n = sizes[i]] {
      if (TryAddRegion(n)) added += n;
    });
    if (!helper.ok()) break;  // the halving loop below allocates the rest on this thread
    helpers.push_back(std::move(helper).value());
  }
  if (TryAddRegion(sizes[0])) added += sizes[0];
  for (std::thread& t : helpers) t.join();
  have += added.load();
  // Whatever failed: smaller allocations, halving down to one buffer.
  size_t piece = count - have;
  while (have < count && !stop_growing_.load()) {
    piece = std::min(piece, count - have);
    if (TryAddRegion(piece)) {
      have += piece;
    } else if (piece > 1) {
      piece = (piece + 1) / 2;
    } else {
      MutexLock lock(mutex_);
      report_.fallbacks.push_back("pinned memory ran out after " + std::to_string(have) + " of " +
                                  std::to_string(count) + " staging buffers of " +
                                  FormatBytes(buffer_bytes_) + "; staging with fewer");
      return;
    }
  }
}

void StagingPool::GrowInBackground(size_t have, size_t count) {
  {
    MutexLock lock(mutex_);
    growing_ = true;
  }
  auto grower = StartThread("the staging pool's allocation thread", [this, have, count] {
    Grow(have, count);
    MutexLock lock(mutex_);
    growing_ = false;
    grown_.notify_all();
  });
  if (grower.ok()) {
    grower_ = std::move(grower).value();
    return;
  }
  MutexLock lock(mutex_);
  growing_ = false;
  report_.fallbacks.push_back(grower.status().message() + "; staging with the first " +
                              std::to_string(have) + " buffers");
}

StagingPoolReport StagingPool::ReportOnceGrown() {
  MutexLock lock(mutex_);
  lock.Wait(grown_, [this]() HOIST_REQUIRES(mutex_) { return !growing_; });
  return report_;
}

StagingPoolReport StagingPool::report() {
  MutexLock lock(mutex_);
  return report_;
}

StagingPool::~StagingPool() {
  stop_growing_.store(true);
  if (grower_.joinable()) grower_.join();
  for (const Region& r : regions_) {
    if (r.leaked) continue;
    if (pinned_) {
      (void)device_->ReturnPinned(r.memory);
    } else {
      FreeHostMemory(r.memory);
    }
  }
}

std::optional<StagingBuffer> StagingPool::Acquire(std::chrono::milliseconds wait) {
  MutexLock lock(mutex_);
  if (!lock.WaitFor(available_, wait, [this]() HOIST_REQUIRES(mutex_) { return !free_.empty(); })) {
    return std::nullopt;
  }
  const size_t index = free_.back();
  free_.pop_back();
  return StagingBuffer(this, index, buffers_[index]);
}

void StagingPool::Return(size_t index) {
  {
    MutexLock lock(mutex_);
    free_.push_back(index);
  }
  available_.notify_one();
}

void StagingPool::Leak(size_t index) {
  MutexLock lock(mutex_);
  regions_[region_of_[index]].leaked = true;
}

}  // namespace hoist
