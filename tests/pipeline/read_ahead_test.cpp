// The consumer-ordered reader (pipeline/read_ahead.h) against a fake read: the first request
// reads one tensor, the order is learnt from the requests, what is read ahead stays within its
// bound, a request outside it is read at once beside the read-ahead, a failed batch is reported
// by the request that wants it, eight threads share one reader; and the slab pool's bound.
#include "pipeline/read_ahead.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "pipeline/host_slab_pool.h"

namespace hoist {
namespace {

using std::chrono::milliseconds;

// Records each batch and fills each tensor with the length of its name.
class FakeRead {
 public:
  FakeRead(const std::vector<std::string>& names, int delay_ms = 0, std::set<size_t> fail = {})
      : names_(names), delay_ms_(delay_ms), fail_(std::move(fail)) {}

  ReadBatchFn Fn(const std::vector<uint64_t>& nbytes) {
    return [this, nbytes](const ReadBatch& batch) {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        batches_.push_back({batch.read_ahead, batch.indices});
      }
      if (delay_ms_ > 0) std::this_thread::sleep_for(milliseconds(delay_ms_));
      for (const size_t i : batch.indices) {
        if (fail_.count(i) != 0) return Status::IoError("cannot read " + names_[i]);
      }
      for (size_t k = 0; k < batch.indices.size(); ++k) {
        const size_t i = batch.indices[k];
        std::memset(batch.destinations[k], static_cast<int>(names_[i].size()), nbytes[i]);
      }
      return Status::Ok();
    };
  }
  std::vector<std::pair<bool, std::vector<size_t>>> batches() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return batches_;
  }
  std::vector<size_t> ReadAheadIndices() const {
    std::vector<size_t> out;
    for (const auto& [ahead, batch] : batches()) {
      if (ahead) out.insert(out.end(), batch.begin(), batch.end());
    }
    return out;
  }

 private:
  const std::vector<std::string> names_;
  const int delay_ms_;
  const std::set<size_t> fail_;
  mutable std::mutex mutex_;
  std::vector<std::pair<bool, std::vector<size_t>>> batches_;
};

std::vector<std::string> LayerNames(int layers) {
  std::vector<std::string> names = {"lm_head.weight", "model.embed_tokens.weight",
                                    "model.norm.weight"};
  for (int i = 0; i < layers; ++i) {
    for (const char* part :
         {"input_layernorm", "self_attn.q_proj", "self_attn.k_proj", "mlp.up_proj"}) {
      std::string name = "model.layers.";
      name.append(std::to_string(i)).append(".").append(part).append(".weight");
      names.push_back(name);
    }
  }
  return names;
}

std::vector<std::string> Numbered(const char* prefix, int n) {
  std::vector<std::string> names;
  for (int i = 0; i < n; ++i) {
    char name[16];
    std::snprintf(name, sizeof name, "%s%03d", prefix, i);
    names.emplace_back(name);
  }
  return names;
}

struct Fixture {
  // names in file order, each tensor `nbytes` large.
  Fixture(std::vector<std::string> file_order_names, uint64_t ahead, int delay_ms = 0,
          std::set<size_t> fail = {}, uint64_t nbytes = 1 << 20)
      : names(std::move(file_order_names)), read(names, delay_ms, std::move(fail)) {
    ReadAhead::Tensors t;
    t.names = names;
    t.nbytes.assign(names.size(), nbytes);
    for (size_t i = 0; i < names.size(); ++i) t.file_order.push_back(i);
    reader = std::make_unique<ReadAhead>(t, read.Fn(t.nbytes), HostSlabPool::Create({}, 0), false,
                                         ahead);
  }
  size_t Index(const std::string& name) const {
    return static_cast<size_t>(std::find(names.begin(), names.end(), name) - names.begin());
  }
  // Tensor `name` (waiting for it), checked to hold what the fake read wrote.
  Status Get(const std::string& name) {
    for (int tries = 0; tries < 100; ++tries) {
      Result<std::optional<HostTensor>> got = reader->Take(Index(name), 1.0);
      if (!got.ok()) return got.status();
      if (!got->has_value()) continue;
      const auto* bytes = static_cast<const unsigned char*>((**got).data);
      if ((**got).nbytes == 0 || bytes[0] != name.size() ||
          bytes[(**got).nbytes - 1] != name.size()) {
        return Status::Internal("wrong bytes for " + name);
      }
      return Status::Ok();
    }
    return Status::Stalled(name + " never landed");
  }

  std::vector<std::string> names;
  FakeRead read;
  std::unique_ptr<ReadAhead> reader;
};

bool WaitFor(const std::function<bool()>& condition) {
  for (int i = 0; i < 1000 && !condition(); ++i) std::this_thread::sleep_for(milliseconds(10));
  return condition();
}

