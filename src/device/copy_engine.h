// A queue of copy jobs run by a few threads, with handles that report completion: the
// machinery under the host backend (memcpy workers) and the simulated DMA engine.
#pragma once

#include <atomic>
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

  explicit CopyEngine(int threads);
  // Stops the threads; jobs not yet run are abandoned.
  ~CopyEngine();
  CopyEngine(const CopyEngine&) = delete;
  CopyEngine& operator=(const CopyEngine&) = delete;

  std::unique_ptr<CopyHandle> Submit(Job job);
  // Abandons every job not yet run (their handles report an error) and waits for the ones
  // running. After it returns no abandoned job touches memory; new jobs are taken as before.
  void Abandon();

 private:
  struct Pending;
  void Run();

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<Pending>> queue_;
  bool stopping_ = false;
  bool hung_ = false;  // a job hung: the engine completes nothing more (the ROCm SDMA hang)
  int running_ = 0;
  std::condition_variable idle_;
  std::vector<std::thread> threads_;
};

}  // namespace hoist
