// What the threads of one load share: the plan, one lane per device (its staging pool, its
// chunks, its readers), the files, the destinations and the progress counters. Held by
// shared_ptr so that a thread stuck in a read can be left behind safely.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "base/mutex.h"
#include "base/stall.h"
#include "base/status.h"
#include "device/checked_device.h"
#include "io/file.h"
#include "pipeline/job_state.h"
#include "pipeline/staging_pool.h"
#include "pipeline/tensor_checksums.h"
#include "plan/load_plan.h"

namespace hoist {

// A chunk whose copies are in flight; as a HashTicket it holds the staging buffer until the
// chunk's bytes are in their tensors' checksums.
struct InFlight : HashTicket {
  size_t chunk = 0;
  StagingBuffer buffer;
  std::vector<std::unique_ptr<CopyHandle>> copies;
  size_t completed = 0;  // copies[0, completed) are known done
  int64_t submitted_ns = 0;
  // Per segment of the chunk: already reported landed (its copies were settled early, before
  // the reader waited for a destination).
  std::vector<bool> landed;
  // The peer copies of its forwarded segments have been started (after its own copies
  // completed).
  bool forwarded = false;

  // Moves `completed` past the copies the device is done with, completed or failed (a failed
  // copy no longer touches its memory), in order; true when none is left in flight. The first
  // failure seen goes to `failure` when given.
  bool AdvanceCopies(Status* failure = nullptr) {
    while (completed < copies.size()) {
      auto done = copies[completed]->Poll();
      if (done.ok() && !done.value()) return false;
      if (!done.ok() && failure != nullptr && failure->ok()) *failure = done.status();
      ++completed;
    }
    return true;
  }
};

// Readers pass it while they start copies or read into a tensor; the tear-down closes it and
// waits for those inside to leave, so that no copy starts after the tear-down settles the
// devices, and a read that never ends is seen as such. A mutex and a count rather than a
// shared_timed_mutex: MinGW's try_lock_for now and then took that one while a reader held it
// shared, and a read that never ended was taken for settled.
class CopyGate {
 public:
  // A pass through the gate; false once it is closed.
  class Pass {
   public:
    explicit Pass(CopyGate& gate) : gate_(gate.Enter() ? &gate : nullptr) {}
    ~Pass() {
      if (gate_ != nullptr) gate_->Leave();
    }
    Pass(const Pass&) = delete;
    Pass& operator=(const Pass&) = delete;
    explicit operator bool() const { return gate_ != nullptr; }

   private:
    CopyGate* gate_;
  };

  // Closes the gate; true when every pass has left within `wait`.
  bool Close(std::chrono::milliseconds wait) HOIST_EXCLUDES(mutex_) {
    MutexLock lock(mutex_);
    closed_ = true;
    return lock.WaitFor(left_, wait, [this]() HOIST_REQUIRES(mutex_) { return inside_ == 0; });
  }

 private:
  bool Enter() HOIST_EXCLUDES(mutex_) {
    MutexLock lock(mutex_);
    if (closed_) return false;
    ++inside_;
    return true;
  }
  void Leave() HOIST_EXCLUDES(mutex_) {
    {
      MutexLock lock(mutex_);
      --inside_;
    }
    left_.notify_all();
  }

  Mutex mutex_;
  std::condition_variable left_;
  int inside_ HOIST_GUARDED_BY(mutex_) = 0;
  bool closed_ HOIST_GUARDED_BY(mutex_) = false;
};

// Copies a stopped reader left in flight, handed to the tear-down. Thread-safe.
class Orphans {
 public:
  template <typename Range>  // of std::shared_ptr<InFlight>
  void Add(const Range& left) HOIST_EXCLUDES(mutex_) {
    MutexLock lock(mutex_);
    orphans_.insert(orphans_.end(), left.begin(), left.end());
  }
  std::vector<std::shared_ptr<InFlight>> Take() HOIST_EXCLUDES(mutex_) {
    MutexLock lock(mutex_);
    return std::exchange(orphans_, {});
  }