TEST(NaturalKeyTest, NumbersCompareAsNumbersAndPrefixesComeFirst) {
  EXPECT_TRUE(NaturalKeyLess("layers.6.w", "layers.10.w"));
  EXPECT_FALSE(NaturalKeyLess("layers.10.w", "layers.6.w"));
  EXPECT_TRUE(NaturalKeyLess("layers.1", "layers.1.w"));
  EXPECT_TRUE(NaturalKeyLess("a.2", "a.b"));  // numbers before words
  EXPECT_FALSE(NaturalKeyLess("a.007", "a.7"));
  EXPECT_FALSE(NaturalKeyLess("a.7", "a.007"));
  EXPECT_TRUE(NaturalKeyLess("a.99999999999999999999", "a.100000000000000000000"));
}

TEST(ReadAheadTest, TheFirstRequestReadsOnlyItsTensor) {
  std::vector<std::string> names = LayerNames(4);
  std::sort(names.begin(), names.end());  // file order: lexicographic
  Fixture f(names, 8 << 20);
  ASSERT_TRUE(f.Get("model.layers.2.mlp.up_proj.weight").ok());
  f.reader->Close();  // an open, one tensor, a close: accelerate's disk offload
  const auto batches = f.read.batches();
  ASSERT_EQ(batches.size(), 1U);
  EXPECT_FALSE(batches[0].first);
  EXPECT_EQ(batches[0].second, std::vector<size_t>{f.Index("model.layers.2.mlp.up_proj.weight")});
}

TEST(ReadAheadTest, NaturalOrderIsLearntAndReadAheadInIt) {
  std::vector<std::string> names = LayerNames(12);
  std::sort(names.begin(), names.end());  // "layers.10" before "layers.2" in the file
  std::vector<std::string> natural = names;
  std::stable_sort(natural.begin(), natural.end(), NaturalKeyLess);
  Fixture f(names, 6 << 20, /*delay_ms=*/1);
  for (const std::string& name : natural) {
    std::this_thread::sleep_for(milliseconds(4));  // the consumer's own work between requests
    ASSERT_TRUE(f.Get(name).ok()) << name;
  }
  const std::vector<size_t> ahead = f.read.ReadAheadIndices();
  EXPECT_GT(ahead.size(), names.size() / 2);  // most came from the read-ahead
  // Read ahead in natural order: each batch follows the requests, never the file order.
  std::vector<size_t> natural_ahead;
  for (const std::string& n : natural) {
    if (std::count(ahead.begin(), ahead.end(), f.Index(n)) != 0)
      natural_ahead.push_back(f.Index(n));
  }
  EXPECT_EQ(ahead, natural_ahead);
  const ReadAheadStats s = f.reader->stats();
  EXPECT_EQ(s.hits + s.waits + s.misses, names.size());
}

TEST(ReadAheadTest, WhatIsReadAheadStaysWithinTheBound) {
  Fixture f(Numbered("t", 64), 5 << 20, /*delay_ms=*/2);
  ASSERT_TRUE(f.Get("t000").ok());
  ASSERT_TRUE(f.Get("t001").ok());
  // The consumer stops asking: the window fills to its bound and stays there.
  ASSERT_TRUE(WaitFor([&] { return f.reader->ahead_bytes() >= 5 << 20; }));
  std::this_thread::sleep_for(milliseconds(300));
  EXPECT_EQ(f.reader->ahead_bytes(), 5U << 20);
  EXPECT_EQ(f.read.ReadAheadIndices().size(), 5U);
  ASSERT_TRUE(f.Get("t002").ok());  // one taken: room for one more
  EXPECT_TRUE(WaitFor([&] { return f.read.ReadAheadIndices().size() == 6; }));
}

TEST(ReadAheadTest, ARequestOutsideTheWindowIsReadAtOnceBesideTheReadAhead) {
  Fixture f(Numbered("t", 40), 4 << 20, /*delay_ms=*/50);
  ASSERT_TRUE(f.Get("t000").ok());
  ASSERT_TRUE(f.Get("t001").ok());
  ASSERT_TRUE(f.Get("t030").ok());  // a jump: not waited for behind the read-ahead
  const auto batches = f.read.batches();
  EXPECT_NE(
      std::find(batches.begin(), batches.end(), std::make_pair(false, std::vector<size_t>{30})),
      batches.end());
  const std::vector<size_t> ahead = f.read.ReadAheadIndices();
  EXPECT_EQ(std::count(ahead.begin(), ahead.end(), 30U), 0);
}

