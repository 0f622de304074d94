// A fixed budget of equal-size staging buffers in pinned host memory, handed out as move-only
// handles that go back to the pool when dropped (KvikIO's bounce-buffer pool, bounded).
// When pinned memory cannot be had, the pool retries smaller buffers down to 1 MiB and then
// falls back to ordinary heap memory; copies from such buffers must then be cut into pieces of
// at most kPageableCopyBytes (see max_copy_bytes()).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "base/mutex.h"
#include "base/status.h"
#include "device/checked_device.h"

namespace hoist {

inline constexpr uint64_t kMinPinnedBufferBytes = 1 << 20;
// Pageable copies stay below the size at which some DMA paths hang (ROCm's SDMA engine).
inline constexpr uint64_t kPageableCopyBytes = 512 << 10;

class StagingPool;

// Owns one buffer while held; returns it to its pool when destroyed. Not thread safe.
class StagingBuffer {
 public:
  StagingBuffer() = default;
  StagingBuffer(StagingPool* pool, size_t index, unsigned char* data)
      : pool_(pool), index_(index), data_(data) {}
  StagingBuffer(StagingBuffer&& other) noexcept { *this = std::move(other); }
  StagingBuffer& operator=(StagingBuffer&& other) noexcept;
  StagingBuffer(const StagingBuffer&) = delete;
  StagingBuffer& operator=(const StagingBuffer&) = delete;
  ~StagingBuffer() { Release(); }

  unsigned char* data() const { return data_; }
  explicit operator bool() const { return data_ != nullptr; }
  // Gives the buffer up without returning it (its memory may still be read by a stalled copy).
  void Abandon();

 private:
  void Release();
  StagingPool* pool_ = nullptr;
  size_t index_ = 0;
  unsigned char* data_ = nullptr;
};

struct StagingPoolReport {
  uint64_t buffer_bytes = 0;
  size_t buffers = 0;
  bool pinned = true;
  std::vector<std::string> fallbacks;  // what was given up, in words
};

class StagingPool {
 public:
  // Allocates up to budget_bytes in buffers of buffer_bytes (at least 2 buffers), falling back
  // as described above. Buffers are carved out of a few large pinned allocations (one pinning
  // call costs about as much as pinning 3 MiB more). The first few buffers are allocated before
  // it returns and the rest on a background thread, so a load can start streaming while
  // pinned memory is still being set up.
  // Thread safety: Acquire, report and buffer release may run on any thread.
  static Result<std::unique_ptr<StagingPool>> Create(std::shared_ptr<CheckedDevice> device,
                                                     uint64_t budget_bytes, uint64_t buffer_bytes);
  ~StagingPool();

  // Waits up to `wait` for a free buffer; nullopt when none came (the caller checks its stop
  // conditions and asks again). A wait of zero only takes a free one.
  std::optional<StagingBuffer> Acquire(std::chrono::milliseconds wait);

  StagingPoolReport report();
  // The report once the background allocation has ended (every planned buffer, or what the
  // fallback kept).
  StagingPoolReport ReportOnceGrown();
  uint64_t buffer_bytes() const { return buffer_bytes_; }
  // Buffers the pool is meant to hold once its background allocation is done.
  size_t planned_buffers() const { return planned_buffers_; }
  uint64_t max_copy_bytes() const { return pinned_ ? UINT64_MAX : kPageableCopyBytes; }
  // Keeps buffer `index` (and the allocation it lies in) from being freed: a stalled copy may
  // still read it.
  void Leak(size_t index);

 private:
  friend class StagingBuffer;
  struct Region {
    unsigned char* memory = nullptr;
    bool leaked = false;
  };
  StagingPool() = default;
  void Return(size_t index);
  // Adds `count` buffers carved from one allocation.
  void AddRegion(unsigned char* memory, size_t count);
  // Pins one allocation of `count` buffers and adds them; false when the device refused it.
  bool TryAddRegion(size_t count);
  // Allocates buffers `have` to `count` on a background thread (and helpers).
  void GrowInBackground(size_t have, size_t count);
  // GrowInBackground's thread.
  void Grow(size_t have, size_t count);

  std::shared_ptr<CheckedDevice> device_;
  Mutex mutex_;
  std::vector<Region> regions_ HOIST_GUARDED_BY(mutex_);
  // Reserved up front: never reallocates.
  std::vector<unsigned char*> buffers_ HOIST_GUARDED_BY(mutex_);
  std::vector<size_t> region_of_ HOIST_GUARDED_BY(mutex_);  // buffer index -> region index
  std::vector<size_t> free_ HOIST_GUARDED_BY(mutex_);
  std::condition_variable available_;
  std::condition_variable grown_;
  bool growing_ HOIST_GUARDED_BY(mutex_) = false;
  StagingPoolReport report_ HOIST_GUARDED_BY(mutex_);
  uint64_t buffer_bytes_ = 0;
  size_t planned_buffers_ = 0;
  bool pinned_ = true;
  std::atomic<bool> stop_growing_{false};
  std::thread grower_;
};

}  // namespace hoist
