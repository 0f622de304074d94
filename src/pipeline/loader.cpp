#include "pipeline/loader.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "base/checksum.h"
#include "base/platform.h"
#include "base/threads.h"
#include "base/units.h"
#include "device/host_memory.h"
#include "pipeline/staging_pool.h"
#include "plan/load_plan.h"

namespace hoist {
namespace {

using Clock = std::chrono::steady_clock;

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}
double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

constexpr auto kPoll = std::chrono::milliseconds(50);
// After a stop, copies in flight on a device that cannot abandon them get this long to finish.
constexpr auto kDrainGrace = std::chrono::milliseconds(1000);
// Threads that do not return within this after a stop (a read stuck in the kernel) are left
// behind, holding what they use.
constexpr auto kJoinGrace = std::chrono::milliseconds(800);

// A chunk whose copies are in flight.
struct InFlight {
  size_t chunk = 0;
  StagingBuffer buffer;
  std::vector<std::unique_ptr<CopyHandle>> copies;
  size_t completed = 0;  // copies[0, completed) are known done
  std::atomic<bool> hashed{false};
  size_t unhashed = 0;  // segments not yet fed to their tensor's checksum (hash_mutex)
  int64_t submitted_ns = 0;

  // Moves `completed` past the copies the device is done with, completed or failed (a failed
  // copy no longer touches its memory), in order; true when none is left in flight. The first
  // failure seen goes to `failure` when given.
  bool AdvanceCopies(Status* failure = nullptr) {
    while (completed < copies.size()) {
      auto done = copies[completed]->Poll();
      if (done.ok() && !done.value()) return false;
      if (!done.ok() && failure != nullptr && failure->ok()) *failure = done.status();
      ++completed;
    }
    return true;
  }
};

// A staged piece of a tensor waiting for its turn in the tensor's checksum.
struct PendingHash {
  const unsigned char* data = nullptr;
  uint64_t length = 0;
  std::shared_ptr<InFlight> entry;  // holds the staging buffer until hashed
};

struct TensorHash {
  Xxh3Stream stream;
  uint64_t next = 0;                        // next tensor offset to feed
  bool busy = false;                        // a thread is feeding it now
  std::map<uint64_t, PendingHash> pending;  // by tensor offset
};

struct ReaderState {
  std::atomic<int64_t> chunk{-1};  // chunk being read, or -1
  std::atomic<int64_t> since_ns{0};
  std::atomic<int64_t> copy_chunk{-1};  // chunk whose copy the reader waits for, or -1
  std::atomic<int64_t> copy_submitted_ns{0};
};

// Everything the threads of one load share. Held by shared_ptr so that a thread stuck in
// a read can be left behind safely.
struct LoadJob {
  LoadPlan plan;
  std::shared_ptr<CheckedDevice> device;
  std::unique_ptr<StagingPool> pool;
  std::vector<std::unique_ptr<File>> files;
  std::vector<std::string> file_paths;
  std::vector<unsigned char*> dest;  // per directory tensor
  bool external = false;
  bool checksum = false;
  int threads = 1;
  size_t buffers_per_reader = 2;

  std::atomic<size_t> next_chunk{0};
  std::atomic<uint64_t> read_bytes{0};
  std::atomic<uint64_t> copied_bytes{0};
  std::atomic<size_t> chunks_done{0};
  std::atomic<int64_t> last_progress_ns{0};
  std::vector<ReaderState> readers;

  std::atomic<bool> stop{false};
  std::mutex error_mutex;
  Status error;

  std::mutex orphans_mutex;
  std::vector<std::shared_ptr<InFlight>> orphans;  // copies a stopped reader left in flight

  // Per-tensor checksums, fed in tensor order by whichever reader holds the next piece; no
  // reader waits for another (pieces that arrive early wait in `pending`, holding buffers).
  std::mutex hash_mutex;
  std::vector<TensorHash> hashes;

  std::mutex exit_mutex;
  std::condition_variable exit_cv;
  int running = 0;

  void Fail(Status status) {
    {
      std::lock_guard<std::mutex> lock(error_mutex);
      if (error.ok()) error = std::move(status);
    }
    stop.store(true);
  }

