// One load, in three steps: Prepare (choose the tensors, open the files, settle each device's
// readers and staging, plan once, allocate), Stream (run the readers under the watchdog until
// every chunk is on its device or the load stops), TearDown (stop the threads, settle every
// device's copies in flight, free or knowingly leak, check the files).
#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <numeric>
#include <thread>

#include "base/platform.h"
#include "base/threads.h"
#include "io/signing.h"
#include "pipeline/device_decode.h"
#include "pipeline/file_checks.h"
#include "pipeline/load_job.h"
#include "pipeline/loader.h"
#include "pipeline/watchdog.h"

namespace hoist {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

constexpr auto kExitPoll = std::chrono::milliseconds(50);
// After a stop, copies in flight on a device that cannot abandon them get this long to finish.
constexpr auto kDrainGrace = std::chrono::milliseconds(1000);
// Threads that do not return within this after a stop (a read stuck in the kernel) are left
// behind, holding what they use.
constexpr auto kJoinGrace = std::chrono::milliseconds(800);

// Splits `threads` readers among devices by their bytes: every device with bytes gets one, the
// rest go in proportion (the remainder to the largest).
std::vector<int> SplitReaders(const std::vector<uint64_t>& bytes, int threads) {
  std::vector<int> readers(bytes.size(), 0);
  const auto active =
      static_cast<int>(std::count_if(bytes.begin(), bytes.end(), [](uint64_t b) { return b > 0; }));
  if (active == 0) return readers;
  const uint64_t total = std::accumulate(bytes.begin(), bytes.end(), uint64_t{0});
  const int extra = std::max(threads, active) - active;
  int given = 0;
  size_t largest = 0;
  for (size_t d = 0; d < bytes.size(); ++d) {
    if (bytes[d] == 0) continue;
    const auto share = static_cast<int>(static_cast<double>(extra) * static_cast<double>(bytes[d]) /
                                        static_cast<double>(total));
    readers[d] = 1 + share;
    given += share;
    if (bytes[d] > bytes[largest]) largest = d;
  }
  readers[largest] += extra - given;
  return readers;
}

std::string JoinNames(const std::vector<std::shared_ptr<CheckedDevice>>& devices) {
  std::string names;
  for (const auto& d : devices) names += (names.empty() ? "" : ", ") + d->name();
  return names;
}

class LoadSession {
 public:
  LoadSession(const TensorDirectory& dir,
              const std::vector<std::shared_ptr<CheckedDevice>>& devices,
              const LoadOptions& options, const std::vector<uint32_t>& placement,
              const ReadSpec& read)
      : dir_(dir),
        devices_(devices),
        options_(options),
        placement_(placement),
        read_(read),
        job_(std::make_shared<LoadJob>()) {}

  Status Prepare();
  // Starts the readers and watches them until the load ends, fails, stalls or is stopped.
  void Stream();
  Result<std::unique_ptr<LoadedModel>> TearDown();

 private:
  Status OpenFiles();
  Status CreateLanes();
  // Whether the file bytes read exceed the bytes copied by more than a quarter (column slices).
  bool ReadsMoreThanItCopies() const;
  // Whether read groups' replicas may be forwarded over peer links: every device holding a
  // member reaches every other directly. When not, each takes every byte over its own link, and
  // the report says so.
  bool ForwardReplicas();
  Status AllocateDestinations();
  // The rules of which options go together for this load.
  Status CheckOptions() const;
  // The chunks, each lane's share of them, and what is hashed and reported per tensor.
  Status PlanJob();
  // The plan's figures in the report.
  void ReportPlan();
  void StartReaders();
  // Until every chunk is done or the job stopped: OK; else why the load must end (a stop
  // signal, the caller's cancel or progress callback, the watchdog's stall).
  Status WatchReaders();
  // The stream's figures in the report.
  void ReportStream();
  // The readers' time by step; those still running (left behind) are not in it.
  void ReportReaderTimes();
  // Stops the threads and settles every device's copies in flight; the load's status.
  Status StopAndSettle();
  // Settles the copies the stopped readers left in flight (`gated`: no reader can start
  // another): each device stops them, or they complete within the grace, or the device's
  // memory is left allocated. True when any was.
  bool SettleCopies(bool gated);
  // The loaded tensors' digests against the checksums their file records.
  Status CheckRecordedChecksums(const std::vector<uint64_t>& digests) const;
  LoadProgress Progress() const {
    return {job_->copied_bytes.load(), job_->read_bytes.load(), job_->plan.read_bytes,
            Seconds(stream_start_)};
  }

