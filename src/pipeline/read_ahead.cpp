#include "pipeline/read_ahead.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string_view>
#include <utility>

#include "base/threads.h"

namespace hoist {
namespace {

// The read-ahead's first batch, and the largest it grows to while requests land on what it read:
// one load per batch keeps the link busy; the bound keeps a batch's slab reusable.
constexpr uint64_t kFirstBatchBytes = 64ULL << 20;
constexpr uint64_t kLargestBatchBytes = 256ULL << 20;
// Consecutive requests at most this far apart in an order count for it (several threads
// reorder neighbours a little).
constexpr int64_t kOrderStep = 8;
// Requests read on their own run on up to this many threads at once.
constexpr size_t kDemandThreads = 4;

uint64_t Aligned(uint64_t n) {
  return (n + kHostSlabAlignment - 1) / kHostSlabAlignment * kHostSlabAlignment;
}

bool AllDigits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// Numbers compared as numbers, of any length: without leading zeros, the shorter is smaller.
int CompareNumbers(std::string_view a, std::string_view b) {
  a.remove_prefix(std::min(a.find_first_not_of('0'), a.size()));
  b.remove_prefix(std::min(b.find_first_not_of('0'), b.size()));
  if (a.size() != b.size()) return a.size() < b.size() ? -1 : 1;
  return a.compare(b);
}

// One dot-separated part against another: numbers before words, numbers by value.
int CompareParts(std::string_view a, std::string_view b) {
  const bool a_number = AllDigits(a);
  const bool b_number = AllDigits(b);
  if (a_number != b_number) return a_number ? -1 : 1;
  return a_number ? CompareNumbers(a, b) : a.compare(b);
}

std::string_view NextPart(std::string_view& rest) {
  const size_t dot = rest.find('.');
  const std::string_view part = rest.substr(0, dot);
  rest = dot == std::string_view::npos ? std::string_view() : rest.substr(dot + 1);
  return part;
}

}  // namespace

bool NaturalKeyLess(const std::string& a, const std::string& b) {
  std::string_view x = a;
  std::string_view y = b;
  bool x_done = false;
  bool y_done = false;
  while (!x_done && !y_done) {
    x_done = x.find('.') == std::string_view::npos;
    y_done = y.find('.') == std::string_view::npos;
    const int c = CompareParts(NextPart(x), NextPart(y));
    if (c != 0) return c < 0;
  }
  return x_done && !y_done;  // a prefix of parts comes first
}

ReadAhead::ReadAhead(Tensors tensors, ReadBatchFn read, std::shared_ptr<HostSlabPool> pool,
                     bool pinned, uint64_t ahead_bytes)
    : tensors_(std::move(tensors)),
      read_(std::move(read)),
      pool_(std::move(pool)),
      pinned_(pinned),
      ahead_limit_(ahead_bytes),
      batch_(kFirstBatchBytes) {
  const std::vector<std::string>& names = tensors_.names;
  orders_[kOffset] = tensors_.file_order;
  orders_[kNatural] = tensors_.file_order;
  std::stable_sort(orders_[kNatural].begin(), orders_[kNatural].end(),
                   [&](size_t a, size_t b) { return NaturalKeyLess(names[a], names[b]); });
  orders_[kKeys] = tensors_.file_order;
  std::stable_sort(orders_[kKeys].begin(), orders_[kKeys].end(),
                   [&](size_t a, size_t b) { return names[a] < names[b]; });
  for (int o = 0; o < kOrders; ++o) {
    position_[o].assign(names.size(), -1);
    for (size_t at = 0; at < orders_[o].size(); ++at) {
      position_[o][orders_[o][at]] = static_cast<int64_t>(at);
    }
  }
}

Result<std::optional<HostTensor>> ReadAhead::Take(size_t index, double timeout_s) {
  if (index >= tensors_.names.size() || position_[kOffset][index] < 0) {
    return Status::InvalidArgument("tensor " + std::to_string(index) +
                                   " is not one this reader reads");
  }
  MutexLock lock(mutex_);
  if (closed_) return Status::Cancelled("the reader is closed");
  if (asked_.insert(index).second) {  // a new request
    Learn(index);
    if (ready_.count(index) != 0) {
      ++stats_.hits;
    } else if (reading_.count(index) != 0 || demands_.count(index) != 0) {
      ++stats_.waits;
    } else {
      ++stats_.misses;
      taken_.insert(index);
      HOIST_RETURN_IF_ERROR(StartDemand(index));
    }
  }
  const auto wait = std::chrono::duration<double>(std::max(0.0, timeout_s));
  lock.WaitFor(cv_, wait, [&]() HOIST_REQUIRES(mutex_) {
    const auto demand = demands_.find(index);
    return closed_ || ready_.count(index) != 0 ||
           (demand != demands_.end() ? demand->second.done : reading_.count(index) == 0);
  });
  return Serve(index, lock);
}

Result<std::optional<HostTensor>> ReadAhead::Serve(size_t index, MutexLock& /*lock*/) {
  if (const auto it = ready_.find(index); it != ready_.end()) {
    HostTensor tensor = std::move(it->second);
    ready_.erase(it);
    asked_.erase(index);
    ahead_ -= tensors_.nbytes[index];
    batch_ = std::min(2 * batch_, kLargestBatchBytes);
    cv_.notify_all();  // room for the read-ahead
    return std::optional<HostTensor>(std::move(tensor));
  }
  if (const auto it = demands_.find(index); it != demands_.end() && it->second.done) {
    Demand demand = std::move(it->second);
    demands_.erase(it);
    asked_.erase(index);
    if (!demand.status.ok()) {
      taken_.erase(index);  // asked again later, it is read again
      return demand.status;
    }
    return std::move(demand.tensor);
  }
  if (closed_) {
    asked_.erase(index);
    return Status::Cancelled("the reader is closed");
  }
  if (reading_.count(index) == 0 && demands_.count(index) == 0) {
    // The read-ahead's batch that held it failed, or another request took it: read on its own.
    asked_.insert(index);
    ++stats_.misses;
    taken_.insert(index);
    HOIST_RETURN_IF_ERROR(StartDemand(index));
  }
  return std::optional<HostTensor>();
}

Status ReadAhead::StartDemand(size_t index) {
  demands_[index] = Demand{};
  demand_queue_.push_back(index);
  if (demand_queue_.size() > idle_demand_threads_ && demand_threads_.size() < kDemandThreads) {
    HOIST_ASSIGN_OR_RETURN(std::thread thread,
                           StartThread("a reader thread", [this] { RunDemands(); }));
    demand_threads_.push_back(std::move(thread));
  }
  cv_.notify_all();
  return Status::Ok();
}

void ReadAhead::RunDemands() {
  MutexLock lock(mutex_);
  for (;;) {
    ++idle_demand_threads_;
    lock.Wait(cv_, [this]() HOIST_REQUIRES(mutex_) { return closed_ || !demand_queue_.empty(); });
    --idle_demand_threads_;
    if (closed_) return;
    const size_t index = demand_queue_.front();
    demand_queue_.pop_front();
    Result<std::vector<HostTensor>> read = Status::Ok();
    {
      lock.Unlock();
      read = Read({index}, /*read_ahead=*/false);
      lock.Lock();
    }
    Demand& demand = demands_[index];
    demand.done = true;
    if (read.ok()) {
      demand.tensor = std::move(read->front());
    } else {
      demand.status = read.status();
    }
    cv_.notify_all();
  }
}

void ReadAhead::Learn(size_t index) {
  ++requests_;
  if (last_ >= 0) {
    for (int o = 0; o < kOrders; ++o) {
      const int64_t step = position_[o][index] - position_[o][last_];
      if (step != 0 && std::abs(step) <= kOrderStep) ++score_[o];
    }
    // Ties go to the natural order, then the file's.
    Order best = kNatural;
    for (const Order o : {kOffset, kKeys}) {
      if (score_[o] > score_[best]) best = o;
    }
    if (best != order_) {
      order_ = best;
      furthest_ = -1;
    }
  }
  last_ = static_cast<int64_t>(index);
  const int64_t at = position_[order_][index];
  if (at > furthest_) {
    furthest_ = at;
    cursor_ = static_cast<size_t>(at) + 1;
  }
  if (requests_ >= 2 && !read_ahead_started_ && !stopped_) {
    read_ahead_started_ = true;
    Result<std::thread> thread = StartThread("the read-ahead thread", [this] { RunReadAhead(); });
    if (thread.ok()) read_ahead_thread_ = std::move(*thread);  // else: requests read on their own
  }
}

std::vector<size_t> ReadAhead::NextBatch() {
  const std::vector<size_t>& order = orders_[order_];
  const int64_t room = static_cast<int64_t>(ahead_limit_) - static_cast<int64_t>(ahead_);
  const int64_t budget = std::min(static_cast<int64_t>(batch_), room);
  std::vector<size_t> batch;
  int64_t size = 0;
  while (cursor_ < order.size()) {
    const size_t i = order[cursor_];
    if (taken_.count(i) != 0 || ready_.count(i) != 0 || reading_.count(i) != 0) {
      ++cursor_;
      continue;
    }
    const auto n = static_cast<int64_t>(tensors_.nbytes[i]);
    // One tensor larger than the bound is read when nothing else waits.
    if (batch.empty() ? n > room && ahead_ > 0 : size + n > budget) break;
    batch.push_back(i);
    size += n;
    ++cursor_;
  }
  for (const size_t i : batch) reading_.insert(i);
  ahead_ += static_cast<uint64_t>(size);
  return batch;
}

void ReadAhead::RunReadAhead() {
  MutexLock lock(mutex_);
  for (;;) {
    std::vector<size_t> batch;
    lock.Wait(cv_, [&]() HOIST_REQUIRES(mutex_) {
      if (stopped_) return true;
      batch = NextBatch();
      return !batch.empty();
    });
    if (stopped_) return;
    Result<std::vector<HostTensor>> read = Status::Ok();
    {
      lock.Unlock();
      read = Read(batch, /*read_ahead=*/true);
      lock.Lock();
    }
    ++stats_.batches;
    for (size_t k = 0; k < batch.size(); ++k) {
      const size_t i = batch[k];
      reading_.erase(i);
      if (read.ok() && !stopped_) {
        ready_[i] = std::move((*read)[k]);
        stats_.read_bytes += tensors_.nbytes[i];
      } else {
        ahead_ -= tensors_.nbytes[i];
      }
    }
    if (!read.ok()) stopped_ = true;  // reads fail: leave them to the requests
    cv_.notify_all();
  }
}

Result<std::vector<HostTensor>> ReadAhead::Read(const std::vector<size_t>& indices,
                                                bool read_ahead) {
  uint64_t total = 0;
  for (const size_t i : indices) total += Aligned(tensors_.nbytes[i]);
  std::shared_ptr<HostSlab> slab;
  if (total > 0) {
    HOIST_ASSIGN_OR_RETURN(slab, pool_->Take(total, pinned_));
  }
  ReadBatch batch;
  batch.read_ahead = read_ahead;
  batch.cancelled = [this] {
    MutexLock lock(mutex_);
    return closed_;
  };
  std::vector<HostTensor> out;
  uint64_t at = 0;
  for (const size_t i : indices) {
    const uint64_t n = tensors_.nbytes[i];
    void* data = n == 0 ? nullptr : static_cast<char*>(slab->data) + at;
    out.push_back({n == 0 ? nullptr : slab, data, n});
    batch.indices.push_back(i);
    batch.destinations.push_back(data);
    at += Aligned(n);
  }
  HOIST_RETURN_IF_ERROR(read_(batch));
  return out;
}

void ReadAhead::Close() {
  std::thread read_ahead;
  std::vector<std::thread> demands;
  {
    MutexLock lock(mutex_);
    closed_ = true;
    stopped_ = true;
    for (const auto& [index, tensor] : ready_) ahead_ -= tensors_.nbytes[index];
    ready_.clear();
    read_ahead.swap(read_ahead_thread_);
    demands.swap(demand_threads_);
    cv_.notify_all();
  }
  if (read_ahead.joinable()) read_ahead.join();
  for (std::thread& t : demands) t.join();
}

ReadAheadStats ReadAhead::stats() const {
  MutexLock lock(mutex_);
  return stats_;
}

uint64_t ReadAhead::ahead_bytes() const {
  MutexLock lock(mutex_);
  return ahead_;
}

}  // namespace hoist
