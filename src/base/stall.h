// How every stage decides that it has stalled: nothing it waits on has moved for the stall
// timeout. The load's watchdog, verify, the rank all-gather, the device decode and a copy waited
// for all keep time with these, so that one rule and one wording hold everywhere.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "base/status.h"

namespace hoist {

// Monotonic nanoseconds (steady_clock): the unit of every progress stamp. Inline: the readers
// stamp each chunk with it, and the copy wait calls it on every poll.
inline int64_t MonotonicNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// "2.5 s": a duration as every stall message writes it.
std::string StallSeconds(double seconds);

// When something last moved, against a stall timeout. Start() before the threads that mark
// progress run; after it, Moved() and the readers from any thread.
class StallClock {
 public:
  // The timeout, and now as the last movement.
  void Start(double timeout_s);
  void Moved() { last_ns_.store(MonotonicNs(), std::memory_order_relaxed); }
  int64_t last_ns() const { return last_ns_.load(std::memory_order_relaxed); }
  // Whether a wait that began (or last moved) at since_ns has outlasted the timeout at now_ns.
  bool Over(int64_t since_ns, int64_t now_ns) const { return now_ns - since_ns > timeout_ns_; }
  bool Stalled(int64_t now_ns) const { return Over(last_ns(), now_ns); }
  double IdleSeconds(int64_t now_ns) const { return static_cast<double>(now_ns - last_ns()) / 1e9; }
  double timeout_s() const { return timeout_s_; }

 private:
  double timeout_s_ = 0;
  int64_t timeout_ns_ = INT64_MAX;
  std::atomic<int64_t> last_ns_{0};
};

// Polls `finished` until it says so, sleeping `interval` between polls (yielding when it is
// zero). Ends early with a stop signal's status, or with what `check` (called each round)
// returns when it is not OK: a stall, a cancel.
Status PollUntil(const std::function<Result<bool>()>& finished, std::chrono::microseconds interval,
                 const std::function<Status()>& check);

}  // namespace hoist
