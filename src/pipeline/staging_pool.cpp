#include "pipeline/staging_pool.h"

#include <algorithm>

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
  std::unique_ptr<StagingPool> pool(new StagingPool());
  pool->device_ = std::move(device);
  // At least two buffers so reading and copying overlap.
  buffer_bytes = std::max<uint64_t>(4096, std::min(buffer_bytes, budget_bytes / 2));
  for (uint64_t size = buffer_bytes;; size /= 2) {
    const size_t count = static_cast<size_t>(std::max<uint64_t>(2, budget_bytes / size));
    for (size_t i = 0; i < count; ++i) {
      auto p = pool->device_->AllocatePinned(size);
      if (!p.ok()) break;
      pool->memory_.push_back(static_cast<unsigned char*>(p.value()));
    }
    if (pool->memory_.size() >= 2) {
      pool->report_.buffer_bytes = size;
      if (pool->memory_.size() < count) {
        pool->report_.fallbacks.push_back(
            "pinned memory ran out after " + std::to_string(pool->memory_.size()) + " of " +
            std::to_string(count) + " staging buffers of " + FormatBytes(size) +
            "; staging with fewer");
      }
      if (size < buffer_bytes) {
        pool->report_.fallbacks.push_back("pinned buffers of " + FormatBytes(buffer_bytes) +
                                          " could not be had; staging in " + FormatBytes(size));
      }
      break;
    }
    for (unsigned char* m : pool->memory_) (void)pool->device_->FreePinned(m);
    pool->memory_.clear();
    if (size / 2 < kMinPinnedBufferBytes || size / 2 < 4096) {
      // No pinned memory at all: stage in ordinary memory, copied in small pieces.
      pool->report_.pinned = false;
      pool->report_.buffer_bytes = buffer_bytes;
      const size_t pageable = static_cast<size_t>(std::max<uint64_t>(2, budget_bytes / buffer_bytes));
      for (size_t i = 0; i < pageable; ++i) {
        auto p = AllocateHostMemory(buffer_bytes, "staging");
        if (!p.ok()) return p.status();
        pool->memory_.push_back(static_cast<unsigned char*>(p.value()));
      }
      pool->report_.fallbacks.push_back(
          "no pinned memory could be allocated: staging in ordinary (pageable) memory with "
          "device copies of at most " + FormatBytes(kPageableCopyBytes) + ", which is slower");
      break;
    }
  }
  pool->report_.buffers = pool->memory_.size();
  pool->leaked_.assign(pool->memory_.size(), false);
  for (size_t i = 0; i < pool->memory_.size(); ++i) pool->free_.push_back(i);
  return pool;
}

StagingPool::~StagingPool() {
  for (size_t i = 0; i < memory_.size(); ++i) {
    if (leaked_[i]) continue;
    if (report_.pinned) {
      (void)device_->FreePinned(memory_[i]);
    } else {
      FreeHostMemory(memory_[i]);
    }
  }
}

std::optional<StagingBuffer> StagingPool::Acquire(std::chrono::milliseconds wait) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!available_.wait_for(lock, wait, [this] { return !free_.empty(); })) return std::nullopt;
  const size_t index = free_.back();
  free_.pop_back();
  return StagingBuffer(this, index, memory_[index]);
}

void StagingPool::Return(size_t index) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    free_.push_back(index);
  }
  available_.notify_one();
}

void StagingPool::Leak(size_t index) {
  std::lock_guard<std::mutex> lock(mutex_);
  leaked_[index] = true;
}

}  // namespace hoist
