#include "measure/ceilings.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "base/platform.h"
#include "device/host_memory.h"
#include "io/file.h"

namespace hoist {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

Status DropFilesFromPageCache(Storage& storage, const std::vector<std::string>& names) {
  for (const std::string& name : names) {
    HOIST_ASSIGN_OR_RETURN(auto file, storage.Open(name, {}));
    HOIST_RETURN_IF_ERROR(file->Advise(AccessHint::kDropCache, 0, file->size()));
  }
  return Status::Ok();
}

namespace {

struct ReadPiece {
  File* file;
  uint64_t offset;
  uint64_t length;
};

// One reader of the parallel-read ceiling: reads the pieces it takes from `next` until none is
// left, one fails or a stop signal comes.
Status ReadPieces(const std::vector<ReadPiece>& pieces, std::atomic<size_t>& next,
                  uint64_t buffer_bytes) {
  HOIST_ASSIGN_OR_RETURN(void* buffer, AllocateHostMemory(buffer_bytes, "read ceiling"));
  Status status = Status::Ok();
  for (size_t k = next.fetch_add(1); status.ok() && k < pieces.size(); k = next.fetch_add(1)) {
    status = StopRequested();
    if (!status.ok()) break;
    const ReadPiece& p = pieces[k];
    auto read = p.file->ReadCovering(p.offset, static_cast<unsigned char*>(buffer), p.length);
    if (!read.ok()) status = read.status();
  }
  FreeHostMemory(buffer);
  return status;
}

}  // namespace

Result<Throughput> MeasureParallelRead(Storage& storage, const std::vector<std::string>& names,
                                       int threads, uint64_t chunk_bytes, bool direct,
                                       uint64_t max_bytes) {
  std::vector<std::unique_ptr<File>> files;
  std::vector<ReadPiece> pieces;
  Throughput result;
  OpenOptions options;
  options.direct = direct;
  for (const std::string& name : names) {
    HOIST_ASSIGN_OR_RETURN(auto file, storage.Open(name, options));
    for (uint64_t at = 0; at < file->size() && result.bytes < max_bytes; at += chunk_bytes) {
      const uint64_t length = std::min({chunk_bytes, file->size() - at, max_bytes - result.bytes});
      pieces.push_back({file.get(), at, length});
      result.bytes += length;
    }
    files.push_back(std::move(file));
  }
  // Room for the aligned blocks that cover a chunk (File::ReadCovering).
  const uint64_t buffer_bytes = chunk_bytes + 2 * uint64_t{4096};
  std::atomic<size_t> next{0};
  std::mutex mutex;
  Status error;
  const Clock::time_point start = Clock::now();
  std::vector<std::thread> pool;
  // A thread without a piece would only allocate its buffer.
  const size_t workers =
      std::clamp<size_t>(pieces.size(), 1, static_cast<size_t>(std::max(threads, 1)));
  for (size_t t = 0; t < workers; ++t) {
    pool.emplace_back([&] {
      const Status status = ReadPieces(pieces, next, buffer_bytes);
      if (!status.ok()) {
        std::lock_guard<std::mutex> lock(mutex);
        if (error.ok()) error = status;
        next = pieces.size();
      }
    });
  }
  for (auto& t : pool) t.join();
  if (!error.ok()) return error;
  result.seconds = SecondsSince(start);
  return result;
}

namespace {

// The host side of a copy ceiling: pinned through the device, or ordinary (pageable) memory.
Result<void*> AllocateCopyHost(CheckedDevice& device, uint64_t bytes, bool pinned) {
  return pinned ? device.AllocatePinned(bytes) : AllocateHostMemory(bytes, "copy ceiling");
}
void FreeCopyHost(CheckedDevice& device, void* host, bool pinned) {
  if (pinned) {
    (void)device.ReturnPinned(host);
  } else {
    FreeHostMemory(host);
  }
}

}  // namespace

Result<Throughput> MeasureHostToDevice(CheckedDevice& device, uint64_t copy_bytes,
                                       uint64_t total_bytes, bool pinned, double stall_timeout_s) {
  constexpr uint64_t kSpan = 1ull << 30;
  copy_bytes = std::min(copy_bytes, kSpan);
  const uint64_t span = std::min(kSpan, std::max(copy_bytes, total_bytes));
  HOIST_ASSIGN_OR_RETURN(void* host, AllocateCopyHost(device, span, pinned));
  auto free_host = [&] { FreeCopyHost(device, host, pinned); };
  // memset, not a loop: ThreadSanitizer instruments a loop's every byte (39 s for 256 MiB).
  std::memset(host, 0x5A, span);
  auto target = device.AllocateDevice(span);
  if (!target.ok()) {
    free_host();
    return target.status();
  }
  const uint64_t slots = span / copy_bytes;
  const int queues = std::max(device.queues(), 1);
  const size_t max_in_flight =
      static_cast<size_t>(std::min<uint64_t>(4 * static_cast<uint64_t>(queues), slots));
  auto run = [&](uint64_t copies) -> Status {
    std::vector<std::unique_ptr<CopyHandle>> in_flight;
    for (uint64_t i = 0; i < copies; ++i) {
      const uint64_t at = (i % slots) * copy_bytes;
      HOIST_ASSIGN_OR_RETURN(
          auto copy,
          device.CopyToDeviceAsync(static_cast<char*>(*target) + at, static_cast<char*>(host) + at,
                                   copy_bytes, static_cast<int>(i % queues)));
      in_flight.push_back(std::move(copy));
      // Keep a bounded number in flight (the pipeline keeps a few per queue), and never two
      // copies into the same slot at once.
      if (in_flight.size() >= max_in_flight) {
        HOIST_RETURN_IF_ERROR(WaitForCopy(*in_flight.front(), stall_timeout_s));
        in_flight.erase(in_flight.begin());
      }
    }
    for (auto& copy : in_flight) HOIST_RETURN_IF_ERROR(WaitForCopy(*copy, stall_timeout_s));
    return Status::Ok();
  };
  Throughput result;
  Status status = run(std::max<uint64_t>(slots, 4));  // warm-up
  if (status.ok()) {
    const uint64_t copies = std::max<uint64_t>(1, total_bytes / copy_bytes);
    const Clock::time_point start = Clock::now();
    status = run(copies);
    result = {copies * copy_bytes, SecondsSince(start)};
  }
  (void)device.FreeDevice(*target);
  free_host();
  if (!status.ok()) return status;
  return result;
}

Result<Throughput> MeasureDeviceToHost(CheckedDevice& device, uint64_t copy_bytes,
                                       uint64_t total_bytes, bool pinned) {
  HOIST_ASSIGN_OR_RETURN(void* source, device.AllocateDevice(copy_bytes));
  auto host = AllocateCopyHost(device, copy_bytes, pinned);
  if (!host.ok()) {
    (void)device.FreeDevice(source);
    return host.status();
  }
  Status status = device.CopyToHost(*host, source, copy_bytes);  // warm-up
  Throughput result;
  const uint64_t copies = std::max<uint64_t>(1, total_bytes / copy_bytes);
  const Clock::time_point start = Clock::now();
  for (uint64_t i = 0; status.ok() && i < copies; ++i) {
    status = StopRequested();
    if (status.ok()) status = device.CopyToHost(*host, source, copy_bytes);
  }
  result = {copies * copy_bytes, SecondsSince(start)};
  FreeCopyHost(device, *host, pinned);
  (void)device.FreeDevice(source);
  if (!status.ok()) return status;
  return result;
}

Result<Throughput> MeasurePinnedAllocation(CheckedDevice& device, uint64_t bytes, int count) {
  Throughput result;
  ReleaseCachedMemory();  // each allocation pins fresh memory
  const Clock::time_point start = Clock::now();
  for (int i = 0; i < count; ++i) {
    HOIST_RETURN_IF_ERROR(StopRequested());
    HOIST_ASSIGN_OR_RETURN(void* p, device.AllocatePinned(bytes));
    static_cast<volatile unsigned char*>(p)[0] = 1;
    HOIST_RETURN_IF_ERROR(device.ReturnPinned(p));
    ReleaseCachedMemory();
    result.bytes += bytes;
  }
  result.seconds = SecondsSince(start);
  return result;
}

}  // namespace hoist