  std::string Where(const Chunk& c) const {
    return file_paths[c.file] + " at byte " + std::to_string(c.offset) + " (" +
           std::to_string(c.length) + " bytes)";
  }

  // A reader left behind in a read may hand in copies after the load returned: memory under
  // a copy that has not completed is never freed.
  ~LoadJob() {
    for (auto& e : orphans) {
      if (!e->AdvanceCopies()) e->buffer.Abandon();
    }
  }

  void Exited() {
    std::lock_guard<std::mutex> lock(exit_mutex);
    --running;
    exit_cv.notify_all();
  }
};

// Reads chunk c into buffer; returns where the chunk's first byte landed.
Result<const unsigned char*> ReadChunk(LoadJob& job, const Chunk& c, unsigned char* buffer) {
  HOIST_ASSIGN_OR_RETURN(unsigned char* at,
                         job.files[c.file]->ReadCovering(c.offset, buffer, c.length));
  return at;
}

// Feeds tensor t's checksum with every piece that is next in line, unless another thread is
// already doing so (it will find the pieces registered meanwhile).
void DrainHash(LoadJob& job, uint32_t t) {
  std::unique_lock<std::mutex> lock(job.hash_mutex);
  TensorHash& h = job.hashes[t];
  if (h.busy) return;
  h.busy = true;
  for (;;) {
    auto it = h.pending.find(h.next);
    if (it == h.pending.end()) break;
    PendingHash piece = std::move(it->second);
    h.pending.erase(it);
    lock.unlock();
    h.stream.Update(piece.data, piece.length);  // only the busy thread touches the stream
    lock.lock();
    h.next += piece.length;
    if (--piece.entry->unhashed == 0) piece.entry->hashed.store(true, std::memory_order_release);
  }
  h.busy = false;
}

void HashChunk(LoadJob& job, const Chunk& c, const unsigned char* data,
               const std::shared_ptr<InFlight>& entry) {
  {
    std::lock_guard<std::mutex> lock(job.hash_mutex);
    entry->unhashed = c.segments.size();
    for (const Segment& s : c.segments) {
      job.hashes[s.tensor].pending[s.tensor_offset] = {data + s.chunk_offset, s.length, entry};
    }
  }
  for (const Segment& s : c.segments) DrainHash(job, s.tensor);
}

// Waits until entry's copies have completed and its bytes are hashed; false when the load
// stopped first. Copies are polled (event queries), never waited on blindly.
bool WaitUntilDone(LoadJob& job, ReaderState& me, InFlight& e) {
  const int64_t start_ns = NowNs();
  for (bool first = true;; first = false) {
    Status failed;
    const bool copied = e.AdvanceCopies(&failed);
    if (!failed.ok()) {
      job.Fail(failed.WithContext("copying " + job.Where(job.plan.chunks[e.chunk]) + " to " +
                                  job.device->name()));
    }
    if (copied && e.hashed.load(std::memory_order_acquire)) {
      me.copy_chunk.store(-1);
      return true;
    }
    if (job.stop.load()) {
      me.copy_chunk.store(-1);
      return false;
    }
    if (!copied && first) {
      me.copy_submitted_ns.store(e.submitted_ns);
      me.copy_chunk.store(static_cast<int64_t>(e.chunk));
    }
    // A 4 MiB copy takes about 80 us on a PCIe 5 link: yield for a while (a sleep would
    // overshoot by the timer's slack, 50 us or more), then sleep between polls.
    if (NowNs() - start_ns < 500'000) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
}

void Retire(LoadJob& job, const InFlight& e) {
  job.copied_bytes.fetch_add(job.plan.chunks[e.chunk].length);
  job.chunks_done.fetch_add(1);
  job.last_progress_ns.store(NowNs());
}

// One reader: claims chunks in order, reads each into one of its own staging buffers, starts
// its copies on its own queue, and before reusing a buffer waits for the copies that last
// read from it (KvikIO's and the plain staged loop's shape: no thread hands buffers around).
void ReaderLoop(const std::shared_ptr<LoadJob>& job_ptr, int reader) {
  LoadJob& job = *job_ptr;
  ReaderState& me = job.readers[static_cast<size_t>(reader)];
  const int queue = reader % job.device->queues();
  const uint64_t max_copy = job.pool->max_copy_bytes();
  std::deque<std::shared_ptr<InFlight>> mine;  // this reader's chunks in flight, oldest first
  bool stopped = false;
  while (!job.stop.load()) {
    // A buffer: another from the pool while this reader holds fewer than its share (taking
    // none that is not free), else its own whose copies started longest ago.
    std::optional<StagingBuffer> buffer;
    if (mine.size() < job.buffers_per_reader) {
      buffer = job.pool->Acquire(mine.empty() ? kPoll : std::chrono::milliseconds(0));
    }
    if (!buffer) {
      if (mine.empty()) continue;
      if (!WaitUntilDone(job, me, *mine.front())) {
        stopped = true;
        break;
      }
      Retire(job, *mine.front());
      buffer = std::move(mine.front()->buffer);
      mine.pop_front();
    }
    const size_t index = job.next_chunk.fetch_add(1);
    if (index >= job.plan.chunks.size()) break;
    const Chunk& c = job.plan.chunks[index];
    me.since_ns.store(NowNs());
    me.chunk.store(static_cast<int64_t>(index));
    auto data = ReadChunk(job, c, buffer->data());
    me.chunk.store(-1);
    if (!data.ok()) {
      job.Fail(data.status());
      break;
    }
    if (job.stop.load()) break;  // the destinations may be gone
    job.read_bytes.fetch_add(c.length);
    job.last_progress_ns.store(NowNs());

    auto entry = std::make_shared<InFlight>();
    entry->chunk = index;
    entry->buffer = std::move(*buffer);
    for (const Segment& s : c.segments) {
      for (uint64_t off = 0; off < s.length && !job.stop.load(); off += max_copy) {
        const uint64_t n = std::min(max_copy, s.length - off);
        auto copy = job.device->CopyToDeviceAsync(job.dest[s.tensor] + s.tensor_offset + off,
                                                  data.value() + s.chunk_offset + off, n, queue,
                                                  job.external);
        if (!copy.ok()) {
          job.Fail(
              copy.status().WithContext("copying " + job.Where(c) + " to " + job.device->name()));
        } else {
          entry->copies.push_back(std::move(copy).value());
        }
      }
    }
    entry->submitted_ns = NowNs();
    mine.push_back(entry);
    if (job.stop.load()) break;
    if (job.checksum && !c.segments.empty()) {
      HashChunk(job, c, data.value(), entry);
    } else {
      entry->hashed.store(true, std::memory_order_release);
    }
  }
  while (!stopped && !mine.empty()) {
    if (!WaitUntilDone(job, me, *mine.front())) break;
    Retire(job, *mine.front());
    mine.pop_front();
  }
  if (!mine.empty()) {
    std::lock_guard<std::mutex> lock(job.orphans_mutex);
    job.orphans.insert(job.orphans.end(), mine.begin(), mine.end());
  }
}

// OK, or kFileChanged when `opened` (by a load or a verify) is no longer the file that `parsed`
// describes: another file renamed over its name, or the same file written to since.
Status CheckOpenedAsParsed(const FileEntry& parsed, const File& opened) {
  if (const std::string change = DescribeFileChange(parsed.identity, opened.identity());
      !change.empty()) {
    return Status::FileChanged(parsed.path + ": " + change +
                               " since the model was opened; open the model again");
  }
  return Status::Ok();
}

// OK, or kFileChanged naming the first of `files` that was written to since it was opened
// (`during`: "while it was being loaded"). Asked through the open files: a rename over a
// name does not change what they read.
Status CheckFilesUnchanged(const std::vector<std::unique_ptr<File>>& files,
                           const std::string& during) {
  for (const auto& file : files) {
    HOIST_ASSIGN_OR_RETURN(const FileIdentity now, file->CurrentIdentity());
    if (const std::string change = DescribeFileChange(file->identity(), now); !change.empty()) {
      return Status::FileChanged(file->path() + ": " + change + " " + during);
    }
  }
  return Status::Ok();
}

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

// Names the stage that stopped moving, for the watchdog's error.
Status DescribeStall(LoadJob& job, double idle_s) {
  char idle_text[32];
  std::snprintf(idle_text, sizeof idle_text, "%.1f", idle_s);
  const std::string idle = idle_text;
  // The copy submitted longest ago that a reader is waiting for; else the oldest read.
  const auto [copy_chunk, submitted_ns] =
      Oldest(job.readers, &ReaderState::copy_chunk, &ReaderState::copy_submitted_ns);
  if (copy_chunk >= 0) {
    const double age = static_cast<double>(NowNs() - submitted_ns) / 1e9;
    return Status::Stalled(
        "no progress for " + idle + " s: device copy stage on " + job.device->name() + ": chunk " +
        job.Where(job.plan.chunks[static_cast<size_t>(copy_chunk)]) + " was submitted " +
        std::to_string(static_cast<int>(age)) + " s ago and has not completed");
  }
  const int64_t chunk = Oldest(job.readers, &ReaderState::chunk, &ReaderState::since_ns).first;
  if (chunk >= 0) {
    return Status::Stalled("no progress for " + idle + " s: read stage: reading " +
                           job.Where(job.plan.chunks[static_cast<size_t>(chunk)]) +
                           " has not returned (device " + job.device->name() + ")");
  }
  return Status::Stalled("no progress for " + idle + " s: waiting for staging buffers on " +
                         job.device->name());
}

}  // namespace

// Measured on a 16-core H200 machine (docs/PERFORMANCE.md): 12 readers fed the link best; one
// reader per core left none for the copies' driver work and the watchdog.
int DefaultReaderThreads() { return std::clamp(CpuCount() * 3 / 4, 2, 12); }

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

LoadedModel::~LoadedModel() {
  if (allocation != nullptr && device) (void)device->FreeDevice(allocation);
}

Result<std::unique_ptr<LoadedModel>> Load(const TensorDirectory& dir,
                                          const std::shared_ptr<CheckedDevice>& device,
                                          const LoadOptions& options) {
  const Clock::time_point start = Clock::now();
  HOIST_RETURN_IF_ERROR(CheckLoadOptions(options));
  auto model = std::make_unique<LoadedModel>();
  model->device = device;
  LoadReport& report = model->report;
  report.device = device->name();
  report.io = options.io;
  report.warnings = dir.warnings;

  // Plan.
  std::vector<bool> selected;
  if (!options.names.empty()) {
    selected.assign(dir.tensors.size(), false);
    for (const std::string& name : options.names) {
      const TensorEntry* t = dir.Find(name);
      if (t == nullptr) return Status::NotFound("no tensor named '" + name + "' in the model");
      selected[static_cast<size_t>(t - dir.tensors.data())] = true;
    }
  }
  auto job = std::make_shared<LoadJob>();
  job->device = device;
  job->checksum = options.checksum;
  job->external = static_cast<bool>(options.destination);
  job->threads = options.threads > 0 ? options.threads : DefaultReaderThreads();
  uint64_t chunk_bytes = options.chunk_bytes != 0 ? options.chunk_bytes : kDefaultChunkBytes;
  const uint64_t staging_bytes = options.staging_bytes != 0
                                     ? options.staging_bytes
                                     : DefaultStagingBytes(job->threads, chunk_bytes);
  chunk_bytes = std::min(chunk_bytes, std::max<uint64_t>(4096, staging_bytes / 2));
  HOIST_ASSIGN_OR_RETURN(job->plan, PlanLoad(dir, selected, chunk_bytes));
  const LoadPlan& plan = job->plan;
  report.tensor_bytes = plan.tensor_bytes;
  report.read_bytes = plan.read_bytes;
  report.tensors = plan.tensors.size();
  report.chunks = plan.chunks.size();
  report.threads = job->threads;
  report.chunk_bytes = chunk_bytes;
  report.phases.plan = Seconds(start);

  // Open files, allocate the destination and the staging pool.
  const Clock::time_point allocate_start = Clock::now();
  FileOpener open = options.open_file ? options.open_file : FileOpener(OpenFile);
  for (const FileEntry& f : dir.files) {
    OpenOptions o;
    o.direct = options.io == IoMode::kDirect;
    auto file = open(f.path, o);
    if (!file.ok() && o.direct && file.status().code() == Code::kUnavailable) {
      report.fallbacks.push_back(f.path + ": direct I/O unavailable (" + file.status().message() +
                                 "); reading through the page cache");
      o.direct = false;
      file = open(f.path, o);
    }
    if (!file.ok()) return file.status();
    HOIST_RETURN_IF_ERROR(CheckOpenedAsParsed(f, **file));
    if ((*file)->size() != f.size) {
      return Status::IoError(f.path + ": file is now " + std::to_string((*file)->size()) +
                             " bytes, was " + std::to_string(f.size) + " when it was parsed");
    }
    job->file_paths.push_back(f.path);
    job->files.push_back(std::move(file).value());
  }
  model->pointers.assign(dir.tensors.size(), nullptr);
  model->loaded_mask.assign(dir.tensors.size(), false);
  job->dest.assign(dir.tensors.size(), nullptr);
  if (options.destination) {
    model->external_destinations = true;
    for (uint32_t i : plan.tensors) {
      HOIST_ASSIGN_OR_RETURN(void* p, options.destination(i, dir.tensors[i]));
      if (p == nullptr && dir.tensors[i].nbytes > 0) {
        return Status::InvalidArgument("no destination given for tensor '" + dir.tensors[i].name +
                                       "'");
      }
      job->dest[i] = static_cast<unsigned char*>(p);
    }
  } else {
    const Clock::time_point device_start = Clock::now();
    HOIST_ASSIGN_OR_RETURN(model->allocation, device->AllocateDevice(plan.allocation_bytes));
    report.phases.allocate_device = Seconds(device_start);
    for (uint32_t i : plan.tensors) {
      job->dest[i] = static_cast<unsigned char*>(model->allocation) + plan.device_offset[i];
    }
  }
  for (uint32_t i : plan.tensors) {
    model->pointers[i] = job->dest[i];
    model->loaded_mask[i] = true;
  }
  const bool direct = !job->files.empty() && job->files[0]->direct();
  const uint64_t slack = direct ? 2 * job->files[0]->direct_alignment() : 0;
  // Every buffer holds at least a page of data beside a direct read's slack, whatever budget
  // was asked for: a budget below two such buffers is raised to two.
  const uint64_t min_buffer = kMinChunkBytes + slack;
  const Clock::time_point staging_start = Clock::now();
  HOIST_ASSIGN_OR_RETURN(
      job->pool,
      StagingPool::Create(device, std::max(staging_bytes, 2 * min_buffer), chunk_bytes + slack));
  report.phases.allocate_staging = Seconds(staging_start);
  if (job->pool->buffer_bytes() < chunk_bytes + slack) {
    // Smaller buffers than asked: cut the chunks to fit them.
    if (job->pool->buffer_bytes() < min_buffer) {
      return Status::Internal("staging buffers of " + std::to_string(job->pool->buffer_bytes()) +
                              " bytes cannot hold a chunk and " + std::to_string(slack) +
                              " bytes of direct-read slack");
    }
    chunk_bytes = job->pool->buffer_bytes() - slack;
    HOIST_ASSIGN_OR_RETURN(job->plan, PlanLoad(dir, selected, chunk_bytes));
    report.chunk_bytes = chunk_bytes;
    report.chunks = job->plan.chunks.size();
  }
  job->buffers_per_reader =
      std::max<size_t>(1, (job->pool->planned_buffers() + static_cast<size_t>(job->threads) - 1) /
                              static_cast<size_t>(job->threads));
  if (options.checksum) job->hashes = std::vector<TensorHash>(dir.tensors.size());
  report.phases.allocate = Seconds(allocate_start);

  // Stream.
  const Clock::time_point stream_start = Clock::now();
  job->readers = std::vector<ReaderState>(static_cast<size_t>(job->threads));
  job->last_progress_ns.store(NowNs());
  job->running = job->threads;
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(job->threads));
  // Each thread reports its exit only after everything it held (buffers) is released.
  for (int r = 0; r < job->threads; ++r) {
    auto thread = StartThread(
        "reader thread " + std::to_string(r + 1) + " of " + std::to_string(job->threads), [job, r] {
          ReaderLoop(job, r);
          job->Exited();
        });
    if (!thread.ok()) {
      {
        std::lock_guard<std::mutex> lock(job->exit_mutex);
        job->running -= job->threads - r;  // these never ran
      }
      job->Fail(Status(thread.status().code(),
                       thread.status().message() + "; fewer threads may do (--threads)"));
      break;
    }
    threads.push_back(std::move(thread).value());
  }

  const int64_t stall_ns = static_cast<int64_t>(options.stall_timeout_s * 1e9);
  const size_t total_chunks = job->plan.chunks.size();
  Clock::time_point last_report = Clock::now();
  auto snapshot = [&] {
    return LoadProgress{job->copied_bytes.load(), job->read_bytes.load(), job->plan.read_bytes,
                        Seconds(stream_start)};
  };
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(job->exit_mutex);
      job->exit_cv.wait_for(lock, kPoll, [&] { return job->running == 0; });
    }
    if (job->stop.load()) break;
    if (job->chunks_done.load() == total_chunks) break;
    if (Status stop = StopRequested(); !stop.ok()) {
      job->Fail(std::move(stop));
      break;
    }
    if (options.cancel != nullptr && options.cancel->load()) {
      job->Fail(Status::Cancelled("cancelled"));
      break;
    }
    if (options.progress && Clock::now() - last_report >= std::chrono::milliseconds(100)) {
      last_report = Clock::now();
      if (!options.progress(snapshot())) {
        job->Fail(Status::Cancelled("cancelled by the progress callback"));
        break;
      }
    }
    const int64_t idle = NowNs() - job->last_progress_ns.load();
    if (idle > stall_ns) {
      job->Fail(DescribeStall(*job, static_cast<double>(idle) / 1e9));
      break;
    }
  }
  report.phases.stream = Seconds(stream_start);
  const StagingPoolReport pool = job->pool->report();
  report.staging_buffer_bytes = pool.buffer_bytes;
  report.staging_buffers = pool.buffers;
  report.pinned_staging = pool.pinned;
  report.fallbacks.insert(report.fallbacks.end(), pool.fallbacks.begin(), pool.fallbacks.end());

  // Teardown: stop the threads, give stuck ones a grace period, then leave them behind.
  const Clock::time_point teardown_start = Clock::now();
  job->stop.store(true);
  {
    std::unique_lock<std::mutex> lock(job->exit_mutex);
    job->exit_cv.wait_for(lock, kJoinGrace, [&] { return job->running == 0; });
  }
  for (std::thread& t : threads) t.detach();  // each holds the job; the finished ones are gone
  Status status;
  {
    std::lock_guard<std::mutex> lock(job->error_mutex);
    status = job->error;
  }
  if (status.ok() && job->chunks_done.load() != total_chunks) {
    status = Status::Internal("load ended with " + std::to_string(job->chunks_done.load()) +
                              " of " + std::to_string(total_chunks) + " chunks done");
  }
  // Copies still in flight may read staging buffers and write destinations: give them a last
  // chance to complete, then stop the device or, if it cannot promise to stop, leave their
  // memory allocated rather than free it under them.
  bool all_exited = false;  // else a stuck thread still holds buffers
  {
    std::lock_guard<std::mutex> lock(job->exit_mutex);
    all_exited = job->running == 0;
  }
  std::vector<std::shared_ptr<InFlight>> orphans;
  {
    std::lock_guard<std::mutex> lock(job->orphans_mutex);
    orphans.swap(job->orphans);
  }
  if (!orphans.empty() && device->CanAbandon() && device->Abandon()) orphans.clear();
  const Clock::time_point drain_end = Clock::now() + kDrainGrace;
  for (;;) {
    std::erase_if(orphans, [](const std::shared_ptr<InFlight>& e) { return e->AdvanceCopies(); });
    if (orphans.empty() || Clock::now() > drain_end) break;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  if (!orphans.empty() || !all_exited) {
    if (device->Abandon()) {
      orphans.clear();
    } else {
      for (auto& o : orphans) o->buffer.Abandon();
      orphans.clear();
      device->set_free_on_destroy(false);
      model->allocation = nullptr;  // leaked on purpose
      status = status.WithContext(
          "the device did not stop its copies; its memory is left "
          "allocated until the process exits");
    }
  }
  // Bytes read through a file that was written to meanwhile may mix two versions of it; and
  // a read that failed (a file truncated under the load) is explained by the change.
  if (status.ok() || status.code() == Code::kIoError) {
    if (Status changed = CheckFilesUnchanged(
            job->files, "while it was being loaded; the loaded tensors may mix old and new bytes");
        !changed.ok()) {
      status = changed;
    }
  }
  if (!status.ok()) {
    if (all_exited) {
      job->hashes.clear();  // pieces waiting for their checksum hold staging buffers
      job->pool.reset();
    }
    return status;
  }
  if (options.checksum) {
    model->checksums.assign(dir.tensors.size(), 0);
    for (uint32_t i : job->plan.tensors) model->checksums[i] = job->hashes[i].stream.Digest();
  }
  if (options.progress) options.progress(snapshot());
  if (all_exited) job->pool.reset();
  report.phases.teardown = Seconds(teardown_start);
  report.wall_s = Seconds(start);
  report.peak_rss_bytes = PeakRssBytes();
  return model;
}