 private:
  Mutex mutex_;
  std::vector<std::shared_ptr<InFlight>> orphans_ HOIST_GUARDED_BY(mutex_);
};

// The readers' time by step (ReaderSeconds), in nanoseconds: each reader adds its own as it ends.
struct ReaderTimes {
  std::atomic<int64_t> read_ns{0};
  std::atomic<int64_t> copy_start_ns{0};
  std::atomic<int64_t> copy_wait_ns{0};
  std::atomic<int64_t> buffer_wait_ns{0};
  std::atomic<int64_t> destination_wait_ns{0};
  std::atomic<int64_t> destination_settle_ns{0};
  std::atomic<int64_t> total_ns{0};
};

// What one reader is doing, for the watchdog.
struct ReaderState {
  size_t lane = 0;
  std::atomic<int64_t> chunk{-1};  // chunk being read, or -1
  std::atomic<int64_t> since_ns{0};
  std::atomic<int64_t> copy_chunk{-1};  // chunk whose copy the reader waits for, or -1
  std::atomic<int64_t> copy_submitted_ns{0};
};

// One device's part of the load: its chunks are plan.chunks[next_chunk..end_chunk), read by
// its own readers into its own staging pool and copied on its queues.
struct Lane {
  std::shared_ptr<CheckedDevice> device;
  std::unique_ptr<StagingPool> pool;
  int first_reader = 0;
  int readers = 0;
  size_t buffers_per_reader = 2;
  // Its device's memory is host memory (DeviceCapabilities::memory_is_host) and the files are
  // not read direct: a chunk that is one piece of one tensor is read straight into it.
  bool reads_into_destination = false;
  std::atomic<size_t> next_chunk{0};
  size_t end_chunk = 0;
  uint64_t bytes = 0;                     // the tensor bytes bound for its device
  std::atomic<uint64_t> landed_bytes{0};  // of which on it, whichever lane read them
  std::atomic<int64_t> finished_ns{0};    // when its device's last byte was on it
};

struct LoadJob {
  LoadPlan plan;
  std::vector<std::unique_ptr<Lane>> lanes;  // per device, in the load's device order
  std::vector<std::unique_ptr<File>> files;
  std::vector<std::string> file_paths;
  const TensorDirectory* dir = nullptr;
  // Per directory tensor; written once, by a reader when destinations come when needed.
  std::vector<std::atomic<unsigned char*>> dest;
  bool external = false;           // dest are the caller's, not hoist's allocations
  bool gather_cached_rows = true;  // LoadOptions::gather_cached_rows
  std::function<Result<void*>(size_t, const TensorEntry&)> destination;  // when needed
  std::function<Result<void*>(size_t, const TensorEntry&)> destination_at_once;
  std::vector<std::atomic<uint8_t>> destination_asked;  // per directory tensor, when needed
  std::atomic<int> waiting_on_caller{0};                // readers inside the destination call
  std::function<void(size_t)> tensor_loaded;
  std::vector<std::atomic<uint64_t>> unlanded;  // per directory tensor, with tensor_loaded
  std::unique_ptr<TensorChecksums> checksums;   // null without LoadOptions::checksum
  std::vector<ReaderState> readers;

  std::atomic<uint64_t> read_bytes{0};
  std::atomic<uint64_t> gathered_bytes{0};  // of read_bytes: rows gathered by their columns
  std::atomic<uint64_t> read_into_destination_bytes{0};  // of read_bytes: no staging, no copy
  std::atomic<uint64_t> copied_bytes{0};
  std::atomic<size_t> chunks_done{0};
  ReaderTimes reader_times;
  StallClock progress;  // moved by every chunk read, copied or done

  std::atomic<bool> stop{false};
  FirstFailure failure{stop};
  // Readers start no copy once `stop` is set or the gate is closed (after `stop`).
  CopyGate copy_gate;
  Orphans orphans;
  RunningThreads running;  // the readers

  // Keeps the first error and stops every thread.
  void Fail(Status status) { failure.Fail(std::move(status)); }
  Status FirstError() const { return failure.Get(); }

  // The devices a chunk's copies touch: its readers' (whose staging it is in), its segments'
  // and, for forwarded segments, their replicas'.
  std::vector<bool> DevicesTouched(const Chunk& c) const {
    std::vector<bool> touched(lanes.size(), false);
    touched[c.device] = true;
    for (const Segment& s : c.segments) {
      touched[s.device] = true;
      if (!s.forward) continue;
      for (uint32_t r : plan.replicas[s.tensor]) touched[plan.device_of[r]] = true;
    }
    return touched;
  }
  // Those devices' names, joined by " and ".
  std::string DeviceName(const Chunk& c) const {
    std::string names;
    const std::vector<bool> touched = DevicesTouched(c);
    for (size_t d = 0; d < touched.size(); ++d) {
      if (touched[d]) names += (names.empty() ? "" : " and ") + lanes[d]->device->name();
    }
    return names;
  }
  std::string Where(const Chunk& c) const {
    return file_paths[c.file] + " at byte " + std::to_string(c.offset) + " (" +
           std::to_string(c.length) + " bytes)";
  }

  // A reader left behind in a read may hand in copies after the load returned: memory under
  // a copy that has not completed is never freed.
  ~LoadJob() {
    for (auto& e : orphans.Take()) {
      if (!e->AdvanceCopies()) e->buffer.Abandon();
    }
  }
};

// One reader thread's work: claims its lane's chunks in order, reads each into one of its own
// staging buffers and starts its copies, until the lane is done or the job stops.
void ReaderLoop(const std::shared_ptr<LoadJob>& job, int reader);

}  // namespace hoist
