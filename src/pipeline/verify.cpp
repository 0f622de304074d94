// Reading loaded tensors back from their devices and comparing them with the files, under a
// watchdog: a read or read-back that stops making progress, or a stop signal, ends it promptly.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "base/platform.h"
#include "base/stall.h"
#include "base/threads.h"
#include "io/signing.h"
#include "pipeline/file_checks.h"
#include "pipeline/job_state.h"
#include "pipeline/loader.h"

namespace hoist {
namespace {

constexpr uint64_t kPiece = 16ull << 20;
// After a stall or a stop: how long the workers get to leave once the devices were asked to
// abandon their copies.
constexpr auto kExitGrace = std::chrono::milliseconds(1500);

// One tensor to compare, with everything a worker needs to do it after Verify has returned (a
// worker left in a read-back that never ends must not touch the caller's objects).
struct Item {
  std::string name;
  uint32_t file = 0;
  uint64_t offset = 0;  // in the file
  uint64_t nbytes = 0;
  RowStride stride;
  const unsigned char* src = nullptr;  // on the device
  size_t device = 0;                   // index into VerifyJob::devices
};

// What one worker waits on: a file read or a read-back of `item`, since `since_ns`.
struct Wait {
  enum Kind { kNothing, kFileRead, kReadBack } kind = kNothing;
  size_t item = 0;
  uint64_t file_offset = 0;  // of a file read
  int64_t since_ns = 0;
};

// What the workers share; held by shared_ptr so that a worker left behind keeps it alive.
struct VerifyJob {
  std::vector<std::unique_ptr<File>> files;
  std::vector<std::shared_ptr<CheckedDevice>> devices;
  std::vector<Item> items;
  bool external = false;
  size_t max_reported = 0;

  std::atomic<size_t> next{0};
  std::atomic<bool> stop{false};
  StallClock progress;  // moved by each wait that ends
  FirstFailure failure{stop};
  RunningThreads running;  // the workers
  Mutex mutex;
  std::vector<Mismatch> mismatches HOIST_GUARDED_BY(mutex);
  std::vector<Wait> waits HOIST_GUARDED_BY(mutex);  // per worker: what it waits on now

