// A load consumed as a stream: each tensor reported as it lands, destinations handed out by the
// caller as the stream is consumed within a bounded window, without deadlock, stall or loss.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "pipeline/load_checks.h"
#include "pipeline/loader.h"

namespace hoist {
namespace {

using testing::FileBytes;
using testing::MakeDevice;
using testing::Sample;

// A framework's weight loader as hoist.iter_tensors is one: it hands out destinations in file
// order while at most `window` bytes are out (handed out, not yet consumed; one tensor whatever
// its size when none is), and on its own thread consumes each tensor as it is reported: checks
// it byte-exact against the file and frees it.
class WindowedConsumer {
 public:
  WindowedConsumer(const TensorDirectory& dir, std::shared_ptr<CheckedDevice> device,
                   uint64_t window)
      : dir_(dir), device_(std::move(device)), window_(window) {
    for (uint32_t i = 0; i < dir.tensors.size(); ++i) {
      if (dir.tensors[i].nbytes > 0) order_.push_back(i);
    }
    std::sort(order_.begin(), order_.end(), [&](uint32_t a, uint32_t b) {
      const TensorEntry& x = dir.tensors[a];
      const TensorEntry& y = dir.tensors[b];
      return x.file != y.file ? x.file < y.file : x.offset < y.offset;
    });
    consumer_ = std::thread([this] { Consume(); });
  }

  ~WindowedConsumer() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      closing_ = true;
    }
    cv_.notify_all();
    consumer_.join();
    for (auto& [index, p] : out_) (void)device_->FreeDevice(p);
  }

  Result<void*> Destination(size_t index) {
    std::unique_lock<std::mutex> lock(mutex_);
    ++asked_;
    while (out_.count(index) == 0 && given_.count(index) == 0) {
      if (closing_) return Status::Cancelled("the consumer closed");
      const uint32_t next = order_[next_];
      const uint64_t bytes = dir_.tensors[next].nbytes;
      if (out_bytes_ > 0 && out_bytes_ + bytes > window_) {
        cv_.wait_for(lock, std::chrono::milliseconds(20));
        continue;
      }
      HOIST_ASSIGN_OR_RETURN(void* p, device_->AllocateDevice(bytes));
      out_[next] = p;
      out_bytes_ += bytes;
      peak_out_bytes_ = std::max(peak_out_bytes_, out_bytes_);
      ++next_;
    }
    if (given_.count(index) != 0) return Status::Internal("asked twice for one tensor");
    given_.insert(index);
    return out_[index];
  }

  void Landed(size_t index) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      landed_.push_back(index);
      ++reports_[index];
    }
    cv_.notify_all();
  }

  // Waits until every tensor with bytes was consumed; false after `seconds`.
  bool WaitForAll(double seconds) {
    std::unique_lock<std::mutex> lock(mutex_);
    return cv_.wait_for(lock, std::chrono::duration<double>(seconds),
                        [&] { return consumed_ == order_.size(); });
  }

  std::map<size_t, int> reports() {
    std::lock_guard<std::mutex> lock(mutex_);
    return reports_;
  }
  uint64_t peak_out_bytes() const { return peak_out_bytes_; }
  size_t asked() const { return asked_; }
  size_t mismatches() const { return mismatches_; }
  uint64_t largest() const {
    uint64_t largest = 0;
    for (uint32_t i : order_) largest = std::max(largest, dir_.tensors[i].nbytes);
    return largest;
  }

 private:
  void Consume() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      cv_.wait(lock, [&] { return closing_ || !landed_.empty(); });
      if (landed_.empty()) return;
      const size_t index = landed_.front();
      landed_.pop_front();
      void* p = out_.at(index);
      const TensorEntry& t = dir_.tensors[index];
      lock.unlock();
      std::vector<unsigned char> got(t.nbytes);
      const bool copied = device_->CopyToHost(got.data(), p, t.nbytes, true).ok();
      if (!copied || got != FileBytes(dir_, t)) ++mismatches_;
      (void)device_->FreeDevice(p);
      lock.lock();
      out_.erase(index);
      out_bytes_ -= t.nbytes;
      ++consumed_;
      cv_.notify_all();
    }
  }

  const TensorDirectory& dir_;
  std::shared_ptr<CheckedDevice> device_;
  const uint64_t window_;
  std::vector<uint32_t> order_;
  std::mutex mutex_;
  std::condition_variable cv_;
  size_t next_ = 0;  // into order_: the next tensor to hand out
  std::map<size_t, void*> out_;
  std::set<size_t> given_;
  uint64_t out_bytes_ = 0;
  uint64_t peak_out_bytes_ = 0;
  std::deque<size_t> landed_;
  std::map<size_t, int> reports_;
  size_t consumed_ = 0;
  size_t asked_ = 0;
  std::atomic<size_t> mismatches_{0};
  bool closing_ = false;
  std::thread consumer_;
};

class StreamingLoadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SampleSpec spec;
    spec.format = "safetensors";
    spec.shards = 2;
    spec.target_bytes = 12 << 20;
    spec.dtypes = {"BF16", "F32", "I8"};
    dir_ = Sample(tmp_, "model.safetensors.index.json", spec);
    ASSERT_GE(dir_.tensors.size(), 20u);
  }

  // Options that stream through `consumer`, giving up (kCancelled) after a minute rather than
  // hang the suite if the flow control ever deadlocked.
  static LoadOptions Streaming(WindowedConsumer& consumer) {
    LoadOptions o;
    o.destinations_when_needed = true;
    o.destination = [&consumer](size_t i, const TensorEntry&) { return consumer.Destination(i); };
    o.tensor_loaded = [&consumer](size_t i) { consumer.Landed(i); };
    const auto start = std::chrono::steady_clock::now();
    o.progress = [start](const LoadProgress&) {
      return std::chrono::steady_clock::now() - start < std::chrono::minutes(1);
    };
    return o;
  }

  testing::TempDir tmp_;
  TensorDirectory dir_;
};

TEST_F(StreamingLoadTest, EveryTensorIsReportedOnceAfterItsBytesLanded) {
  // Destinations given up front (host memory the test owns): each report is checked against the
  // file's bytes on the reporting thread, at the moment of the report.
  auto device = MakeDevice("host");
  std::vector<std::vector<unsigned char>> memory(dir_.tensors.size());
  std::mutex mutex;
  std::map<size_t, int> reports;
  size_t early = 0;
  LoadOptions o;
  o.threads = 6;
  o.chunk_bytes = 64 << 10;
  o.checksum = true;
  o.destination = [&](size_t i, const TensorEntry& t) -> Result<void*> {
    memory[i].resize(t.nbytes);
    return static_cast<void*>(memory[i].data());
  };
  o.tensor_loaded = [&](size_t i) {
    const bool whole = memory[i] == FileBytes(dir_, dir_.tensors[i]);
    std::lock_guard<std::mutex> lock(mutex);
    ++reports[i];
    if (!whole) ++early;
  };
  auto model = Load(dir_, device, o);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  EXPECT_EQ(early, 0u);
  ASSERT_EQ(reports.size(), dir_.tensors.size());
  for (const auto& [index, count] : reports) EXPECT_EQ(count, 1) << dir_.tensors[index].name;
}

TEST_F(StreamingLoadTest, DestinationsWhenNeededStreamWithinTheWindowByteExact) {
  struct Config {
    const char* device;
    int threads;
    uint64_t chunk;
    uint64_t window;
  };
  // Windows below the largest tensor, and chunks that hold many tensors or a piece of one.
  const Config configs[] = {
      {"sim", 1, 1 << 20, 1},
      {"sim", 8, 64 << 10, 512 << 10},
      {"sim", 4, 4 << 20, 2 << 20},
      {"host", 6, 4096, 256 << 10},
      {"sim:engines=3", 3, 256 << 10, 8 << 20},
  };
  for (const Config& c : configs) {
    SCOPED_TRACE(std::string(c.device) + " threads=" + std::to_string(c.threads) +
                 " chunk=" + std::to_string(c.chunk) + " window=" + std::to_string(c.window));
    auto device = MakeDevice(c.device);
    {
      WindowedConsumer consumer(dir_, device, c.window);
      LoadOptions o = Streaming(consumer);
      o.threads = c.threads;
      o.chunk_bytes = c.chunk;
      o.checksum = true;
      auto model = Load(dir_, device, o);
      ASSERT_TRUE(model.ok()) << model.status().ToString();
      ASSERT_TRUE(consumer.WaitForAll(60));
      EXPECT_EQ(consumer.mismatches(), 0u);
      const auto reports = consumer.reports();
      EXPECT_EQ(reports.size(), dir_.tensors.size());  // the zero-byte ones too
      for (const auto& [index, count] : reports) EXPECT_EQ(count, 1) << dir_.tensors[index].name;
      // Out at once: the window, or one tensor beyond it when a chunk's reader waited with a
      // tensor half landed.
      EXPECT_LE(consumer.peak_out_bytes(),
                std::max(c.window, consumer.largest()) + consumer.largest());
      for (size_t i = 0; i < dir_.tensors.size(); ++i) {
        if (dir_.tensors[i].nbytes > 0) continue;
        EXPECT_EQ((*model)->data(i), nullptr);
      }
    }
    EXPECT_EQ(device->live_device_allocations(), 0u);
    EXPECT_EQ(device->live_pinned_allocations(), 0u);
  }
}