TEST(ReadAheadTest, AFailedBatchIsReportedByTheRequestThatWantsIt) {
  std::vector<std::string> names = {"t0", "t1", "t2", "t3", "t4", "t5", "t6", "t7"};
  Fixture f(names, 8 << 20, 0, {4});
  ASSERT_TRUE(f.Get("t0").ok());
  ASSERT_TRUE(f.Get("t1").ok());
  // The batch with t4 fails: nothing more is read ahead.
  ASSERT_TRUE(
      WaitFor([&] { return f.reader->stats().batches >= 1 && f.reader->ahead_bytes() == 0; }));
  EXPECT_TRUE(f.Get("t2").ok());
  const Status failed = f.Get("t4");  // read again on its own: its own error
  EXPECT_EQ(failed.code(), Code::kIoError);
  EXPECT_EQ(failed.message(), "cannot read t4");
  EXPECT_TRUE(f.Get("t5").ok());
  EXPECT_EQ(f.Get("t4").code(), Code::kIoError);  // asked again, read again
}

TEST(ReadAheadTest, EightThreadsShareOneReaderAndEachTensorIsReadOnce) {
  Fixture f(Numbered("w", 200), 16 << 20);
  std::vector<std::string> order = f.names;
  std::shuffle(order.begin(), order.end(), std::mt19937(4));
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  for (size_t t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (size_t i = t; i < order.size(); i += 8) {
        if (!f.Get(order[i]).ok()) ++errors;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(errors.load(), 0);
  std::vector<size_t> read;
  for (const auto& [ahead, batch] : f.read.batches())
    read.insert(read.end(), batch.begin(), batch.end());
  std::sort(read.begin(), read.end());
  std::vector<size_t> all(f.names.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  EXPECT_EQ(read, all);  // each read exactly once
}

TEST(ReadAheadTest, ClosedRefusesAndUnknownIndicesAreInvalid) {
  Fixture f(Numbered("t", 4), 8 << 20);
  EXPECT_EQ(f.reader->Take(9, 0).status().code(), Code::kInvalidArgument);
  f.reader->Close();
  EXPECT_EQ(f.reader->Take(0, 0).status().code(), Code::kCancelled);
}

// A pinned source that counts what it pins.
struct CountingPins {
  std::vector<uint64_t> pinned;
  int freed = 0;
  PinnedMemorySource Source() {
    return {[this](uint64_t bytes) -> Result<void*> {
              pinned.push_back(bytes);
              return ::operator new(bytes);
            },
            [this](void* p, uint64_t) {
              ++freed;
              ::operator delete(p);
            }};
  }
};

TEST(HostSlabPoolTest, SlabsArePinnedOnceAndReusedAfterEveryViewIsFreed) {
  CountingPins pins;
  auto pool = HostSlabPool::Create(pins.Source(), 3 * kHostSlabBytes);
  Result<std::shared_ptr<HostSlab>> first = pool->Take(1000, true);
  ASSERT_TRUE(first.ok());
  EXPECT_TRUE((*first)->pinned);
  void* data = (*first)->data;
  std::shared_ptr<HostSlab> view = *first;  // a second tensor of the same batch
  first = Status::Cancelled("dropped");
  EXPECT_EQ(pool->pinned_bytes(), kHostSlabBytes);
  Result<std::shared_ptr<HostSlab>> other = pool->Take(10, true);  // the first is still viewed
  ASSERT_TRUE(other.ok());
  EXPECT_NE((*other)->data, data);
  view.reset();
  Result<std::shared_ptr<HostSlab>> again = pool->Take(10, true);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)->data, data);  // reused, not pinned again
  EXPECT_EQ(pins.pinned, (std::vector<uint64_t>{kHostSlabBytes, kHostSlabBytes}));
  again = Status::Cancelled("dropped");
  other = Status::Cancelled("dropped");
  pool->Release();
  EXPECT_EQ(pins.freed, 2);
  EXPECT_EQ(pool->pinned_bytes(), 0U);
}

TEST(HostSlabPoolTest, PastTheBoundSlabsArePageable) {
  CountingPins pins;
  auto pool = HostSlabPool::Create(pins.Source(), 2 * kHostSlabBytes);
  Result<std::shared_ptr<HostSlab>> big = pool->Take(kHostSlabBytes + 1, true);  // two slabs' worth
  ASSERT_TRUE(big.ok());
  EXPECT_TRUE((*big)->pinned);
  EXPECT_EQ((*big)->bytes, 2 * kHostSlabBytes);
  Result<std::shared_ptr<HostSlab>> past = pool->Take(10, true);
  ASSERT_TRUE(past.ok());
  EXPECT_FALSE((*past)->pinned);
  Result<std::shared_ptr<HostSlab>> unasked = pool->Take(10, false);
  ASSERT_TRUE(unasked.ok());
  EXPECT_FALSE((*unasked)->pinned);
  EXPECT_EQ(pins.pinned.size(), 1U);
}

}  // namespace
}  // namespace hoist