  const TensorDirectory& dir_;
  const std::vector<std::shared_ptr<CheckedDevice>>& devices_;
  const LoadOptions& options_;
  const std::vector<uint32_t>& placement_;
  ReadSpec read_;  // the caller's strides and read groups; the session adds the rest
  const Clock::time_point start_ = Clock::now();
  std::unique_ptr<LoadedModel> model_ =
      std::make_unique<LoadedModel>(devices_, dir_.tensors.size());
  std::shared_ptr<LoadJob> job_;
  std::vector<bool> selected_;  // empty: all
  TensorLayout layout_;
  uint64_t chunk_bytes_ = 0;
  std::vector<std::thread> threads_;
  Clock::time_point stream_start_;
  int64_t stream_start_ns_ = 0;
  bool all_exited_ = false;  // else a stuck reader still holds buffers
  bool checks_recorded_ = false;
  SourceCounters source_before_;
};

Status LoadSession::CheckRecordedChecksums(const std::vector<uint64_t>& digests) const {
  for (uint32_t i : job_->plan.tensors) {
    const TensorEntry& t = dir_.tensors[i];
    if (!t.recorded_xxh3 || *t.recorded_xxh3 == digests[i]) continue;
    char hex[2][17];
    std::snprintf(hex[0], sizeof hex[0], "%016" PRIx64, digests[i]);
    std::snprintf(hex[1], sizeof hex[1], "%016" PRIx64, *t.recorded_xxh3);
    return Status(Code::kInvalidModel, dir_.files[t.file].path + ": tensor " + t.name +
                                           ": its bytes hash to xxh3 " + hex[0] + ", not the " +
                                           hex[1] + " the file records (the file is corrupt)");
  }
  return Status::Ok();
}

Status LoadSession::OpenFiles() {
  LoadReport& report = model_->report;
  Storage& storage = dir_.source();
  report.source = storage.description();
  source_before_ = storage.counters();
  // A source without direct reads (memory; later a remote one) is read as it is, said once.
  const bool direct = options_.io == IoMode::kDirect;
  if (direct && !storage.capabilities().direct_io) {
    report.fallbacks.push_back(storage.description() +
                               " has no direct I/O; reading the model as it is");
  }
  for (const FileEntry& f : dir_.files) {
    OpenOptions o;
    o.direct = direct && storage.capabilities().direct_io;
    auto file = storage.Open(f.path, o);
    if (!file.ok() && o.direct && file.status().code() == Code::kUnavailable) {
      report.fallbacks.push_back(f.path + ": direct I/O unavailable (" + file.status().message() +
                                 "); reading through the page cache");
      o.direct = false;
      file = storage.Open(f.path, o);
    }
    if (!file.ok()) return file.status();
    HOIST_RETURN_IF_ERROR(CheckOpenedAsParsed(f, **file));
    if ((*file)->size() != f.size) {
      return Status::IoError(f.path + ": file is now " + std::to_string((*file)->size()) +
                             " bytes, was " + std::to_string(f.size) + " when it was parsed");
    }
    job_->file_paths.push_back(f.path);
    job_->files.push_back(std::move(file).value());
  }
  return Status::Ok();
}

// Each device with bytes to load gets its share of the readers and of the staging budget, and
// its pool is built before planning, so the chunks are cut to the buffers the pools hold.
bool LoadSession::ReadsMoreThanItCopies() const {
  if (read_.strides.empty()) return false;
  uint64_t read = 0;
  for (uint32_t i : layout_.tensors) {
    const RowStride& s = read_.strides[i];
    const uint64_t n = dir_.tensors[i].nbytes;
    // A read group's members together read about their rows once (the columns of one tensor).
    const bool grouped = !read_.read_groups.empty() && read_.read_groups[i] != 0;
    read += s.width == 0 || n == 0 || grouped ? n : (n / s.width - 1) * s.pitch + s.width;
  }
  return read > layout_.tensor_bytes + layout_.tensor_bytes / 4;
}

bool LoadSession::ForwardReplicas() {
  if (read_.read_groups.empty()) return false;
  std::vector<bool> holds(devices_.size(), false);
  for (uint32_t i : layout_.tensors) {
    if (read_.read_groups[i] != 0) holds[layout_.device_of[i]] = true;
  }
  for (size_t a = 0; a < devices_.size(); ++a) {
    for (size_t b = 0; b < devices_.size(); ++b) {
      if (a == b || !holds[a] || !holds[b] || devices_[a]->CanReachPeer(*devices_[b])) continue;
      model_->report.fallbacks.push_back(
          devices_[a]->name() + " cannot copy to " + devices_[b]->name() +
          " directly: each device takes every byte of a tensor it shares over its own link");
      return false;
    }
  }
  return true;
}

Status LoadSession::CreateLanes() {
  const auto loaded_devices = static_cast<int>(std::count_if(layout_.device_tensor_bytes.begin(),
                                                             layout_.device_tensor_bytes.end(),
                                                             [](uint64_t b) { return b > 0; }));
  int threads = options_.threads > 0 ? options_.threads : DefaultReaderThreads(loaded_devices);
  if (options_.threads == 0) {
    // A remote source's reads wait on the network, not on a core: at least the requests in
    // flight it serves best, whatever the machine's cores.
    threads = std::max(threads, dir_.source().capabilities().preferred_reads_in_flight);
  }
  if (options_.threads == 0 && ReadsMoreThanItCopies()) {
    // Column slices read whole rows and copy only their columns: the page cache, not the
    // link, bounds them, and every core reads (docs/PERFORMANCE.md, "Why the defaults").
    threads = std::max(threads, CpuCount());
  }
  uint64_t chunk_bytes = options_.chunk_bytes != 0 ? options_.chunk_bytes : kDefaultChunkBytes;
  const uint64_t staging_bytes = options_.staging_bytes != 0
                                     ? options_.staging_bytes
                                     : DefaultStagingBytes(threads, chunk_bytes);
  const std::vector<int> readers = SplitReaders(layout_.device_tensor_bytes, threads);
  const int total_readers = std::accumulate(readers.begin(), readers.end(), 0);
  auto lane_budget = [&](size_t d) {
    return staging_bytes * static_cast<uint64_t>(readers[d]) /
           static_cast<uint64_t>(std::max(total_readers, 1));
  };
  for (size_t d = 0; d < devices_.size(); ++d) {
    if (readers[d] > 0)
      chunk_bytes = std::min(chunk_bytes, std::max<uint64_t>(4096, lane_budget(d) / 2));
  }
  const bool direct = !job_->files.empty() && job_->files[0]->direct();
  const uint64_t slack = direct ? 2 * job_->files[0]->direct_alignment() : 0;
  // Every buffer holds at least a page of data beside a direct read's slack, whatever budget
  // was asked for: a budget below two such buffers is raised to two.
  const uint64_t min_buffer = kMinChunkBytes + slack;
  int first_reader = 0;
  for (size_t d = 0; d < devices_.size(); ++d) {
    auto lane = std::make_unique<Lane>();
    lane->device = devices_[d];
    lane->readers = readers[d];
    lane->reads_into_destination = devices_[d]->capabilities().memory_is_host && !direct;
    lane->first_reader = first_reader;
    first_reader += readers[d];
    if (readers[d] > 0) {
      HOIST_ASSIGN_OR_RETURN(
          lane->pool, StagingPool::Create(devices_[d], std::max(lane_budget(d), 2 * min_buffer),
                                          chunk_bytes + slack));
      if (lane->pool->buffer_bytes() < min_buffer) {
        return Status::Internal("staging buffers of " + std::to_string(lane->pool->buffer_bytes()) +
                                " bytes on " + devices_[d]->name() + " cannot hold a chunk and " +
                                std::to_string(slack) + " bytes of direct-read slack");
      }
      // Smaller buffers than asked (pinned memory ran short): cut the chunks to fit them.
      chunk_bytes = std::min(chunk_bytes, lane->pool->buffer_bytes() - slack);
      lane->buffers_per_reader = std::max<size_t>(
          1, (lane->pool->planned_buffers() + static_cast<size_t>(readers[d]) - 1) /
                 static_cast<size_t>(readers[d]));
    }
    job_->lanes.push_back(std::move(lane));
  }
  job_->readers = std::vector<ReaderState>(static_cast<size_t>(total_readers));
  for (size_t d = 0; d < job_->lanes.size(); ++d) {
    const Lane& lane = *job_->lanes[d];
    for (int r = lane.first_reader; r < lane.first_reader + lane.readers; ++r) {
      job_->readers[static_cast<size_t>(r)].lane = d;
    }
  }
  chunk_bytes_ = chunk_bytes;
  return Status::Ok();
}

Status LoadSession::AllocateDestinations() {
  LoadedModel& model = *model_;
  const TensorLayout& plan = layout_;
  job_->dest = std::vector<std::atomic<unsigned char*>>(dir_.tensors.size());
  if (options_.destination) {
    model.SetExternalDestinations();
    job_->external = true;
    if (options_.destinations_when_needed) {
      job_->destination = options_.destination;  // the readers ask
      job_->destination_at_once = options_.destination_at_once;
      job_->destination_asked = std::vector<std::atomic<uint8_t>>(dir_.tensors.size());
      return Status::Ok();
    }
    for (uint32_t i : plan.tensors) {
      HOIST_ASSIGN_OR_RETURN(void* p, options_.destination(i, dir_.tensors[i]));
      if (p == nullptr && dir_.tensors[i].nbytes > 0) {
        return Status::InvalidArgument("no destination given for tensor '" + dir_.tensors[i].name +
                                       "'");
      }
      job_->dest[i].store(static_cast<unsigned char*>(p));
    }
  } else {
    std::vector<bool> used(devices_.size(), false);
    std::vector<void*> blocks(devices_.size(), nullptr);
    for (uint32_t i : plan.tensors) used[plan.device_of[i]] = true;
    for (size_t d = 0; d < devices_.size(); ++d) {
      if (!used[d]) continue;
      HOIST_ASSIGN_OR_RETURN(blocks[d], devices_[d]->AllocateDevice(plan.allocation_bytes[d]));
      model.AdoptBlock(d, blocks[d]);
    }
    for (uint32_t i : plan.tensors) {
      job_->dest[i].store(static_cast<unsigned char*>(blocks[plan.device_of[i]]) +
                          plan.device_offset[i]);
    }
  }
  return Status::Ok();
}

Status LoadSession::CheckOptions() const {
  if (options_.destinations_when_needed && !options_.destination) {
    return Status::InvalidArgument("destinations when needed need a destination callback");
  }
  if (options_.checksum && !read_.strides.empty()) {
    return Status::InvalidArgument("checksums are of whole tensors; a load by rows has none");
  }
  if (!read_.read_groups.empty() && (options_.checksum || options_.destinations_when_needed)) {
    return Status::InvalidArgument(
        "tensors read once for several devices take no checksums or destinations when needed");
  }
  if (!read_.read_groups.empty() && read_.read_groups.size() != dir_.tensors.size()) {
    return Status::InvalidArgument(
        "read groups are given for " + std::to_string(read_.read_groups.size()) +
        " tensors; the model has " + std::to_string(dir_.tensors.size()));
  }
  return Status::Ok();
}

Status LoadSession::Prepare() {
  LoadedModel& model = *model_;
  LoadReport& report = model.report;
  report.device = JoinNames(devices_);
  for (const auto& device : devices_) {
    if (!device->fallback().empty()) report.fallbacks.push_back(device->fallback());
  }
  report.io = options_.io;
  report.warnings = dir_.warnings;
  HOIST_RETURN_IF_ERROR(CheckOptions());
  job_->dir = &dir_;
  HOIST_ASSIGN_OR_RETURN(selected_, SelectTensors(dir_, options_.names));
  if (devices_.size() > 1 || !placement_.empty()) model.SetPlacement(placement_);
  Placement placement{static_cast<uint32_t>(devices_.size()), placement_};
  HOIST_ASSIGN_OR_RETURN(layout_, LayOutTensors(dir_, selected_, placement));
  model.SetStrides(read_.strides);
  read_.forward_replicas = ForwardReplicas();
  read_.staging_domain.clear();
  for (const auto& d : devices_) {
    read_.staging_domain.push_back(static_cast<uint32_t>(d->capabilities().staging_domain));
  }
  const double plan_s = Seconds(start_);

  const Clock::time_point allocate_start = Clock::now();
  HOIST_RETURN_IF_ERROR(OpenFiles());
  const Clock::time_point device_start = Clock::now();
  // The devices' blocks need only the layout; allocating them first keeps the staging pool's
  // background growth out of the way of a large device allocation.
  HOIST_RETURN_IF_ERROR(AllocateDestinations());
  report.phases.allocate_device = Seconds(device_start);
  const Clock::time_point staging_start = Clock::now();
  HOIST_RETURN_IF_ERROR(CreateLanes());
  report.phases.allocate_staging = Seconds(staging_start);
  report.phases.allocate = Seconds(allocate_start);

  const Clock::time_point plan_start = Clock::now();
  HOIST_RETURN_IF_ERROR(PlanJob());
  report.phases.plan = plan_s + Seconds(plan_start);
  ReportPlan();
  return Status::Ok();
}

Status LoadSession::PlanJob() {
  HOIST_ASSIGN_OR_RETURN(job_->plan, PlanChunks(dir_, layout_, read_, chunk_bytes_));
  const LoadPlan& plan = job_->plan;
  for (size_t d = 0; d < job_->lanes.size(); ++d) {
    job_->lanes[d]->next_chunk.store(plan.first_chunk[d]);
    job_->lanes[d]->end_chunk = plan.first_chunk[d + 1];
    job_->lanes[d]->bytes = plan.device_tensor_bytes[d];
  }
  // Tensors whose file records their checksum are hashed whenever they load whole (a load by
  // rows or of tensors read once for several devices has no whole tensor to hash).
  // Only they are hashed unless the caller asked for every tensor's checksum.
  const bool whole = read_.strides.empty() && read_.read_groups.empty();
  std::vector<bool> recorded(dir_.tensors.size(), false);
  for (uint32_t i : plan.tensors) {
    recorded[i] = whole && dir_.tensors[i].recorded_xxh3.has_value();
    checks_recorded_ |= recorded[i];
  }
  if (options_.checksum) {
    job_->checksums = std::make_unique<TensorChecksums>(dir_.tensors.size());
  } else if (checks_recorded_) {
    job_->checksums = std::make_unique<TensorChecksums>(dir_.tensors.size(), std::move(recorded));
  }
  job_->gather_cached_rows = options_.gather_cached_rows;
  if (options_.tensor_loaded) {
    job_->tensor_loaded = options_.tensor_loaded;
    job_->unlanded = std::vector<std::atomic<uint64_t>>(dir_.tensors.size());
    for (uint32_t i : plan.tensors) job_->unlanded[i].store(dir_.tensors[i].nbytes);
  }
  return Status::Ok();
}

void LoadSession::ReportPlan() {
  const LoadPlan& plan = job_->plan;
  LoadReport& report = model_->report;
  report.tensor_bytes = plan.tensor_bytes;
  report.read_bytes = plan.read_bytes;
  report.tensors = plan.tensors.size();
  report.chunks = plan.chunks.size();
  report.threads = static_cast<int>(job_->readers.size());
  for (size_t d = 0; d < devices_.size(); ++d) {
    report.devices.push_back({devices_[d]->name(), 0, plan.device_tensor_bytes[d], 0, 0});
  }
  for (uint32_t i : plan.tensors) ++report.devices[plan.device_of[i]].tensors;
  report.chunk_bytes = chunk_bytes_;
}

void LoadSession::Stream() {
  LoadJob& job = *job_;
  stream_start_ = Clock::now();
  stream_start_ns_ = MonotonicNs();
  job.progress.Start(options_.stall_timeout_s);
  if (job.tensor_loaded) {
    for (uint32_t i : job.plan.tensors) {
      if (dir_.tensors[i].nbytes == 0) job.tensor_loaded(i);
    }
  }
  StartReaders();
  if (Status ended = WatchReaders(); !ended.ok()) job.Fail(std::move(ended));
  ReportStream();
}

void LoadSession::StartReaders() {
  LoadJob& job = *job_;
  const int readers = static_cast<int>(job.readers.size());
  job.running.Add(readers);
  threads_.reserve(static_cast<size_t>(readers));
  // Each thread reports its exit only after everything it held (buffers) is released.
  for (int r = 0; r < readers; ++r) {
    auto thread =
        StartThread("reader thread " + std::to_string(r + 1) + " of " + std::to_string(readers),
                    [job = job_, r] {
                      ReaderLoop(job, r);
                      ReleaseThreadCryptoState();  // its TLS reads' and signatures' state
                      job->running.Exited();
                    });
    if (!thread.ok()) {
      job.running.Add(-(readers - r));  // these never ran
      job.Fail(Status(thread.status().code(),
                      thread.status().message() + "; fewer threads may do (--threads)"));
      return;
    }
    threads_.push_back(std::move(thread).value());
  }
}

Status LoadSession::WatchReaders() {
  LoadJob& job = *job_;
  const Watchdog watchdog(job);
  const size_t total_chunks = job.plan.chunks.size();
  Clock::time_point last_report = Clock::now();
  for (;;) {
    (void)job.running.WaitForNone(kExitPoll);
    if (job.stop.load() || job.chunks_done.load() == total_chunks) return Status::Ok();
    HOIST_RETURN_IF_ERROR(StopOrCancel(options_));
    if (options_.progress && Clock::now() - last_report >= std::chrono::milliseconds(100)) {
      last_report = Clock::now();
      if (!options_.progress(Progress())) {
        return Status::Cancelled("cancelled by the progress callback");
      }
    }
    HOIST_RETURN_IF_ERROR(watchdog.Check());
  }
}

void LoadSession::ReportStream() {
  LoadJob& job = *job_;
  LoadReport& report = model_->report;
  report.phases.stream = Seconds(stream_start_);
  report.gathered_bytes = job.gathered_bytes.load();
  report.read_into_destination_bytes = job.read_into_destination_bytes.load();
  for (size_t d = 0; d < job.lanes.size(); ++d) {
    const Lane& lane = *job.lanes[d];
    DeviceShare& share = report.devices[d];
    share.threads = lane.readers;
    const int64_t finished = lane.finished_ns.load();
    if (finished != 0) share.stream_s = static_cast<double>(finished - stream_start_ns_) / 1e9;
  }
  const SourceCounters now = dir_.source().counters();
  report.source_counts = {now.requests - source_before_.requests,
                          now.retries - source_before_.retries, now.bytes - source_before_.bytes};
  report.pinned_staging = true;
  for (const auto& lane : job.lanes) {
    if (!lane->pool) continue;
    const StagingPoolReport pool = lane->pool->report();
    report.staging_buffer_bytes = std::max(report.staging_buffer_bytes, pool.buffer_bytes);
    report.staging_buffers += pool.buffers;
    report.pinned_staging = report.pinned_staging && pool.pinned;
    report.fallbacks.insert(report.fallbacks.end(), pool.fallbacks.begin(), pool.fallbacks.end());
  }
}

void LoadSession::ReportReaderTimes() {
  const ReaderTimes& t = job_->reader_times;
  auto seconds = [](const std::atomic<int64_t>& ns) {
    return static_cast<double>(ns.load()) / 1e9;
  };
  model_->report.readers = {
      seconds(t.read_ns),        seconds(t.copy_start_ns),       seconds(t.copy_wait_ns),
      seconds(t.buffer_wait_ns), seconds(t.destination_wait_ns), seconds(t.destination_settle_ns),
      seconds(t.total_ns)};
}

Status LoadSession::StopAndSettle() {
  LoadJob& job = *job_;
  job.stop.store(true);
  if (!job.FirstError().ok() || job.chunks_done.load() != job.plan.chunks.size()) {
    // A network read ends now, not at its own timeout.
    for (const auto& file : job.files) file->Abort();
  }
  // Past this gate no reader starts a copy. A reader inside a device's copy call that does not
  // return within the grace may still start one: then no device's memory is freed.
  const bool gated = job.copy_gate.Close(kJoinGrace);
  all_exited_ = job.running.WaitForNone(kJoinGrace);
  for (std::thread& t : threads_) t.detach();  // each holds the job; the finished ones are gone
  Status status = job.FirstError();
  if (status.ok() && job.chunks_done.load() != job.plan.chunks.size()) {
    status = Status::Internal("load ended with " + std::to_string(job.chunks_done.load()) + " of " +
                              std::to_string(job.plan.chunks.size()) + " chunks done");
  }
  if (SettleCopies(gated)) {
    status = status.WithContext(
        job.external
            ? "a copy or a read into the caller's destinations did not stop: they may still be "
              "written, so they must stay allocated until the process exits"
            : "a copy to the device or a read into its memory did not stop; its memory is left "
              "allocated until the process exits");
  }
  // Bytes read through a file that was written to meanwhile may mix two versions of it; and
  // a read that failed (a file truncated under the load) is explained by the change.
  if (status.ok() || status.code() == Code::kIoError) {
    if (Status changed = CheckFilesUnchanged(
            job.files, "while it was being loaded; the loaded tensors may mix old and new bytes");
        !changed.ok()) {
      status = changed;
    }
  }
  return status;
}

namespace {

using InFlightList = std::vector<std::shared_ptr<InFlight>>;

// Whether the copies of orphan e run on (or to) lane d's device.
bool Touches(const LoadJob& job, const InFlight& e, size_t d) {
  return job.DevicesTouched(job.plan.chunks[e.chunk])[d];
}
bool AnyTouches(const LoadJob& job, const InFlightList& orphans, size_t d) {
  return std::any_of(orphans.begin(), orphans.end(),
                     [&](const auto& e) { return Touches(job, *e, d); });
}

// Asks each device that orphans touch to stop their copies, and drops the orphans whose every
// device did (a chunk's copies may run on several: read groups, forwards); then gives the rest
// kDrainGrace to complete.
void AbandonOrDrain(LoadJob& job, InFlightList& orphans) {
  std::vector<bool> abandoned(job.lanes.size(), false);
  for (size_t d = 0; d < job.lanes.size(); ++d) {
    CheckedDevice& device = *job.lanes[d]->device;
    if (AnyTouches(job, orphans, d) && device.CanAbandon() && device.Abandon()) {
      abandoned[d] = true;
    }
  }
  std::erase_if(orphans, [&](const auto& e) {
    for (size_t d = 0; d < job.lanes.size(); ++d) {
      if (Touches(job, *e, d) && !abandoned[d]) return false;
    }
    return true;
  });
  const Clock::time_point drain_end = Clock::now() + kDrainGrace;
  for (;;) {
    std::erase_if(orphans, [](const std::shared_ptr<InFlight>& e) { return e->AdvanceCopies(); });
    if (orphans.empty() || Clock::now() > drain_end) return;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

}  // namespace

bool LoadSession::SettleCopies(bool gated) {
  LoadJob& job = *job_;
  // Copies still in flight may read staging buffers and write destinations: give them a last
  // chance to complete, then stop each device or, if one cannot promise to stop, leave its
  // memory allocated rather than free it under them.
  InFlightList orphans = job.orphans.Take();
  AbandonOrDrain(job, orphans);
  // A reader that has not exited may hold any of its lane's buffers and copy to any device:
  // every device whose copies are unsettled, or all of them then, must stop or keep its memory.
  bool leaked = false;
  for (size_t d = 0; d < job.lanes.size(); ++d) {
    const bool unsettled =
        AnyTouches(job, orphans, d) ||
        (!all_exited_ && (job.lanes[d]->readers > 0 || !job.plan.read_groups.empty())) || !gated;
    if (!unsettled) continue;
    CheckedDevice& device = *job.lanes[d]->device;
    if (!gated || !device.Abandon()) {
      for (auto& o : orphans) {
        if (Touches(job, *o, d)) o->buffer.Abandon();
      }
      device.set_free_on_destroy(false);
      model_->LeaveAllocated(d);  // leaked on purpose
      leaked = true;
    }
  }
  return leaked;
}

Result<std::unique_ptr<LoadedModel>> LoadSession::TearDown() {
  const Clock::time_point teardown_start = Clock::now();
  const Status status = StopAndSettle();
  LoadJob& job = *job_;
  ReportReaderTimes();
  auto free_staging = [&] {
    if (!all_exited_) return;  // a stuck reader still holds buffers: the job frees them later
    if (job.checksums) job.checksums->Clear();  // pieces waiting for their turn hold buffers
    for (auto& lane : job.lanes) lane->pool.reset();
  };
  if (!status.ok()) {
    free_staging();
    return status;
  }
  LoadedModel& model = *model_;
  for (uint32_t i : job.plan.tensors) {
    model.SetLoaded(i, job.dest[i].load(), job.plan.device_of[i]);
  }
  if (job.checksums) {
    std::vector<uint64_t> checksums(dir_.tensors.size(), 0);
    for (uint32_t i : job.plan.tensors) checksums[i] = job.checksums->Digest(i);
    if (checks_recorded_) {
      Status recorded = CheckRecordedChecksums(checksums);
      if (!recorded.ok()) {
        free_staging();
        return recorded;
      }
    }
    if (options_.checksum) model.SetChecksums(std::move(checksums));
  }
  if (options_.progress) {
    options_.progress(Progress());
  }
  free_staging();
  model.report.phases.teardown = Seconds(teardown_start);
  model.report.wall_s = Seconds(start_);
  model.report.peak_rss_bytes = PeakRssBytes();
  return std::move(model_);
}

}  // namespace

Result<std::unique_ptr<LoadedModel>> Load(
    const TensorDirectory& dir, const std::vector<std::shared_ptr<CheckedDevice>>& devices,
    const LoadOptions& options, const std::vector<uint32_t>& placement, const ReadSpec& read) {
  HOIST_RETURN_IF_ERROR(CheckLoadOptions(options));
  if (devices.empty()) return Status::InvalidArgument("a load needs a device");
  for (const auto& d : devices) {
    if (!d) return Status::InvalidArgument("a load's device is null");
  }
  if (DecodesOnDevice(dir, devices, options, read)) {
    return LoadDecodingOnDevice(dir, devices, options, placement);
  }
  LoadSession session(dir, devices, options, placement, read);
  HOIST_RETURN_IF_ERROR(session.Prepare());
  session.Stream();
  Result<std::unique_ptr<LoadedModel>> model = session.TearDown();
  if (model.ok()) {
    if (std::string why = HostDecodeFor(dir, devices, options); !why.empty()) {
      (*model)->report.fallbacks.push_back(std::move(why));
    }
  }
  return model;
}

Result<std::unique_ptr<LoadedModel>> Load(const TensorDirectory& dir,
                                          const std::shared_ptr<CheckedDevice>& device,
                                          const LoadOptions& options) {
  return Load(dir, std::vector<std::shared_ptr<CheckedDevice>>{device}, options);
}

}  // namespace hoist
