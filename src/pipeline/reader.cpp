// The reader threads' loop: the hot path of every load.
#include <algorithm>
#include <deque>
#include <optional>
#include <thread>

#include "pipeline/load_job.h"

namespace hoist {
namespace {

constexpr auto kBufferPoll = std::chrono::milliseconds(50);

// Adds the time from its making to its end to `sum`, in nanoseconds.
class TimeInto {
 public:
  explicit TimeInto(int64_t& sum) : sum_(sum), start_ns_(MonotonicNs()) {}
  ~TimeInto() { sum_ += MonotonicNs() - start_ns_; }
  TimeInto(const TimeInto&) = delete;
  TimeInto& operator=(const TimeInto&) = delete;

 private:
  int64_t& sum_;
  const int64_t start_ns_;
};

// The queue a reader copies on to a device: its own, spread over the device's queues.
int QueueOn(const CheckedDevice& device, int reader) { return reader % device.queues(); }

// Once a chunk's copies from staging are done, starts the peer copies that forward its
// segments from the device they landed on to their replicas'; false when none is left to start.
bool StartForwards(LoadJob& job, InFlight& e, int reader) {
  if (e.forwarded) return false;
  e.forwarded = true;
  const CopyGate::Pass gate(job.copy_gate);  // as in StartCopies
  if (!gate || job.stop.load()) return false;
  const Chunk& c = job.plan.chunks[e.chunk];
  bool started = false;
  for (const Segment& s : c.segments) {
    if (!s.forward) continue;
    CheckedDevice& from = *job.lanes[s.device]->device;
    unsigned char* src = job.dest[s.tensor].load(std::memory_order_acquire) + s.tensor_offset;
    for (uint32_t r : job.plan.replicas[s.tensor]) {
      CheckedDevice& to = *job.lanes[job.plan.device_of[r]]->device;
      unsigned char* dst = job.dest[r].load(std::memory_order_acquire) + s.tensor_offset;
      auto copy = from.CopyToPeerAsync(dst, to, src, s.length, QueueOn(from, reader), job.external);
      if (!copy.ok()) {
        job.Fail(copy.status().WithContext("forwarding " + job.Where(c) + " from " + from.name() +
                                           " to " + to.name()));
        return started;
      }
      e.copies.push_back(std::move(copy).value());
      started = true;
    }
  }
  return started;
}

// Waits until entry's copies (its forwards included) have completed and, unless only the
// copies are asked for, its bytes are hashed; false when the load stopped first. Copies are
// polled (event queries), never waited on blindly.
bool WaitUntilDone(LoadJob& job, ReaderState& me, InFlight& e, bool copies_only = false) {
  const int64_t start_ns = MonotonicNs();
  for (bool first = true;; first = false) {
    Status failed;
    bool copied = e.AdvanceCopies(&failed);
    if (!failed.ok()) {
      const Chunk& c = job.plan.chunks[e.chunk];
      job.Fail(failed.WithContext("copying " + job.Where(c) + " to " + job.DeviceName(c)));
    } else if (copied && !job.plan.replicas.empty() && !job.stop.load() &&
               StartForwards(job, e, static_cast<int>(&me - job.readers.data()))) {
      copied = false;
    }
    if (copied && (copies_only || e.hashed.load(std::memory_order_acquire))) {
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
    if (MonotonicNs() - start_ns < 500'000) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
}

// Segment k of entry e is on the device: reports its tensor once all of it is.
void Land(LoadJob& job, InFlight& e, size_t k) {
  if (!e.landed.empty() && e.landed[k]) return;
  if (!e.landed.empty()) e.landed[k] = true;
  const Segment& s = job.plan.chunks[e.chunk].segments[k];
  const int64_t now = MonotonicNs();
  auto land = [&](uint32_t tensor, uint32_t device) {
    Lane& to = *job.lanes[device];
    if (to.landed_bytes.fetch_add(s.length) + s.length == to.bytes) to.finished_ns.store(now);
    if (job.tensor_loaded && job.unlanded[tensor].fetch_sub(s.length) == s.length) {
      job.tensor_loaded(tensor);
    }
  };
  land(s.tensor, s.device);
  if (!s.forward || !e.forwarded) return;  // a stopped load may not have forwarded it
  for (uint32_t r : job.plan.replicas[s.tensor]) land(r, job.plan.device_of[r]);
}

void Retire(LoadJob& job, InFlight& e) {
  for (size_t k = 0; k < job.plan.chunks[e.chunk].segments.size(); ++k) Land(job, e, k);
  job.copied_bytes.fetch_add(job.plan.chunks[e.chunk].length);
  job.chunks_done.fetch_add(1);
  job.progress.Moved();
}

// What a reader's first ask for a tensor's destination came to.
enum class Asked : uint8_t {
  kHave,         // the destination is known (this reader's ask, or another reader's)
  kMustWait,     // the ask is this reader's, and the caller has no destination at once
  kAnotherAsks,  // another reader is asking the caller
  kFailed,       // the load failed or stopped
};

// Stores a destination the caller gave (or fails the load); false when the load is to stop.
bool KeepDestination(LoadJob& job, uint32_t tensor, Result<void*> p) {
  job.progress.Moved();
  if (p.ok() && *p == nullptr) {
    p = Status::InvalidArgument("no destination given for tensor '" +
                                job.dir->tensors[tensor].name + "'");
  }
  if (!p.ok()) {
    job.Fail(p.status());
    return false;
  }
  job.dest[tensor].store(static_cast<unsigned char*>(*p), std::memory_order_release);
  return true;
}

// LoadJob::destination_asked, per tensor: who asks the caller for its destination, and how.
enum AskState : uint8_t {
  kUnasked = 0,
  kAskingAtOnce = 1,   // destination_at_once, which answers without waiting
  kAskingMayWait = 2,  // destination, which may wait for tensors to be reported
};

// Polls every `interval` until `done()` holds; false when the load stopped first.
template <typename Done>
bool PollUnlessStopped(const LoadJob& job, Done done, std::chrono::microseconds interval) {
  while (!done()) {
    if (job.stop.load()) return false;
    std::this_thread::sleep_for(interval);
  }
  return true;
}

bool HasDestination(const LoadJob& job, uint32_t tensor) {
  return job.dest[tensor].load(std::memory_order_acquire) != nullptr;
}

// Takes the ask for tensor's destination (one per tensor; asks for different tensors run at
// once, so that a caller holding one back cannot keep the tensors before it from theirs) and
// tries the caller's destination_at_once. Where another reader holds the ask and is asking at
// once, its answer is awaited here: only an ask that may wait needs this reader settled.
Asked AskAtOnce(LoadJob& job, uint32_t tensor) {
  const bool at_once = static_cast<bool>(job.destination_at_once);
  uint8_t state = kUnasked;
  if (!job.destination_asked[tensor].compare_exchange_strong(
          state, at_once ? kAskingAtOnce : kAskingMayWait)) {
    const bool answered = PollUnlessStopped(
        job,
        [&] {
          return job.destination_asked[tensor].load() != kAskingAtOnce ||
                 HasDestination(job, tensor);
        },
        std::chrono::microseconds(20));
    if (!answered) return Asked::kFailed;
    return HasDestination(job, tensor) ? Asked::kHave : Asked::kAnotherAsks;
  }
  if (!at_once) return Asked::kMustWait;
  auto p = job.destination_at_once(tensor, job.dir->tensors[tensor]);
  if (!p.ok() || *p != nullptr) {
    return KeepDestination(job, tensor, std::move(p)) ? Asked::kHave : Asked::kFailed;
  }
  job.destination_asked[tensor].store(kAskingMayWait);
  return Asked::kMustWait;
}

// Waits while another reader asks for tensor's destination; false when the load stopped.
bool WaitForAnotherReadersAsk(const LoadJob& job, uint32_t tensor) {
  return PollUnlessStopped(
      job, [&] { return HasDestination(job, tensor); }, std::chrono::microseconds(50));
}

// The ask AskAtOnce left to this reader: the caller's `destination`, which may wait; false
// when the load stopped or the caller gave none (the load has then failed).
bool AskAndWait(LoadJob& job, uint32_t tensor) {
  job.waiting_on_caller.fetch_add(1);
  auto p = job.destination(tensor, job.dir->tensors[tensor]);
  job.waiting_on_caller.fetch_sub(1);
  return KeepDestination(job, tensor, std::move(p));
}

// Where chunk c's bytes go when its reader can read them straight there: one piece of one
// tensor whose destination is known, on its own lane's host memory; else null.
unsigned char* DestinationToReadInto(LoadJob& job, const Lane& lane, const Chunk& c) {
  if (!lane.reads_into_destination || c.segments.size() != 1) return nullptr;
  const Segment& s = c.segments[0];
  if (s.device != c.device || s.rows > 0 || s.forward || s.chunk_offset != 0 ||
      s.length != c.length) {
    return nullptr;
  }
  unsigned char* dest = job.dest[s.tensor].load(std::memory_order_acquire);
  return dest == nullptr ? nullptr : dest + s.tensor_offset;
}

// Reads chunk `index` straight into its tensor (DestinationToReadInto): no staging, no copy.
// Returns its in-flight entry (no buffer, no copies; hashed when the checksums have it), or
// null when the read failed or the load stopped (the load has then failed or is stopping).
std::shared_ptr<InFlight> ReadIntoDestination(LoadJob& job, ReaderState& me, size_t index,
                                              unsigned char* into) {
  const Chunk& c = job.plan.chunks[index];
  me.since_ns.store(MonotonicNs());
  me.chunk.store(static_cast<int64_t>(index));
  Status read;
  {
    // Held as while starting a copy, and for the whole read: no read into a tensor starts
    // once the load has stopped, and a read that never ends keeps the tear-down from
    // freeing the memory under it (it then leaves the memory allocated).
    const CopyGate::Pass gate(job.copy_gate);
    if (gate && !job.stop.load()) read = job.files[c.file]->ReadExact(c.offset, into, c.length);
  }
  me.chunk.store(-1);
  if (!read.ok()) {
    job.Fail(read);
    return nullptr;
  }
  if (job.stop.load()) return nullptr;
  job.read_bytes.fetch_add(c.length);
  job.read_into_destination_bytes.fetch_add(c.length);
  job.progress.Moved();
  auto entry = std::make_shared<InFlight>();
  entry->chunk = index;
  entry->submitted_ns = MonotonicNs();
  if (job.checksums) {
    job.checksums->Add(c, into, entry);
  } else {
    entry->hashed.store(true, std::memory_order_release);
  }
  return entry;
}

// One reader thread's run. Each reader reads into its own staging buffers, starts its copies
// on its own queue, and before reusing a buffer waits for the copies that last read from it
// (KvikIO's and the plain staged loop's shape: no thread hands buffers around). The steps:
// take a buffer, read a chunk (straight into its tensor, gathered, or staged), start its
// copies (asking for destinations as they are needed), hand it to the checksums, and at the
// end settle what is in flight.
class Reader {
 public:
  Reader(LoadJob& job, int reader)
      : job_(job),
        me_(job.readers[static_cast<size_t>(reader)]),
        lane_(*job.lanes[me_.lane]),
        reader_(reader),
        max_copy_(lane_.pool->max_copy_bytes()) {}

  void Run() {
    while (!job_.stop.load()) {
      std::optional<StagingBuffer> buffer;
      const Step step = TakeBuffer(&buffer);
      if (step == Step::kAgain) continue;
      if (step == Step::kStop) break;
      const size_t index = lane_.next_chunk.fetch_add(1);
      if (index >= lane_.end_chunk) break;
      if (!Process(index, std::move(buffer))) break;
    }
    Finish();
    AddTimes();
  }

 private:
  enum class Step : uint8_t { kBuffer, kAgain, kStop };

  // A buffer: another from the pool while this reader holds fewer than its share (taking none
  // that is not free), else its own whose copies started longest ago (kAgain when that one
  // was read straight into its tensor and held none, or nothing is in flight yet).
  Step TakeBuffer(std::optional<StagingBuffer>* buffer) {
    if (mine_.size() < lane_.buffers_per_reader) {
      const TimeInto waiting(spent_.buffer_wait);
      *buffer = lane_.pool->Acquire(mine_.empty() ? kBufferPoll : std::chrono::milliseconds(0));
    }
    if (*buffer) return Step::kBuffer;
    if (mine_.empty()) return Step::kAgain;
    if (!WaitForCopies(*mine_.front())) {
      stopped_ = true;
      return Step::kStop;
    }
    Retire(job_, *mine_.front());
    *buffer = std::move(mine_.front()->buffer);
    mine_.pop_front();
    return **buffer ? Step::kBuffer : Step::kAgain;
  }

  // Reads chunk `index` and starts its copies; false when the reader is to stop.
  bool Process(size_t index, std::optional<StagingBuffer> buffer) {
    const Chunk& c = job_.plan.chunks[index];
    if (unsigned char* into = DestinationToReadInto(job_, lane_, c)) {
      buffer.reset();  // back to the pool, for this reader's next staged chunk or another's
      std::shared_ptr<InFlight> entry;
      {
        const TimeInto reading(spent_.read);
        entry = ReadIntoDestination(job_, me_, index, into);
      }
      if (!entry) return false;
      mine_.push_back(std::move(entry));
      return true;
    }
    bool packed = false;
    auto data = ReadStaged(index, *buffer, &packed);
    if (!data.ok()) {
      job_.Fail(data.status());
      return false;
    }
    if (job_.stop.load()) return false;  // the destinations may be gone
    job_.read_bytes.fetch_add(c.length);
    job_.progress.Moved();

    auto entry = std::make_shared<InFlight>();
    entry->chunk = index;
    entry->buffer = std::move(*buffer);
    Staged staged{c, *entry, *data, packed};
    bool hashing = false;
    if (!job_.destination) {
      StartCopies(staged, nullptr);
    } else if (!CopyAsDestinationsComeIn(staged, entry, &hashing)) {
      mine_.push_back(entry);
      return false;
    }
    entry->submitted_ns = MonotonicNs();
    mine_.push_back(entry);
    if (job_.stop.load()) return false;
    Hash(staged, entry, &hashing);
    return true;
  }

  // A chunk of one column slice's rows whose pages are all cached: only its columns are copied
  // out, packed (*packed; the copies to the device are then plain ones); else its rows' range.
  Result<unsigned char*> ReadStaged(size_t index, StagingBuffer& buffer, bool* packed) {
    const TimeInto reading(spent_.read);
    const Chunk& c = job_.plan.chunks[index];
    me_.since_ns.store(MonotonicNs());
    me_.chunk.store(static_cast<int64_t>(index));
    if (job_.gather_cached_rows && c.segments.size() == 1 && c.segments[0].rows > 0) {
      const RowStride& stride = job_.plan.strides[c.segments[0].tensor];
      *packed = job_.files[c.file]->GatherCachedRows(c.offset, stride.width, stride.pitch,
                                                     c.segments[0].rows, buffer.data());
      if (*packed) job_.gathered_bytes.fetch_add(c.length);
    }
    auto data = *packed ? Result<unsigned char*>(buffer.data())
                        : job_.files[c.file]->ReadCovering(c.offset, buffer.data(), c.length);
    me_.chunk.store(-1);
    return data;
  }

  // A chunk read into staging, on its way to the devices.
  struct Staged {
    const Chunk& chunk;
    InFlight& entry;
    const unsigned char* data;
    bool packed;
  };

  // A copy started joins the chunk's; one that could not start fails the load.
  void Keep(const Staged& st, Result<std::unique_ptr<CopyHandle>> copy,
            const CheckedDevice& device) {
    if (!copy.ok()) {
      job_.Fail(
          copy.status().WithContext("copying " + job_.Where(st.chunk) + " to " + device.name()));
    } else {
      st.entry.copies.push_back(std::move(copy).value());
    }
  }

  // Starts the copies of the segments whose destinations are known (those not yet `started`,
  // when given); true if any destination is not known.
  bool StartCopies(const Staged& st, std::vector<bool>* started) {
    const TimeInto starting(spent_.copy_start);
    bool missing = false;
    // No copy starts once the load has stopped: TearDown takes the gate before it settles the
    // devices, so a copy started after that would touch memory being freed.
    const CopyGate::Pass gate(job_.copy_gate);
    if (!gate || job_.stop.load()) return false;
    for (size_t k = 0; k < st.chunk.segments.size(); ++k) {
      const Segment& s = st.chunk.segments[k];
      if (started != nullptr && (*started)[k]) continue;
      unsigned char* dest = job_.dest[s.tensor].load(std::memory_order_acquire);
      if (dest == nullptr) {
        missing = true;
        continue;
      }
      if (started != nullptr) (*started)[k] = true;
      CheckedDevice& device = *job_.lanes[s.device]->device;
      if (s.rows > 0 && !st.packed) {
        StartRowCopies(st, s, dest, device);
      } else {
        StartPlainCopies(st, s, dest, device);
      }
    }
    return missing;
  }

  // Rows of a column slice: as many per copy as max_copy_ spans.
  void StartRowCopies(const Staged& st, const Segment& s, unsigned char* dest,
                      CheckedDevice& device) {
    const RowStride& stride = job_.plan.strides[s.tensor];
    const uint64_t per_copy =
        max_copy_ <= stride.width ? 1 : (max_copy_ - stride.width) / stride.pitch + 1;
    for (uint64_t r = 0; r < s.rows && !job_.stop.load(); r += per_copy) {
      const uint64_t n = std::min(per_copy, s.rows - r);
      Keep(st,
           device.CopyRowsToDeviceAsync(dest + s.tensor_offset + r * stride.width,
                                        st.data + s.chunk_offset + r * stride.pitch, stride.width,
                                        n, stride.pitch, QueueOn(device, reader_), job_.external),
           device);
    }
  }

  void StartPlainCopies(const Staged& st, const Segment& s, unsigned char* dest,
                        CheckedDevice& device) {
    for (uint64_t off = 0; off < s.length && !job_.stop.load(); off += max_copy_) {
      const uint64_t n = std::min(max_copy_, s.length - off);
      Keep(st,
           device.CopyToDeviceAsync(dest + s.tensor_offset + off, st.data + s.chunk_offset + off, n,
                                    QueueOn(device, reader_), job_.external),
           device);
    }
  }

  // Hands the staged bytes to the checksums (once): before any wait of this reader's, as the
  // pieces of a tensor are hashed in order and other readers may wait for this one's.
  void Hash(const Staged& st, const std::shared_ptr<InFlight>& entry, bool* hashing) {
    if (*hashing) return;
    *hashing = true;
    if (job_.checksums && !st.chunk.segments.empty()) {
      job_.checksums->Add(st.chunk, st.data, entry);
    } else {
      entry->hashed.store(true, std::memory_order_release);
    }
  }

  // Destinations when needed: starts the copies whose destinations are known and, while one is
  // missing, asks for it at once (LoadOptions::destination_at_once) or, where the caller would
  // wait, settles everything this reader has in flight (so that every tensor that can land
  // without it is reported before the caller is asked: the caller may wait for those reports
  // to make room) and then asks. False when the load stopped or the caller gave none.
  bool CopyAsDestinationsComeIn(const Staged& st, const std::shared_ptr<InFlight>& entry,
                                bool* hashing) {
    const Chunk& c = st.chunk;
    std::vector<bool> started(c.segments.size(), false);
    for (;;) {
      const bool missing = StartCopies(st, &started);
      // When its copies started: the watchdog measures a reader's wait on them from here (left
      // at 0, a wait while the caller holds the load back would read as a copy decades old).
      entry->submitted_ns = MonotonicNs();
      if (!missing || job_.stop.load()) break;
      const auto first_missing = std::find(started.begin(), started.end(), false) - started.begin();
      const uint32_t tensor = c.segments[static_cast<size_t>(first_missing)].tensor;
      Asked asked;
      {
        const TimeInto waiting(spent_.destination_wait);
        asked = AskAtOnce(job_, tensor);
      }
      if (asked == Asked::kFailed) return false;
      if (asked == Asked::kHave) continue;
      entry->landed.resize(c.segments.size(), false);
      Hash(st, entry, hashing);
      if (!SettleBeforeAsking(*entry)) {
        stopped_ = true;
        return false;
      }
      for (size_t k = 0; k < c.segments.size(); ++k) {
        if (started[k]) Land(job_, *entry, k);
      }
      const TimeInto waiting(spent_.destination_wait);
      if (!(asked == Asked::kMustWait ? AskAndWait(job_, tensor)
                                      : WaitForAnotherReadersAsk(job_, tensor))) {
        return false;
      }
    }
    return true;
  }

  // Before asking for a destination: settles this reader's chunks in flight and the copies
  // of `entry` started so far; false when the load stopped.
  bool SettleBeforeAsking(InFlight& entry) {
    const TimeInto settling(spent_.destination_settle);
    while (!mine_.empty() && WaitUntilDone(job_, me_, *mine_.front())) {
      Retire(job_, *mine_.front());
      mine_.pop_front();
    }
    return mine_.empty() && WaitUntilDone(job_, me_, entry, /*copies_only=*/true);
  }

  // Settles what is still in flight; what cannot be (the load stopped) is left to the
  // tear-down as orphans.
  void Finish() {
    while (!stopped_ && !mine_.empty()) {
      if (!WaitForCopies(*mine_.front())) break;
      Retire(job_, *mine_.front());
      mine_.pop_front();
    }
    if (!mine_.empty()) job_.orphans.Add(mine_);
  }

  // WaitUntilDone, its time counted as waiting on the copies.
  bool WaitForCopies(InFlight& e, bool copies_only = false) {
    const TimeInto waiting(spent_.copy_wait);
    return WaitUntilDone(job_, me_, e, copies_only);
  }

  void AddTimes() {
    ReaderTimes& to = job_.reader_times;
    to.read_ns.fetch_add(spent_.read);
    to.copy_start_ns.fetch_add(spent_.copy_start);
    to.copy_wait_ns.fetch_add(spent_.copy_wait);
    to.buffer_wait_ns.fetch_add(spent_.buffer_wait);
    to.destination_wait_ns.fetch_add(spent_.destination_wait);
    to.destination_settle_ns.fetch_add(spent_.destination_settle);
    to.total_ns.fetch_add(MonotonicNs() - start_ns_);
  }

  LoadJob& job_;
  ReaderState& me_;
  Lane& lane_;
  const int reader_;
  const uint64_t max_copy_;
  std::deque<std::shared_ptr<InFlight>> mine_;  // this reader's chunks in flight, oldest first
  bool stopped_ = false;
  const int64_t start_ns_ = MonotonicNs();
  struct {  // nanoseconds, as in ReaderSeconds
    int64_t read = 0;
    int64_t copy_start = 0;
    int64_t copy_wait = 0;
    int64_t buffer_wait = 0;
    int64_t destination_wait = 0;
    int64_t destination_settle = 0;
  } spent_;
};

}  // namespace

void ReaderLoop(const std::shared_ptr<LoadJob>& job_ptr, int reader) {
  Reader(*job_ptr, reader).Run();
}

}  // namespace hoist
