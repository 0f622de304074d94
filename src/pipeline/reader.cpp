// The reader threads' loop: the hot path of every load.
#include <algorithm>
#include <deque>
#include <optional>
#include <thread>

#include "pipeline/load_job.h"

namespace hoist {
namespace {

constexpr auto kPoll = std::chrono::milliseconds(50);

// Waits until entry's copies have completed and its bytes are hashed; false when the load
// stopped first. Copies are polled (event queries), never waited on blindly.
bool WaitUntilDone(LoadJob& job, ReaderState& me, InFlight& e) {
  const int64_t start_ns = NowNs();
  for (bool first = true;; first = false) {
    Status failed;
    const bool copied = e.AdvanceCopies(&failed);
    if (!failed.ok()) {
      const Chunk& c = job.plan.chunks[e.chunk];
      job.Fail(failed.WithContext("copying " + job.Where(c) + " to " + job.DeviceName(c)));
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

void Retire(LoadJob& job, Lane& lane, const InFlight& e) {
  const int64_t now = NowNs();
  job.copied_bytes.fetch_add(job.plan.chunks[e.chunk].length);
  job.chunks_done.fetch_add(1);
  job.last_progress_ns.store(now);
  if (lane.chunks_done.fetch_add(1) + 1 == lane.chunks) lane.finished_ns.store(now);
}

}  // namespace

// Each reader reads into its own staging buffers, starts its copies on its own queue, and
// before reusing a buffer waits for the copies that last read from it (KvikIO's and the plain
// staged loop's shape: no thread hands buffers around).
void ReaderLoop(const std::shared_ptr<LoadJob>& job_ptr, int reader) {
  LoadJob& job = *job_ptr;
  ReaderState& me = job.readers[static_cast<size_t>(reader)];
  Lane& lane = *job.lanes[me.lane];
  CheckedDevice& device = *lane.device;
  const int queue = (reader - lane.first_reader) % device.queues();
  const uint64_t max_copy = lane.pool->max_copy_bytes();
  std::deque<std::shared_ptr<InFlight>> mine;  // this reader's chunks in flight, oldest first
  bool stopped = false;
  while (!job.stop.load()) {
    // A buffer: another from the pool while this reader holds fewer than its share (taking
    // none that is not free), else its own whose copies started longest ago.
    std::optional<StagingBuffer> buffer;
    if (mine.size() < lane.buffers_per_reader) {
      buffer = lane.pool->Acquire(mine.empty() ? kPoll : std::chrono::milliseconds(0));
    }
    if (!buffer) {
      if (mine.empty()) continue;
      if (!WaitUntilDone(job, me, *mine.front())) {
        stopped = true;
        break;
      }
      Retire(job, lane, *mine.front());
      buffer = std::move(mine.front()->buffer);
      mine.pop_front();
    }
    const size_t index = lane.next_chunk.fetch_add(1);
    if (index >= lane.end_chunk) break;
    const Chunk& c = job.plan.chunks[index];
    me.since_ns.store(NowNs());
    me.chunk.store(static_cast<int64_t>(index));
    auto data = job.files[c.file]->ReadCovering(c.offset, buffer->data(), c.length);
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
        auto copy =
            device.CopyToDeviceAsync(job.dest[s.tensor] + s.tensor_offset + off,
                                     data.value() + s.chunk_offset + off, n, queue, job.external);
        if (!copy.ok()) {
          job.Fail(copy.status().WithContext("copying " + job.Where(c) + " to " + device.name()));
        } else {
          entry->copies.push_back(std::move(copy).value());
        }
      }
    }
    entry->submitted_ns = NowNs();
    mine.push_back(entry);
    if (job.stop.load()) break;
    if (job.checksums && !c.segments.empty()) {
      job.checksums->Add(c, data.value(), entry);
    } else {
      entry->hashed.store(true, std::memory_order_release);
    }
  }
  while (!stopped && !mine.empty()) {
    if (!WaitUntilDone(job, me, *mine.front())) break;
    Retire(job, lane, *mine.front());
    mine.pop_front();
  }
  if (!mine.empty()) {
    std::lock_guard<std::mutex> lock(job.orphans_mutex);
    job.orphans.insert(job.orphans.end(), mine.begin(), mine.end());
  }
}

}  // namespace hoist