TEST_F(StreamingLoadTest, ACallerHoldingTheLoadBackIsNotAStall) {
  auto device = MakeDevice("sim");
  std::vector<void*> given;
  LoadOptions o;
  o.threads = 4;
  o.chunk_bytes = 64 << 10;
  o.stall_timeout_s = 0.2;
  o.destinations_when_needed = true;
  std::atomic<size_t> asked{0};
  std::mutex mutex;  // the calls come from several readers at once
  o.destination = [&](size_t, const TensorEntry& t) -> Result<void*> {
    // The behaviour under test, not a wait: a caller that takes longer than the stall timeout
    // to give some destinations.
    if (++asked % 7 == 3) std::this_thread::sleep_for(std::chrono::milliseconds(500));
    HOIST_ASSIGN_OR_RETURN(void* p, device->AllocateDevice(t.nbytes));
    std::lock_guard<std::mutex> lock(mutex);
    given.push_back(p);
    return p;
  };
  {
    auto model = Load(dir_, device, o);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    testing::ExpectByteExact(dir_, **model);
  }
  for (void* p : given) ASSERT_TRUE(device->FreeDevice(p).ok());
}

TEST_F(StreamingLoadTest, ADestinationRefusedMidStreamFailsTheLoadAndNamesTheTensor) {
  auto device = MakeDevice("sim");
  std::vector<void*> given;
  LoadOptions o;
  o.threads = 4;
  o.chunk_bytes = 64 << 10;
  o.destinations_when_needed = true;
  std::string refused;
  std::mutex mutex;
  o.destination = [&](size_t, const TensorEntry& t) -> Result<void*> {
    std::lock_guard<std::mutex> lock(mutex);
    if (given.size() == 5 && refused.empty()) {
      refused = t.name;
      return nullptr;
    }
    HOIST_ASSIGN_OR_RETURN(void* p, device->AllocateDevice(t.nbytes));
    given.push_back(p);
    return p;
  };
  auto model = Load(dir_, device, o);
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(model.status().message(), "no destination given for tensor '" + refused + "'");
  for (void* p : given) ASSERT_TRUE(device->FreeDevice(p).ok());
  EXPECT_EQ(device->live_device_allocations(), 0u);
  EXPECT_EQ(device->live_pinned_allocations(), 0u);
}

TEST_F(StreamingLoadTest, CancellingWhileTheCallerHoldsTheLoadBackEndsIt) {
  auto device = MakeDevice("sim");
  std::atomic<bool> cancel{false};
  std::vector<void*> given;
  LoadOptions o;
  o.threads = 4;
  o.chunk_bytes = 64 << 10;
  o.destinations_when_needed = true;
  o.cancel = &cancel;
  std::mutex mutex;
  o.destination = [&](size_t, const TensorEntry& t) -> Result<void*> {
    std::lock_guard<std::mutex> lock(mutex);
    if (given.size() >= 3) {
      cancel.store(true);
      return Status::Cancelled("the consumer went away");
    }
    HOIST_ASSIGN_OR_RETURN(void* p, device->AllocateDevice(t.nbytes));
    given.push_back(p);
    return p;
  };
  auto model = Load(dir_, device, o);
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), Code::kCancelled);
  for (void* p : given) ASSERT_TRUE(device->FreeDevice(p).ok());
  EXPECT_EQ(device->live_pinned_allocations(), 0u);
}

TEST_F(StreamingLoadTest, DestinationsWhenNeededNeedADestinationCallback) {
  LoadOptions o;
  o.destinations_when_needed = true;
  auto model = Load(dir_, MakeDevice("host"), o);
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace hoist