  // A worker starts and ends a wait; each wait that ends is progress.
  void Begin(size_t worker, Wait::Kind kind, size_t item, uint64_t file_offset)
      HOIST_EXCLUDES(mutex) {
    MutexLock lock(mutex);
    waits[worker] = {kind, item, file_offset, MonotonicNs()};
  }
  void End(size_t worker) HOIST_EXCLUDES(mutex) {
    MutexLock lock(mutex);
    waits[worker].kind = Wait::kNothing;
    progress.Moved();
  }
  void Fail(Status s) { failure.Fail(std::move(s)); }
};

// Compares piece [off, off + n) of item t (its file bytes from file_begin in from_file) row by
// row (one run when the tensor is contiguous); records the first difference and returns true
// when there is one.
bool ReportFirstDifference(VerifyJob& job, const Item& t, uint64_t off, uint64_t n, uint64_t width,
                           uint64_t pitch, uint64_t file_begin,
                           const std::vector<unsigned char>& from_file,
                           const std::vector<unsigned char>& from_device) {
  const uint64_t first_row = off / width;
  const uint64_t column = off % width;
  for (uint64_t at = 0; at < n;) {
    const uint64_t device_pos = off + at;
    const uint64_t row = device_pos / width;
    const uint64_t in_row = device_pos % width;
    const uint64_t run = std::min(width - in_row, n - at);
    const uint64_t file_pos = (row - first_row) * pitch + in_row - column;
    if (std::memcmp(from_file.data() + file_pos, from_device.data() + at, run) != 0) {
      uint64_t i = 0;
      while (from_file[file_pos + i] == from_device[at + i]) ++i;
      MutexLock lock(job.mutex);
      if (job.mismatches.size() < job.max_reported) {
        job.mismatches.push_back({t.name, device_pos + i, file_begin + file_pos + i});
      }
      return true;
    }
    at += run;
  }
  return false;
}

// Compares item k piece by piece; false when the job stopped or failed.
bool CompareItem(VerifyJob& job, size_t worker, size_t k, std::vector<unsigned char>& from_file,
                 std::vector<unsigned char>& from_device) {
  const Item& t = job.items[k];
  // A tensor read by rows is compared a whole number of its rows at a time (one row when a row
  // is larger than a piece), each read as the file range that spans them.
  const uint64_t width = t.stride.width != 0 ? t.stride.width : t.nbytes;
  const uint64_t pitch = t.stride.width != 0 ? t.stride.pitch : t.nbytes;
  const uint64_t piece = t.stride.width == 0 || width > kPiece ? kPiece : kPiece / width * width;
  for (uint64_t off = 0; off < t.nbytes; off += piece) {
    if (job.stop.load()) return false;
    const uint64_t n = std::min(piece, t.nbytes - off);
    // Device bytes [off, off + n) are rows [first_row, last_row] of the file's, from column
    // `column` of the first.
    const uint64_t first_row = off / width;
    const uint64_t column = off % width;
    const uint64_t last_row = (off + n - 1) / width;
    const uint64_t file_begin = t.offset + first_row * pitch + column;
    const uint64_t span = (last_row - first_row) * pitch + (off + n - last_row * width) - column;
    from_file.resize(std::max<uint64_t>(from_file.size(), span));
    job.Begin(worker, Wait::kFileRead, k, file_begin);
    Status s = job.files[t.file]->ReadExact(file_begin, from_file.data(), span);
    job.End(worker);
    if (s.ok()) {
      job.Begin(worker, Wait::kReadBack, k, 0);
      s = job.devices[t.device]->CopyToHost(from_device.data(), t.src + off, n, job.external);
      job.End(worker);
    }
    if (!s.ok()) {
      job.Fail(s);
      return false;
    }
    if (job.stop.load()) return false;
    if (ReportFirstDifference(job, t, off, n, width, pitch, file_begin, from_file, from_device)) {
      return true;  // the tensor's first difference is enough
    }
  }
  return true;
}

void Worker(const std::shared_ptr<VerifyJob>& job, size_t worker) {
  std::vector<unsigned char> from_file;
  std::vector<unsigned char> from_device(kPiece);
  for (;;) {
    const size_t k = job->next.fetch_add(1);
    if (k >= job->items.size() || !CompareItem(*job, worker, k, from_file, from_device)) break;
  }
  ReleaseThreadCryptoState();  // its TLS reads' and signatures' state
  job->running.Exited();
}

}  // namespace

namespace {

// The job for the loaded tensors of model: the files reopened (and checked to be the ones
// parsed), one item per loaded tensor.
Result<std::shared_ptr<VerifyJob>> MakeJob(const TensorDirectory& dir, const LoadedModel& model,
                                           size_t max_reported, double stall_timeout_s) {
  auto job = std::make_shared<VerifyJob>();
  for (uint32_t f = 0; f < dir.files.size(); ++f) {
    HOIST_ASSIGN_OR_RETURN(auto file, dir.OpenAsParsed(f));
    job->files.push_back(std::move(file));
  }
  job->devices = model.devices();
  job->external = model.external_destinations();
  job->max_reported = max_reported;
  for (size_t i = 0; i < dir.tensors.size(); ++i) {
    const TensorEntry& t = dir.tensors[i];
    if (!model.loaded(i) || t.nbytes == 0) continue;
    job->items.push_back({t.name, t.file, t.offset, t.nbytes, model.stride(i),
                          static_cast<const unsigned char*>(model.data(i)), model.device_index(i)});
  }
  job->progress.Start(stall_timeout_s);
  return job;
}

// Up to `threads` workers (at least one, or the error of the first that could not start).
Result<std::vector<std::thread>> StartWorkers(const std::shared_ptr<VerifyJob>& job, int threads) {
  std::vector<std::thread> pool;
  const auto workers = static_cast<size_t>(std::max(1, threads));
  {
    MutexLock lock(job->mutex);
    job->waits.assign(workers, Wait{});
  }
  for (size_t w = 0; w < workers; ++w) {
    job->running.Add(1);
    auto thread = StartThread("a verify thread", [job, w] { Worker(job, w); });
    if (!thread.ok()) {
      job->running.Exited();  // it never ran
      if (pool.empty()) return thread.status();
      break;  // the ones running share the work
    }
    pool.push_back(std::move(thread).value());
  }
  return pool;
}

// The wait that began first, or null when no worker waits on a read.
const Wait* OldestWait(const VerifyJob& job) HOIST_REQUIRES(job.mutex) {
  const Wait* oldest = nullptr;
  for (const Wait& w : job.waits) {
    if (w.kind != Wait::kNothing && (oldest == nullptr || w.since_ns < oldest->since_ns)) {
      oldest = &w;
    }
  }
  return oldest;
}

// What a stalled verify was waiting on, in words.
std::string StalledAt(const VerifyJob& job, const Wait& wait) HOIST_REQUIRES(job.mutex) {
  const Item& item = job.items[wait.item];
  if (wait.kind == Wait::kReadBack) {
    return "reading tensor '" + item.name + "' back from " + job.devices[item.device]->name();
  }
  return "reading " + job.files[item.file]->path() + " at byte " +
         std::to_string(wait.file_offset) + " (tensor '" + item.name + "')";
}

// The watchdog: OK once the workers end; a stop signal, or a file read or read-back that has
// not returned for stall_timeout_s while no other ended, is what ended the verify. Workers that
// compare, or that a loaded machine has not scheduled yet, wait on nothing that could hang.
Status Watch(VerifyJob& job) {
  while (!job.running.WaitForNone(std::chrono::milliseconds(20))) {
    if (Status stop = StopRequested().WithContext("verify"); !stop.ok()) return stop;
    const int64_t now = MonotonicNs();
    if (!job.progress.Stalled(now)) continue;
    MutexLock lock(job.mutex);
    const Wait* oldest = OldestWait(job);
    if (oldest == nullptr || !job.progress.Over(oldest->since_ns, now)) continue;
    return Status::Stalled("verify: no progress for " + StallSeconds(job.progress.timeout_s()) +
                           ": " + StalledAt(job, *oldest) + " has not returned");
  }
  return Status::Ok();
}

// Ends a verify that `ended`: devices that can cut their read-backs short do, and the workers
// leave within the grace; false when one did not (its device's memory is then kept allocated,
// the stuck workers left behind holding the job).
bool StopWorkers(VerifyJob& job, LoadedModel& model, const Status& ended) {
  job.Fail(ended);
  std::vector<bool> busy(job.devices.size(), false);
  {
    MutexLock lock(job.mutex);
    for (const Wait& w : job.waits) {
      if (w.kind == Wait::kReadBack) busy[job.items[w.item].device] = true;
    }
  }
  for (size_t d = 0; d < job.devices.size(); ++d) {
    if (busy[d] && job.devices[d]->CanAbandon()) (void)job.devices[d]->Abandon();
  }
  if (job.running.WaitForNone(kExitGrace)) return true;
  // A read-back that never returns may still read its device's memory.
  MutexLock lock(job.mutex);
  for (const Wait& w : job.waits) {
    if (w.kind != Wait::kReadBack) continue;
    const size_t d = job.items[w.item].device;
    job.devices[d]->set_free_on_destroy(false);
    model.LeaveAllocated(d);  // leaked on purpose
  }
  return false;
}

}  // namespace

Result<std::vector<Mismatch>> Verify(const TensorDirectory& dir, LoadedModel& model, int threads,
                                     size_t max_reported, double stall_timeout_s) {
  HOIST_ASSIGN_OR_RETURN(std::shared_ptr<VerifyJob> job,
                         MakeJob(dir, model, max_reported, stall_timeout_s));
  HOIST_ASSIGN_OR_RETURN(std::vector<std::thread> pool, StartWorkers(job, threads));
  const Status ended = Watch(*job);
  if (!ended.ok() && !StopWorkers(*job, model, ended)) {
    for (std::thread& t : pool) t.detach();
    return Status(ended.code(), ended.message() +
                                    "; a read-back did not stop: the device memory it reads is "
                                    "left allocated until the process exits");
  }
  for (std::thread& t : pool) t.join();
  const Status error = job->failure.Get();
  // A file written to while it was compared explains a mismatch or a failed read better than
  // the device or the disk does.
  if (error.ok() || error.code() == Code::kIoError) {
    HOIST_RETURN_IF_ERROR(CheckFilesUnchanged(job->files, "while it was being verified"));
  }
  if (!error.ok()) return error;
  MutexLock lock(job->mutex);
  return std::move(job->mismatches);
}

}  // namespace hoist
