#include "base/stall.h"

#include <cmath>
#include <cstdio>
#include <thread>

#include "base/platform.h"

namespace hoist {

std::string StallSeconds(double seconds) {
  char text[64];
  std::snprintf(text, sizeof text, "%.1f s", seconds);
  return text;
}

void StallClock::Start(double timeout_s) {
  timeout_s_ = timeout_s;
  // A timeout past what nanoseconds in 63 bits hold (292 years) is none.
  timeout_ns_ = std::isfinite(timeout_s) && timeout_s < 9e9 ? static_cast<int64_t>(timeout_s * 1e9)
                                                            : INT64_MAX;
  last_ns_.store(MonotonicNs());
}

Status PollUntil(const std::function<Result<bool>()>& finished, std::chrono::microseconds interval,
                 const std::function<Status()>& check) {
  for (;;) {
    HOIST_ASSIGN_OR_RETURN(const bool done, finished());
    if (done) return Status::Ok();
    HOIST_RETURN_IF_ERROR(StopRequested());
    HOIST_RETURN_IF_ERROR(check());
    if (interval.count() == 0) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(interval);
    }
  }
}

}  // namespace hoist
