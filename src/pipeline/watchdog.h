// The load's watchdog: notices when no chunk has moved for the stall timeout and names the
// stage that stopped (a device copy that has not completed, a read that has not returned, or
// readers waiting for staging buffers), the chunk, the file, the offset and the device.
#pragma once

#include <cstdint>

#include "base/status.h"
#include "pipeline/load_job.h"

namespace hoist {

// Thread safety: Check runs on one thread (the loading thread) while readers work. The stall
// timeout is the job's progress clock's.
class Watchdog {
 public:
  explicit Watchdog(LoadJob& job) : job_(job) {}

  // OK while the load moves; kStalled describing the stuck stage once it has not for the
  // stall timeout.
  Status Check() const;

 private:
  Status DescribeStall(double idle_s) const;

  LoadJob& job_;
};

}  // namespace hoist
