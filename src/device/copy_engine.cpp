#include "device/copy_engine.h"

#include "base/threads.h"

namespace hoist {

struct CopyEngine::Pending {
  Job job;
  std::atomic<int> state{0};  // 0 pending, 1 done, 2 failed, 3 abandoned
  Status error;               // written before state becomes 2
};

namespace {

class EngineHandle final : public CopyHandle {
 public:
  explicit EngineHandle(std::shared_ptr<void> keep, std::atomic<int>* state, Status* error)
      : keep_(std::move(keep)), state_(state), error_(error) {}
  Result<bool> Poll() override {
    switch (state_->load(std::memory_order_acquire)) {
      case 0:
        return false;
      case 1:
        return true;
      case 2:
        return *error_;
      default:
        return Status::DeviceError("copy abandoned after the device stalled");
    }
  }

 private:
  std::shared_ptr<void> keep_;
  std::atomic<int>* state_;
  Status* error_;
};

}  // namespace

Status CopyEngine::Start(int threads) {
  for (int i = 0; i < threads; ++i) {
    HOIST_ASSIGN_OR_RETURN(std::thread t, StartThread("a copy engine thread", [this] { Run(); }));
    threads_.push_back(std::move(t));
  }
  return Status::Ok();
}

void CopyEngine::WaitUntil(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mutex_);
  const uint64_t abandons = abandons_;
  cut_short_.wait_until(lock, deadline, [&] { return abandons_ != abandons || stopping_; });
}

CopyEngine::~CopyEngine() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    ++abandons_;
  }
  wake_.notify_all();
  cut_short_.notify_all();
  for (std::thread& t : threads_) t.join();
  for (auto& p : queue_) p->state.store(3, std::memory_order_release);
}

std::unique_ptr<CopyHandle> CopyEngine::Submit(Job job) {
  auto pending = std::make_shared<Pending>();
  pending->job = std::move(job);
  auto handle = std::make_unique<EngineHandle>(pending, &pending->state, &pending->error);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) {
      pending->state.store(3);
    } else {
      queue_.push_back(pending);
    }
  }
  wake_.notify_one();
  return handle;
}

void CopyEngine::Abandon() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (auto& p : queue_) p->state.store(3, std::memory_order_release);
  queue_.clear();
  ++abandons_;
  cut_short_.notify_all();
  idle_.wait(lock, [this] { return running_ == 0; });
  hung_ = false;  // what hung was dropped; the engine takes new copies again
}

void CopyEngine::Run() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    wake_.wait(lock, [this] { return stopping_ || (!hung_ && !queue_.empty()); });
    if (stopping_) return;
    std::shared_ptr<Pending> p = std::move(queue_.front());
    queue_.pop_front();
    ++running_;
    lock.unlock();
    JobResult result = p->job();
    lock.lock();
    --running_;
    switch (result.outcome) {
      case JobOutcome::kDone:
        p->state.store(1, std::memory_order_release);
        break;
      case JobOutcome::kFailed:
        p->error = std::move(result.error);
        p->state.store(2, std::memory_order_release);
        break;
      case JobOutcome::kHang:
        hung_ = true;  // this copy never completes, and neither does anything after it
        queue_.push_front(std::move(p));
        break;
    }
    idle_.notify_all();
  }
}

}  // namespace hoist
