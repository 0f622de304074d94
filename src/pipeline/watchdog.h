// The load's watchdog: notices when no chunk has moved for the stall timeout and names the
// stage that stopped (a device copy that has not completed, a read that has not returned, or
// readers waiting for staging buffers), the chunk, the file, the offset and the device.
#pragma once

#include <cstdint>

#include "base/status.h"
#include "pipeline/load_job.h"

namespace hoist {

// Thread safety: Check runs on one thread (the loading thread) while readers work.
class Watchdog {
 public:
  Watchdog(LoadJob& job, double stall_timeout_s)
      : job_(job), stall_ns_(static_cast<int64_t>(stall_timeout_s * 1e9)) {}

  // OK while the load moves; kStalled describing the stuck stage once it has not for the
  // stall timeout.
  Status Check() const;

 private:
  Status DescribeStall(double idle_s) const;

  LoadJob& job_;
  int64_t stall_ns_;
};

}  // namespace hoist
