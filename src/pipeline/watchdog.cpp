#include "pipeline/watchdog.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

namespace hoist {
namespace {

// Among the readers, the chunk in `chunk` (-1: none) whose time in `since` is oldest, with
// that time; {-1, INT64_MAX} when no reader has one.
std::pair<int64_t, int64_t> Oldest(const std::vector<ReaderState>& readers,
                                   std::atomic<int64_t> ReaderState::*chunk,
                                   std::atomic<int64_t> ReaderState::*since) {
  std::pair<int64_t, int64_t> oldest{-1, INT64_MAX};
  for (const ReaderState& r : readers) {
    const int64_t c = (r.*chunk).load();
    const int64_t t = (r.*since).load();
    if (c >= 0 && t < oldest.second) oldest = {c, t};
  }
  return oldest;
}

std::string DeviceNames(const LoadJob& job) {
  std::string names;
  for (const auto& lane : job.lanes) {
    if (lane->readers == 0) continue;
    names += (names.empty() ? "" : ", ") + lane->device->name();
  }
  return names;
}

}  // namespace

Status Watchdog::Check() const {
  const int64_t now = MonotonicNs();
  if (!job_.progress.Stalled(now)) return Status::Ok();
  if (job_.waiting_on_caller.load() > 0) {
    // The caller holds the load back (flow control): a stall only if a read or a copy that
    // was started has not moved for the timeout.
    const int64_t copy =
        Oldest(job_.readers, &ReaderState::copy_chunk, &ReaderState::copy_submitted_ns).second;
    const int64_t read = Oldest(job_.readers, &ReaderState::chunk, &ReaderState::since_ns).second;
    if (!job_.progress.Over(std::min(copy, read), now)) return Status::Ok();
  }
  return DescribeStall(job_.progress.IdleSeconds(now));
}

Status Watchdog::DescribeStall(double idle_s) const {
  const std::string idle = StallSeconds(idle_s);
  // The copy submitted longest ago that a reader is waiting for; else the oldest read.
  const auto [copy_chunk, submitted_ns] =
      Oldest(job_.readers, &ReaderState::copy_chunk, &ReaderState::copy_submitted_ns);
  if (copy_chunk >= 0) {
    const Chunk& c = job_.plan.chunks[static_cast<size_t>(copy_chunk)];
    const double age = static_cast<double>(MonotonicNs() - submitted_ns) / 1e9;
    return Status::Stalled("no progress for " + idle + ": device copy stage on " +
                           job_.DeviceName(c) + ": chunk " + job_.Where(c) + " was submitted " +
                           std::to_string(static_cast<int>(age)) + " s ago and has not completed");
  }
  const int64_t chunk = Oldest(job_.readers, &ReaderState::chunk, &ReaderState::since_ns).first;
  if (chunk >= 0) {
    const Chunk& c = job_.plan.chunks[static_cast<size_t>(chunk)];
    return Status::Stalled("no progress for " + idle + ": read stage: reading " + job_.Where(c) +
                           " has not returned (device " + job_.DeviceName(c) + ")");
  }
  return Status::Stalled("no progress for " + idle + ": waiting for staging buffers on " +
                         DeviceNames(job_));
}

}  // namespace hoist
