// The bounds and defaults of a load's options.
#include <algorithm>
#include <string>

#include "base/platform.h"
#include "base/units.h"
#include "device/host_memory.h"
#include "pipeline/loader.h"

namespace hoist {

// One reader per core leaves none for the copies' driver work and the watchdog; the sweep on the
// H200 (docs/PERFORMANCE.md, "Why the defaults") found the link full well before that.
int DefaultReaderThreads(int devices) {
  return std::clamp(CpuCount() * 3 / 4, 2, 12 * std::max(devices, 1));
}

uint64_t DefaultStagingBytes(int threads, uint64_t chunk_bytes) {
  return 2 * static_cast<uint64_t>(std::max(threads, 1)) * chunk_bytes;
}

uint64_t MaxStagingBytes() {
  const uint64_t physical = PhysicalMemoryBytes();
  return physical != 0 ? physical / 2 : 64 * kGiB;
}

Status CheckLoadOptions(const LoadOptions& options) {
  if (options.threads < 0 || options.threads > kMaxReaderThreads) {
    return Status::InvalidArgument("threads is " + std::to_string(options.threads) +
                                   ": it takes 0 (chosen from the machine) to " +
                                   std::to_string(kMaxReaderThreads));
  }
  if (options.chunk_bytes != 0 &&
      (options.chunk_bytes < kMinChunkBytes || options.chunk_bytes > kMaxChunkBytes)) {
    return Status::InvalidArgument(
        "chunk of " + std::to_string(options.chunk_bytes) + " bytes: it takes 0 (the default) or " +
        FormatBytes(kMinChunkBytes) + " to " + FormatBytes(kMaxChunkBytes));
  }
  if (options.staging_bytes > MaxStagingBytes()) {
    return Status::InvalidArgument("staging budget of " + FormatBytes(options.staging_bytes) +
                                   " is more than half of this machine's memory (" +
                                   FormatBytes(MaxStagingBytes()) + " at most)");
  }
  if (!(options.stall_timeout_s > 0) || options.stall_timeout_s > kMaxStallTimeoutSeconds) {
    return Status::InvalidArgument("stall timeout of " + std::to_string(options.stall_timeout_s) +
                                   " s: it takes a number of seconds above 0 and at most 1e7");
  }
  return Status::Ok();
}

Status StopOrCancel(const LoadOptions& options) {
  HOIST_RETURN_IF_ERROR(StopRequested());
  if (options.cancel != nullptr && options.cancel->load()) return Status::Cancelled("cancelled");
  return Status::Ok();
}

}  // namespace hoist
