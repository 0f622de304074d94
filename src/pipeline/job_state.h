// What the threads of one job (a load, a verify) share besides their work, each part with its
// own lock: the first failure, which stops the job, and the count of its threads still running,
// which its tear-down waits for.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <utility>

#include "base/mutex.h"
#include "base/status.h"

namespace hoist {

// The first error any thread of a job met; failing sets `stop`, which every loop of the job
// checks. Thread-safe.
class FirstFailure {
 public:
  explicit FirstFailure(std::atomic<bool>& stop) : stop_(stop) {}

  // Keeps `status` if it is the first failure, and stops the job.
  void Fail(Status status) HOIST_EXCLUDES(mutex_) {
    {
      MutexLock lock(mutex_);
      if (error_.ok()) error_ = std::move(status);
    }
    stop_.store(true);
  }
  Status Get() const HOIST_EXCLUDES(mutex_) {
    MutexLock lock(mutex_);
    return error_;
  }

 private:
  std::atomic<bool>& stop_;
  mutable Mutex mutex_;
  Status error_ HOIST_GUARDED_BY(mutex_);
};

// The threads of a job still running. Thread-safe.
class RunningThreads {
 public:
  void Add(int n) HOIST_EXCLUDES(mutex_) {
    MutexLock lock(mutex_);
    running_ += n;
  }
  // Called by each thread of the job as its last act (or for a thread that never started).
  void Exited() HOIST_EXCLUDES(mutex_) {
    {
      MutexLock lock(mutex_);
      --running_;
    }
    exited_.notify_all();
  }
  // True once none runs, waiting at most `wait` for it.
  template <typename Rep, typename Period>
  bool WaitForNone(std::chrono::duration<Rep, Period> wait) HOIST_EXCLUDES(mutex_) {
    MutexLock lock(mutex_);
    return lock.WaitFor(exited_, wait, [this]() HOIST_REQUIRES(mutex_) { return running_ == 0; });
  }

 private:
  Mutex mutex_;
  std::condition_variable exited_;
  int running_ HOIST_GUARDED_BY(mutex_) = 0;
};

}  // namespace hoist