Result<std::vector<Mismatch>> Verify(const TensorDirectory& dir, LoadedModel& model, int threads,
                                     size_t max_reported) {
  std::vector<std::unique_ptr<File>> files;
  for (const FileEntry& f : dir.files) {
    HOIST_ASSIGN_OR_RETURN(auto file, OpenFile(f.path));
    HOIST_RETURN_IF_ERROR(CheckOpenedAsParsed(f, *file));
    files.push_back(std::move(file));
  }
  std::vector<size_t> work;
  for (size_t i = 0; i < dir.tensors.size(); ++i) {
    if (model.loaded(i) && dir.tensors[i].nbytes > 0) work.push_back(i);
  }
  std::atomic<size_t> next{0};
  std::mutex mutex;
  Status error;
  std::vector<Mismatch> mismatches;
  constexpr uint64_t kPiece = 16ull << 20;
  auto worker = [&] {
    std::vector<unsigned char> from_file(kPiece), from_device(kPiece);
    for (;;) {
      const size_t k = next.fetch_add(1);
      if (k >= work.size()) return;
      const TensorEntry& t = dir.tensors[work[k]];
      const auto* src = static_cast<const unsigned char*>(model.data(work[k]));
      for (uint64_t off = 0; off < t.nbytes; off += kPiece) {
        const uint64_t n = std::min(kPiece, t.nbytes - off);
        Status s = StopRequested().WithContext("verify");
        if (s.ok()) s = files[t.file]->ReadExact(t.offset + off, from_file.data(), n);
        if (s.ok())
          s = model.device->CopyToHost(from_device.data(), src + off, n,
                                       model.external_destinations);
        std::lock_guard<std::mutex> lock(mutex);
        if (!error.ok()) return;  // another worker failed: stop as soon as possible
        if (!s.ok()) {
          error = s;
          return;
        }
        if (std::memcmp(from_file.data(), from_device.data(), n) != 0) {
          uint64_t at = 0;
          while (from_file[at] == from_device[at]) ++at;
          if (mismatches.size() < max_reported) {
            mismatches.push_back({t.name, off + at, t.offset + off + at});
          }
          break;
        }
      }
    }
  };
  std::vector<std::thread> pool;
  for (int i = 0; i < std::max(1, threads); ++i) {
    auto thread = StartThread("a verify thread", worker);
    if (!thread.ok()) {
      if (pool.empty()) return thread.status();
      break;  // the ones running share the work
    }
    pool.push_back(std::move(thread).value());
  }
  for (std::thread& t : pool) t.join();
  // A file written to while it was compared explains a mismatch or a failed read better than
  // the device or the disk does.
  if (error.ok() || error.code() == Code::kIoError) {
    HOIST_RETURN_IF_ERROR(CheckFilesUnchanged(files, "while it was being verified"));
  }
  if (!error.ok()) return error;
  return mismatches;
}

}  // namespace hoist
