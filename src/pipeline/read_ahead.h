// A consumer-ordered reader: whole tensors of one model, read into host memory ahead of the
// requests of any number of threads, each handed over for the caller to keep.
//
// A framework that opens a file with safe_open(device="cpu") asks for its tensors one at a
// time, from several threads (transformers: four workers, in natural key order; vLLM: one
// thread, in keys() order; accelerate's disk offload: one tensor, then close). Rules, each for a
// reason:
// - The first request reads only the tensor asked for: a caller that opens, takes one tensor
//   and closes (accelerate's offload, PEFT) must not pay for a batch it never uses.
// - Read-ahead starts with the second request, in the order that best explains the requests so
//   far (file offsets, names, or natural key order), from the furthest request on; batches grow
//   while requests keep landing on what was read ahead.
// - What is read but not yet asked for is bounded (ahead_bytes); a request outside it is read at
//   once beside the read-ahead, never queued behind it.
// - Tensors handed out are views of slabs of a HostSlabPool, kept alive by the tensor.
// - A batch that fails is not reported by the read-ahead: the request that wanted one of its
//   tensors reads that tensor itself and gets the error with its own file, offset and tensor.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "base/mutex.h"
#include "base/status.h"
#include "pipeline/host_slab_pool.h"

namespace hoist {

// A tensor's bytes in host memory, valid while `slab` lives.
struct HostTensor {
  std::shared_ptr<HostSlab> slab;  // null for a zero-byte tensor
  void* data = nullptr;
  uint64_t nbytes = 0;
};

// One load of whole tensors into host memory: indices[i] lands at destinations[i] (room for its
// bytes). cancelled() turns true once the reader closes; a read may then stop early with an
// error.
struct ReadBatch {
  std::vector<size_t> indices;
  std::vector<void*> destinations;
  bool read_ahead = false;  // the read-ahead's batch, else a request's own read
  std::function<bool()> cancelled;
};
using ReadBatchFn = std::function<Status(const ReadBatch& batch)>;

struct ReadAheadStats {
  uint64_t hits = 0;    // requests served from what was read ahead
  uint64_t waits = 0;   // requests that waited for the read-ahead's batch holding them
  uint64_t misses = 0;  // requests read on their own
  uint64_t batches = 0;
  uint64_t read_bytes = 0;  // read ahead
};

// The orders the read-ahead can follow: names in natural key order (transformers': parts split
// at dots, numbers compared as numbers: "layers.6" before "layers.10").
bool NaturalKeyLess(const std::string& a, const std::string& b);

// Thread safety: every method may be called from any thread.
class ReadAhead {
 public:
  struct Tensors {
    std::vector<std::string> names;  // by directory index
    std::vector<uint64_t> nbytes;    // by directory index
    std::vector<size_t> file_order;  // the indices the reader serves, in file order
  };
  ReadAhead(Tensors tensors, ReadBatchFn read, std::shared_ptr<HostSlabPool> pool, bool pinned,
            uint64_t ahead_bytes);
  ReadAhead(const ReadAhead&) = delete;
  ReadAhead& operator=(const ReadAhead&) = delete;
  ~ReadAhead() { Close(); }

  // Tensor `index`, the caller's to keep, once it has landed; nullopt while it has not within
  // timeout_s (ask again: the read goes on). The read's error when it failed; kCancelled once
  // closed; kInvalidArgument for an index the reader does not serve.
  Result<std::optional<HostTensor>> Take(size_t index, double timeout_s);
  // Stops the read-ahead, drops what it read and waits for the reads in flight (told to stop).
  // Tensors handed out stay valid.
  void Close();
  ReadAheadStats stats() const;
  uint64_t ahead_bytes() const;  // read or being read, not yet asked for

 private:
  enum Order : uint8_t { kOffset, kNatural, kKeys, kOrders };
  struct Demand {  // a request's own read
    bool done = false;
    Status status;
    std::optional<HostTensor> tensor;
  };

  Result<std::optional<HostTensor>> Serve(size_t index, MutexLock& lock) HOIST_REQUIRES(mutex_);
  Status StartDemand(size_t index) HOIST_REQUIRES(mutex_);
  void Learn(size_t index) HOIST_REQUIRES(mutex_);
  std::vector<size_t> NextBatch() HOIST_REQUIRES(mutex_);
  // Reads indices into one slab: the tensors, or the read's error.
  Result<std::vector<HostTensor>> Read(const std::vector<size_t>& indices, bool read_ahead);
  void RunReadAhead();
  void RunDemands();

  const Tensors tensors_;
  const ReadBatchFn read_;
  const std::shared_ptr<HostSlabPool> pool_;
  const bool pinned_;
  const uint64_t ahead_limit_;
  std::vector<size_t> orders_[kOrders];
  std::vector<int64_t> position_[kOrders];  // by directory index; -1: not served

  mutable Mutex mutex_;
  std::condition_variable cv_;
  std::map<size_t, HostTensor> ready_ HOIST_GUARDED_BY(mutex_);  // read, not yet asked for
  std::set<size_t> reading_ HOIST_GUARDED_BY(mutex_);  // in the read-ahead's batch being read
  std::set<size_t> taken_ HOIST_GUARDED_BY(mutex_);    // asked for
  std::set<size_t> asked_ HOIST_GUARDED_BY(mutex_);    // asked for and not yet handed over
  std::map<size_t, Demand> demands_ HOIST_GUARDED_BY(mutex_);
  std::deque<size_t> demand_queue_ HOIST_GUARDED_BY(mutex_);  // requests' reads not started
  size_t idle_demand_threads_ HOIST_GUARDED_BY(mutex_) = 0;
  bool read_ahead_started_ HOIST_GUARDED_BY(mutex_) = false;
  uint64_t ahead_ HOIST_GUARDED_BY(mutex_) = 0;  // bytes in ready_ and reading_
  uint64_t batch_ HOIST_GUARDED_BY(mutex_);
  int64_t last_ HOIST_GUARDED_BY(mutex_) = -1;  // the previous request
  int64_t furthest_ HOIST_GUARDED_BY(mutex_) = -1;
  size_t cursor_ HOIST_GUARDED_BY(mutex_) = 0;
  uint64_t requests_ HOIST_GUARDED_BY(mutex_) = 0;
  Order order_ HOIST_GUARDED_BY(mutex_) = kOffset;
  uint64_t score_[kOrders] HOIST_GUARDED_BY(mutex_) = {};
  bool stopped_ HOIST_GUARDED_BY(mutex_) = false;  // closed, or a read-ahead batch failed
  bool closed_ HOIST_GUARDED_BY(mutex_) = false;
  ReadAheadStats stats_ HOIST_GUARDED_BY(mutex_);
  std::thread read_ahead_thread_ HOIST_GUARDED_BY(mutex_);
  std::vector<std::thread> demand_threads_ HOIST_GUARDED_BY(mutex_);
};

}  // namespace hoist
