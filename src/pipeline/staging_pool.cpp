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
  constexpr size_t kUpFront = 4;  // buffers allocated before streaming starts
  std::unique_ptr<StagingPool> pool(new StagingPool());
  pool->device_ = std::move(device);
  // At least two buffers so reading and copying overlap.
  buffer_bytes = std::max<uint64_t>(4096, std::min(buffer_bytes, budget_bytes / 2));
  for (uint64_t size = buffer_bytes;; size /= 2) {
    const size_t count = static_cast<size_t>(std::max<uint64_t>(2, budget_bytes / size));
    std::vector<unsigned char*> first;
    for (size_t i = 0; i < std::min(count, kUpFront); ++i) {
      auto p = pool->device_->AllocatePinned(size);
      if (!p.ok()) break;
      first.push_back(static_cast<unsigned char*>(p.value()));
    }
    if (first.size() >= 2) {
      pool->buffer_bytes_ = size;
      pool->report_.buffer_bytes = size;
      if (size < buffer_bytes) {
        pool->report_.fallbacks.push_back("pinned buffers of " + FormatBytes(buffer_bytes) +
                                          " could not be had; staging in " + FormatBytes(size));
      }
      pool->memory_.reserve(count);
      for (unsigned char* m : first) pool->Add(m);
      if (first.size() == std::min(count, kUpFront) && count > first.size()) {
        pool->GrowInBackground(count);
      } else if (first.size() < count) {
        pool->report_.fallbacks.push_back("pinned memory ran out after " +
                                          std::to_string(first.size()) + " of " +
                                          std::to_string(count) + " staging buffers of " +
                                          FormatBytes(size) + "; staging with fewer");
      }
      return pool;
    }
    for (unsigned char* m : first) (void)pool->device_->FreePinned(m);
    if (size / 2 < kMinPinnedBufferBytes || size / 2 < 4096) break;
  }
  // No pinned memory at all: stage in ordinary memory, copied in small pieces.
  pool->pinned_ = false;
  pool->report_.pinned = false;
  pool->buffer_bytes_ = buffer_bytes;
  pool->report_.buffer_bytes = buffer_bytes;
  const size_t pageable = static_cast<size_t>(std::max<uint64_t>(2, budget_bytes / buffer_bytes));
  pool->memory_.reserve(pageable);
  for (size_t i = 0; i < pageable; ++i) {
    auto p = AllocateHostMemory(buffer_bytes, "staging");
    if (!p.ok()) return p.status();
    pool->Add(static_cast<unsigned char*>(p.value()));
  }
  pool->report_.fallbacks.push_back(
      "no pinned memory could be allocated: staging in ordinary (pageable) memory with "
      "device copies of at most " + FormatBytes(kPageableCopyBytes) + ", which is slower");
  return pool;
}

void StagingPool::Add(unsigned char* memory) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    memory_.push_back(memory);
    leaked_.push_back(false);
    free_.push_back(memory_.size() - 1);
    report_.buffers = memory_.size();
  }
  available_.notify_one();
}

void StagingPool::GrowInBackground(size_t count) {
  grower_ = std::thread([this, count] {
    for (size_t i = memory_.size(); i < count && !stop_growing_.load(); ++i) {
      auto p = device_->AllocatePinned(buffer_bytes_);
      if (!p.ok()) {
        std::lock_guard<std::mutex> lock(mutex_);
        report_.fallbacks.push_back("pinned memory ran out after " + std::to_string(i) + " of " +
                                    std::to_string(count) + " staging buffers of " +
                                    FormatBytes(buffer_bytes_) + "; staging with fewer");
        return;
      }
      Add(static_cast<unsigned char*>(p.value()));
    }
  });
}

StagingPoolReport StagingPool::report() {
  std::lock_guard<std::mutex> lock(mutex_);
  return report_;
}

StagingPool::~StagingPool() {
  stop_growing_.store(true);
  if (grower_.joinable()) grower_.join();
  for (size_t i = 0; i < memory_.size(); ++i) {
    if (leaked_[i]) continue;
    if (pinned_) {
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
  return StagingBuffer(this, index, memory_[index]);  // memory_ never reallocates: reserved
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
