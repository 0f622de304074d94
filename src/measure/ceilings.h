// The machine's ceilings that hoist's loads are quoted against, measured in the same process
// as the loads (`hoist bench`, `hoist doctor`).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "device/checked_device.h"
#include "io/storage.h"

namespace hoist {

struct Throughput {
  uint64_t bytes = 0;
  double seconds = 0;
  double gbps() const { return seconds > 0 ? static_cast<double>(bytes) / seconds / 1e9 : 0; }
};

// Reads every byte of the named files of storage (or their first max_bytes, in file order)
// with `threads` threads, `chunk_bytes` per read, through the page cache or (direct) around it.
// The data is discarded. Every measurement here ends with kCancelled soon after a stop signal.
Result<Throughput> MeasureParallelRead(Storage& storage, const std::vector<std::string>& names,
                                       int threads, uint64_t chunk_bytes, bool direct,
                                       uint64_t max_bytes = UINT64_MAX);

// Drops the named files' pages from the page cache (posix_fadvise DONTNEED through
// File::Advise), and nobody else's: for cold reads of a model without emptying the machine's
// whole cache. OK when every file was advised.
Status DropFilesFromPageCache(Storage& storage, const std::vector<std::string>& names);

// Host-to-device copies of copy_bytes each from one pinned buffer (or, pageable, from
// ordinary memory) until total_bytes have moved, spread over the device's queues, after a
// warm-up. For `host` this is a memcpy into the destination. A copy that does not complete
// within stall_timeout_s is kStalled.
Result<Throughput> MeasureHostToDevice(CheckedDevice& device, uint64_t copy_bytes,
                                       uint64_t total_bytes, bool pinned, double stall_timeout_s);
// Device-to-host copies (synchronous, the way verify reads back) into pinned or ordinary memory.
Result<Throughput> MeasureDeviceToHost(CheckedDevice& device, uint64_t copy_bytes,
                                       uint64_t total_bytes, bool pinned);
// Pinned allocation rate: allocates and frees `count` buffers of `bytes`.
Result<Throughput> MeasurePinnedAllocation(CheckedDevice& device, uint64_t bytes, int count);

}  // namespace hoist
