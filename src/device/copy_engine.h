// A queue of copy jobs run by a few threads, with handles that report completion: the
// machinery under the host backend (memcpy workers) and the simulated DMA engine.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "device/device.h"

namespace hoist {

enum class JobOutcome : uint8_t { kDone, kFailed, kHang };

struct JobResult {
  JobOutcome outcome = JobOutcome::kDone;
  Status error;  // for kFailed
};

class CopyEngine {
 public:
  using Job = std::function<JobResult()>;

  CopyEngine() = default;
  // Stops the threads; jobs not yet run are abandoned.
  ~CopyEngine();
  CopyEngine(const CopyEngine&) = delete;
  CopyEngine& operator=(const CopyEngine&) = delete;

  // Starts the engine's threads; an error when the process cannot start them all.
  Status Start(int threads);
  std::unique_ptr<CopyHandle> Submit(Job job);
  // Abandons every job not yet run (their handles report an error) and waits for the ones
  // running, which return at once from WaitUntil. After it returns no abandoned job touches
  // memory; new jobs are taken as before.
  void Abandon();
  // For a job that models time (the sim's latency and bandwidth): sleeps until `deadline`, or
  // less when Abandon() or the destructor is called meanwhile. Only after a job's last touch
  // of memory, so that cutting the sleep short is safe.
  void WaitUntil(std::chrono::steady_clock::time_point deadline);

 private:
  struct Pending;
  void Run();

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<Pending>> queue_;
  bool stopping_ = false;
  bool hung_ = false;  // a job hung: the engine completes nothing more (the ROCm SDMA hang)
  int running_ = 0;
  uint64_t abandons_ = 0;  // how many Abandon() calls (and the destructor) have begun
  std::condition_variable idle_;
  std::condition_variable cut_short_;  // wakes WaitUntil
  std::vector<std::thread> threads_;
};

}  // namespace hoist
