#include "pipeline/loader.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <ostream>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "base/checksum.h"
#include "base/units.h"
#include "device/checked_device.h"
#include "format/model.h"
#include "format/sample_model.h"
#include "io/fault_injection_file.h"
#include "pipeline/load_checks.h"
#include "plan/placement/replicate.h"
#include "plan/placement/tensor.h"
#include "test_util.h"

namespace hoist {
namespace {

using Clock = std::chrono::steady_clock;
using testing::ExpectByteExact;
using testing::MakeDevice;
using testing::Sample;

double SecondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

TEST(LoaderTest, CorpusLoadsByteExactWithReferenceChecksums) {
  std::ifstream in(testing::CorpusDir() + "/reference.json");
  const nlohmann::json reference = nlohmann::json::parse(in);
  for (const std::string device : {"host", "sim"}) {
    for (const auto& [relative, expected] : reference.items()) {
      SCOPED_TRACE(device + " " + relative);
      auto dir = ReadModelDirectory(testing::CorpusDir() + "/" + relative);
      ASSERT_TRUE(dir.ok());
      LoadOptions o;
      o.checksum = true;
      auto model = Load(*dir, MakeDevice(device), o);
      ASSERT_TRUE(model.ok()) << model.status().ToString();
      ExpectByteExact(*dir, **model);
      for (const auto& t : expected["tensors"]) {
        const TensorEntry* e = dir->Find(t["name"].get<std::string>());
        const size_t i = static_cast<size_t>(e - dir->tensors.data());
        EXPECT_EQ(HexDigest((*model)->checksums()[i]), t["xxh3"].get<std::string>());
      }
    }
  }
}

// Mixed-dtype models loaded across reader counts, chunk sizes and staging budgets, byte-exact.
// One test per model, device and configuration, so that ctest runs them side by side.
struct SweepConfig {
  const char* name;
  int threads;
  uint64_t chunk;
  uint64_t staging;
};
constexpr SweepConfig kSweepConfigs[] = {
    {"OneReader", 1, 8 << 20, 256 << 20},
    {"ManyReaders", 8, 8 << 20, 256 << 20},
    {"TinyChunks", 4, 4096, 64 << 10},
    {"ChunksLargerThanAnyTensor", 4, 64 << 20, 256 << 20},
    {"ABudgetSmallerThanOneTensor", 3, 1 << 20, 1 << 20},
    {"TheDefaultBudget", 6, 1 << 20, 0},  // two chunks per reader
};

// How ctest's test names show a configuration.
void PrintTo(const SweepConfig& c, std::ostream* os) { *os << c.name; }

using SweepParam = std::tuple<std::string /*format*/, std::string /*device*/, SweepConfig>;

class MixedDtypeSweep : public ::testing::TestWithParam<SweepParam> {};

TEST_P(MixedDtypeSweep, LoadsByteExactWithinItsStagingBudget) {
  const auto& [format, device, c] = GetParam();
  testing::TempDir tmp;
  SampleSpec spec;
  spec.target_bytes = 24 << 20;
  std::string name = "m.gguf";
  if (format == "gguf") {
    spec.dtypes = {"F16", "Q8_0", "Q4_K", "BF16", "IQ2_XXS", "F32"};
  } else {
    spec.format = "safetensors";
    spec.shards = 3;
    spec.dtypes = {"BF16", "F32", "F8_E4M3", "I8"};
    name = "model.safetensors.index.json";
  }
  const TensorDirectory dir = Sample(tmp, name, spec);
  ASSERT_GT(dir.tensors.size(), 20u);
  LoadOptions o;
  o.threads = c.threads;
  o.chunk_bytes = c.chunk;
  o.staging_bytes = c.staging;
  o.checksum = true;
  auto d = MakeDevice(device);
  auto model = Load(dir, d, o);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  const uint64_t budget = c.staging != 0 ? c.staging : DefaultStagingBytes(c.threads, c.chunk);
  EXPECT_LE((*model)->report.staging_buffer_bytes * (*model)->report.staging_buffers,
            std::max<uint64_t>(budget, 2 * 4096));
  EXPECT_EQ(d->live_pinned_allocations(), 0u);  // the staging pool is gone
  ExpectByteExact(dir, **model);
}

INSTANTIATE_TEST_SUITE_P(Loader, MixedDtypeSweep,
                         ::testing::Combine(::testing::Values("gguf", "safetensors"),
                                            ::testing::Values("host", "sim"),
                                            ::testing::ValuesIn(kSweepConfigs)),
                         [](const ::testing::TestParamInfo<SweepParam>& info) {
                           return std::string(std::get<0>(info.param)) + "_" +
                                  std::get<1>(info.param) + "_" + std::get<2>(info.param).name;
                         });

TEST(LoaderTest, LargeModelLoadsByteExactOnSim) {
  const char* env = std::getenv("HOIST_TEST_LARGE_MIB");
  const uint64_t mib = env != nullptr ? std::strtoull(env, nullptr, 10) : 1536;
  testing::TempDir tmp;
  SampleSpec spec;
  spec.target_bytes = mib << 20;
  spec.dtypes = {"F16", "Q4_K", "BF16", "Q8_0"};
  TensorDirectory dir = Sample(tmp, "big.gguf", spec);
  ASSERT_GE(dir.total_bytes(), (mib << 20) * 9 / 10);
  LoadOptions o;
  o.checksum = true;
  o.staging_bytes = 64 << 20;
  auto model = Load(dir, MakeDevice("sim:bandwidth=50GB/s,engines=2"), o);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  ExpectByteExact(dir, **model);
}

// Each reader's steps are apart in time, so the parts add up to at most the readers' lifetimes.
void ExpectReaderSecondsAddUp(const ReaderSeconds& r) {
  EXPECT_GT(r.total, 0.0);
  EXPECT_GT(r.read, 0.0);
  EXPECT_LE(r.read + r.copy_start + r.copy_wait + r.buffer_wait + r.destination_wait +
                r.destination_settle,
            r.total);
}

TEST(LoaderTest, TheReportSaysWhereTheReadersTimeWent) {
  testing::TempDir tmp;
  SampleSpec spec;
  spec.target_bytes = 16 << 20;
  TensorDirectory dir = Sample(tmp, "m.gguf", spec);
  LoadOptions o;
  o.threads = 2;
  o.chunk_bytes = 1 << 20;
  o.staging_bytes = 4 << 20;
  // A link at 0.2 GB/s: at least 80 ms of copies, which the readers wait on.
  auto slow = Load(dir, MakeDevice("sim:bandwidth=0.2GB/s"), o);
  ASSERT_TRUE(slow.ok()) << slow.status().ToString();
  const ReaderSeconds& r = (*slow)->report.readers;
  ExpectReaderSecondsAddUp(r);
  EXPECT_GT(r.copy_wait + r.buffer_wait, 0.06);
  EXPECT_EQ(r.destination_wait, 0.0);
  EXPECT_EQ(r.destination_settle, 0.0);

  // A caller that takes 10 ms to give each destination: the readers wait at least that long
  // for each tensor (each is asked for once).
  auto device = MakeDevice("sim");
  std::mutex mutex;  // the readers ask for several tensors at once
  std::vector<void*> given;
  o.destinations_when_needed = true;
  o.destination = [&](size_t, const TensorEntry& t) -> Result<void*> {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    HOIST_ASSIGN_OR_RETURN(void* p, device->AllocateDevice(t.nbytes));
    const std::lock_guard<std::mutex> lock(mutex);
    given.push_back(p);
    return p;
  };
  {
    auto held_back = Load(dir, device, o);
    ASSERT_TRUE(held_back.ok()) << held_back.status().ToString();
    ExpectByteExact(dir, **held_back);
    ExpectReaderSecondsAddUp((*held_back)->report.readers);
    const auto asked = std::count_if(dir.tensors.begin(), dir.tensors.end(),
                                     [](const TensorEntry& t) { return t.nbytes > 0; });
    EXPECT_GE((*held_back)->report.readers.destination_wait, 0.01 * static_cast<double>(asked));
  }
  for (void* p : given) ASSERT_TRUE(device->FreeDevice(p).ok());
}

// A caller with room at once is asked without the reader settling its copies first; the
// tensors it has no room for at once are asked for again, once, by the call that may wait.
TEST(LoaderTest, DestinationsGivenAtOnceAreTakenWithoutSettling) {
  testing::TempDir tmp;
  SampleSpec spec;
  spec.target_bytes = 8 << 20;
  TensorDirectory dir = Sample(tmp, "m.gguf", spec);
  auto device = MakeDevice("sim");
  std::mutex mutex;
  std::vector<void*> given;
  std::vector<int> at_once_asks(dir.tensors.size(), 0);
  std::vector<int> waiting_asks(dir.tensors.size(), 0);
  auto give = [&](const TensorEntry& t) -> Result<void*> {
    HOIST_ASSIGN_OR_RETURN(void* p, device->AllocateDevice(t.nbytes));
    given.push_back(p);
    return p;
  };
  for (const bool every_one_at_once : {true, false}) {
    SCOPED_TRACE(every_one_at_once ? "every one at once" : "the odd ones after waiting");
    std::fill(at_once_asks.begin(), at_once_asks.end(), 0);
    std::fill(waiting_asks.begin(), waiting_asks.end(), 0);
    LoadOptions o;
    o.threads = 3;
    o.chunk_bytes = 256 << 10;
    o.destinations_when_needed = true;
    o.destination_at_once = [&](size_t i, const TensorEntry& t) -> Result<void*> {
      const std::lock_guard<std::mutex> lock(mutex);
      ++at_once_asks[i];
      if (!every_one_at_once && i % 2 == 1) return nullptr;
      return give(t);
    };
    o.destination = [&](size_t i, const TensorEntry& t) -> Result<void*> {
      const std::lock_guard<std::mutex> lock(mutex);
      ++waiting_asks[i];
      return give(t);
    };
    auto model = Load(dir, device, o);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    ExpectByteExact(dir, **model);
    for (size_t i = 0; i < dir.tensors.size(); ++i) {
      const bool asked = dir.tensors[i].nbytes > 0;
      EXPECT_EQ(at_once_asks[i], asked ? 1 : 0) << dir.tensors[i].name;
      EXPECT_EQ(waiting_asks[i], asked && !every_one_at_once && i % 2 == 1 ? 1 : 0)
          << dir.tensors[i].name;
    }
    if (every_one_at_once) {
      EXPECT_EQ((*model)->report.readers.destination_settle, 0.0);
    }
  }
  for (void* p : given) ASSERT_TRUE(device->FreeDevice(p).ok());
}

TEST(LoaderTest, CallerProvidedDestinationsAreFilledAndNotFreed) {
  testing::TempDir tmp;
  SampleSpec spec;
  spec.target_bytes = 4 << 20;
  TensorDirectory dir = Sample(tmp, "m.gguf", spec);
  auto device = MakeDevice("sim");
  std::vector<void*> mine;
  LoadOptions o;
  o.checksum = true;
  o.destination = [&](size_t, const TensorEntry& t) -> Result<void*> {
    HOIST_ASSIGN_OR_RETURN(void* p, device->AllocateDevice(t.nbytes));
    mine.push_back(p);
    return p;
  };
  {
    auto model = Load(dir, device, o);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    ExpectByteExact(dir, **model);
  }
  EXPECT_EQ(device->live_device_allocations(), mine.size());
  for (void* p : mine) ASSERT_TRUE(device->FreeDevice(p).ok());
}

TEST(LoaderTest, LoadsASubsetByName) {
  testing::TempDir tmp;
  SampleSpec spec;
  spec.target_bytes = 2 << 20;
  TensorDirectory dir = Sample(tmp, "m.gguf", spec);
  LoadOptions o;
  o.names = {"output.weight", "blk.0.attn_q.weight"};
  auto model = Load(dir, MakeDevice("host"), o);
  ASSERT_TRUE(model.ok());
  EXPECT_EQ((*model)->report.tensors, 2u);
  EXPECT_TRUE((*model)->loaded(dir.Find("output.weight") - dir.tensors.data()));
  EXPECT_FALSE((*model)->loaded(0));
  ExpectByteExact(dir, **model);
  o.names = {"nope"};
  EXPECT_EQ(Load(dir, MakeDevice("host"), o).status().code(), Code::kNotFound);
}

TEST(LoaderTest, DirectIoLoadsByteExactOrFallsBackSaying) {
  testing::TempDir tmp;
  SampleSpec spec;
  spec.target_bytes = 8 << 20;
  spec.format = "safetensors";  // unaligned offsets exercise the aligned reads
  TensorDirectory dir = Sample(tmp, "m.safetensors", spec);
  LoadOptions o;
  o.io = IoMode::kDirect;
  o.chunk_bytes = 1 << 20;
  auto model = Load(dir, MakeDevice("sim"), o);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  ExpectByteExact(dir, **model);
}

// Found by the options fuzzer: with direct I/O, a staging budget too small for one chunk and
// its read slack cut the chunk size below zero (an unsigned wrap). The budget is raised to two
// minimal buffers instead, and the load is byte-exact.
TEST(LoaderTest, DirectIoWithATinyStagingBudgetLoadsByteExact) {
  testing::TempDir tmp;
  SampleSpec spec;
  spec.target_bytes = 1 << 20;
  const TensorDirectory dir = Sample(tmp, "m.gguf", spec);
  for (const uint64_t staging : {uint64_t{1}, uint64_t{256}, uint64_t{12288}}) {
    LoadOptions o;
    o.io = IoMode::kDirect;
    o.threads = 8;
    o.chunk_bytes = 65435;
    o.staging_bytes = staging;
    o.checksum = true;
    auto model = Load(dir, MakeDevice("sim"), o);
    ASSERT_TRUE(model.ok()) << staging << ": " << model.status().ToString();
    EXPECT_GE((*model)->report.chunk_bytes, kMinChunkBytes);
    ExpectByteExact(dir, **model);
  }
}

// The fault matrix on sim: every fault ends in success or a clear error, within a bound.
class FaultTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SampleSpec spec;
    spec.target_bytes = 16 << 20;
    dir_ = Sample(tmp_, "m.gguf", spec);
  }
  testing::TempDir tmp_;
  TensorDirectory dir_;
};

TEST_F(FaultTest, StallAfterFailsNamingTheDeviceCopyStage) {
  auto device = MakeDevice("sim:stall_after=4MiB");
  LoadOptions o;
  o.stall_timeout_s = 1;
  const auto start = Clock::now();
  auto model = Load(dir_, device, o);
  const double s = SecondsSince(start);
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), Code::kStalled);
  EXPECT_NE(model.status().message().find("device copy stage on sim: chunk " + dir_.files[0].path +
                                          " at byte"),
            std::string::npos)
      << model.status().message();
  EXPECT_LT(s, testing::TimeBound(1 + 2.0));
  EXPECT_EQ(device->live_device_allocations(), 0u);
  EXPECT_EQ(device->live_pinned_allocations(), 0u);
}

TEST_F(FaultTest, FailCopyAfterIsADeviceErrorWithNothingLeftAllocated) {
  auto device = MakeDevice("sim:fail_copy_after=5MiB");
  auto model = Load(dir_, device, LoadOptions{});
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), Code::kDeviceError);
  EXPECT_NE(model.status().message().find("fail_copy_after"), std::string::npos);
  EXPECT_NE(model.status().message().find("copying " + dir_.files[0].path + " at byte"),
            std::string::npos)
      << model.status().message();
  EXPECT_EQ(device->live_device_allocations(), 0u);
  EXPECT_EQ(device->live_pinned_allocations(), 0u);
}

TEST_F(FaultTest, NoPinnedMemoryStagesInPageableMemoryWithAWarning) {
  auto model = Load(dir_, MakeDevice("sim:pinned_limit=0"), LoadOptions{});
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  EXPECT_FALSE((*model)->report.pinned_staging);
  ASSERT_FALSE((*model)->report.fallbacks.empty());
  EXPECT_NE((*model)->report.fallbacks.back().find("no pinned memory"), std::string::npos);
  ExpectByteExact(dir_, **model);
}

TEST_F(FaultTest, SomePinnedMemoryRetriesSmallerBuffers) {
  LoadOptions o;
  o.staging_bytes = 64 << 20;
  auto model = Load(dir_, MakeDevice("sim:pinned_limit=6MiB"), o);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  EXPECT_TRUE((*model)->report.pinned_staging);
  EXPECT_LE((*model)->report.staging_buffer_bytes * (*model)->report.staging_buffers, 6u << 20);
  EXPECT_FALSE((*model)->report.fallbacks.empty());
  ExpectByteExact(dir_, **model);
}

TEST_F(FaultTest, NoPinnedMemoryOnADeviceThatRejectsPageableCopiesNeverHangs) {
  LoadOptions o;
  o.stall_timeout_s = 2;
  const auto start = Clock::now();
  auto model = Load(dir_, MakeDevice("sim:pinned_limit=0,reject_pageable=1"), o);
  EXPECT_LT(SecondsSince(start), testing::TimeBound(2 + 2.0));
  // hoist keeps pageable copies below the size that hangs, so the load completes.
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  ExpectByteExact(dir_, **model);
}

// dir, read through storage whose files all inject plan's faults (held reads wait on
// plan.gate, which the test keeps).
TensorDirectory WithFaults(const TensorDirectory& dir, const FaultPlan& plan) {
  TensorDirectory faulty = dir;
  faulty.storage = std::make_shared<FaultInjectionStorage>(LocalStorage(), plan);
  return faulty;
}

TEST_F(FaultTest, ShortReadsAndInterruptsStillLoadByteExact) {
  FaultPlan plan;
  plan.short_read_max = 65536 + 3;
  plan.interrupt_every = 5;
  LoadOptions o;
  o.checksum = true;
  auto model = Load(WithFaults(dir_, plan), MakeDevice("sim"), o);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  ExpectByteExact(dir_, **model);
}

TEST_F(FaultTest, EioFailsNamingFileAndOffset) {
  FaultPlan plan;
  plan.eio_at = 5'000'000;
  auto device = MakeDevice("sim");
  auto model = Load(WithFaults(dir_, plan), device, LoadOptions{});
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), Code::kIoError);
  EXPECT_EQ(model.status().message(),
            dir_.files[0].path + ": read failed at byte 5000000: Input/output error");
  EXPECT_EQ(device->live_device_allocations(), 0u);
  EXPECT_EQ(device->live_pinned_allocations(), 0u);
}

TEST_F(FaultTest, TruncationFailsNamingFileAndOffset) {
  FaultPlan plan;
  plan.truncate_at = 7'000'000;
  LoadOptions o;
  o.threads = 1;  // so the chunk that holds the truncation point fails first
  auto model = Load(WithFaults(dir_, plan), MakeDevice("sim"), o);
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), Code::kIoError);
  EXPECT_NE(model.status().message().find(dir_.files[0].path +
                                          ": unexpected end of file at byte 7000000"),
            std::string::npos)
      << model.status().message();
}

TEST_F(FaultTest, HangingReadFailsNamingTheReadStage) {
  FaultPlan plan;
  plan.hang_at = 3'000'000;
  LoadOptions o;
  o.stall_timeout_s = 1;
  const auto start = Clock::now();
  auto model = Load(WithFaults(dir_, plan), MakeDevice("sim"), o);
  const double s = SecondsSince(start);
  plan.gate->ReleaseAndWaitForReads();  // the stuck reader goes
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), Code::kStalled);
  EXPECT_NE(model.status().message().find("read stage: reading " + dir_.files[0].path + " at byte"),
            std::string::npos)
      << model.status().message();
  EXPECT_LT(s, testing::TimeBound(1 + 2.0 + 1.5));
}

// On the host, a chunk that is one piece of one tensor is read straight into it (no staging,
// no copy); chunks that span tensors are staged. Both ways give the file's bytes, through short
// and interrupted reads, with checksums; sim's memory is never written by the readers.
TEST_F(FaultTest, OnTheHostChunksAreReadStraightIntoTheirTensorsByteExact) {
  FaultPlan plan;
  plan.short_read_max = 65536 + 3;
  plan.interrupt_every = 5;
  for (const bool faults : {false, true}) {
    LoadOptions o;
    o.checksum = true;
    o.chunk_bytes = 64 << 10;  // the sample's tensors are up to 512 KiB
    o.threads = 4;
    auto model = Load(faults ? WithFaults(dir_, plan) : dir_, MakeDevice("host"), o);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    const LoadReport& r = (*model)->report;
    EXPECT_GT(r.read_into_destination_bytes, r.read_bytes / 2) << faults;
    EXPECT_LT(r.read_into_destination_bytes, r.read_bytes) << faults;  // small tensors staged
    // The checksums too.
    ExpectByteExact(dir_, **model);
  }
  auto model = Load(dir_, MakeDevice("sim"), LoadOptions{});
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  EXPECT_EQ((*model)->report.read_into_destination_bytes, 0u);
}

// A read straight into a caller's tensor that never returns: the load ends at the stall
// timeout naming the read, and says the destinations may still be written (they are, once
// the read is let go), rather than pretending they are free to reuse.
TEST_F(FaultTest, AHangingReadIntoTheCallersTensorSaysItMayStillWriteIt) {
  FaultPlan plan;
  plan.hang_at = 300'000;  // inside the first tensor (bytes 7,200 to 531,488), past a chunk
  std::vector<std::vector<unsigned char>> memory(dir_.tensors.size());
  LoadOptions o;
  o.stall_timeout_s = 1;
  o.chunk_bytes = 64 << 10;
  o.destination = [&](size_t i, const TensorEntry& t) -> Result<void*> {
    memory[i].assign(t.nbytes, 0);
    return static_cast<void*>(memory[i].data());
  };
  const auto start = Clock::now();
  auto model = Load(WithFaults(dir_, plan), MakeDevice("host"), o);
  const double s = SecondsSince(start);
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), Code::kStalled);
  EXPECT_NE(model.status().message().find("read stage: reading " + dir_.files[0].path),
            std::string::npos)
      << model.status().message();
  EXPECT_NE(model.status().message().find("a copy or a read into the caller's destinations did "
                                          "not stop: they may still be written"),
            std::string::npos)
      << model.status().message();
  EXPECT_LT(s, testing::TimeBound(1 + 2.0 + 1.5));
  // The stuck read ends, into `memory`, before `memory` goes.
  plan.gate->ReleaseAndWaitForReads();
}

// A rank load whose copies cannot be stopped (a GPU whose engine hung: abandon=0) keeps its
// block: freeing it could let the copies write into memory handed out again. It once freed it
// regardless. A device that can stop its copies frees the block as before.
TEST_F(FaultTest, ARankLoadWhoseCopiesCannotStopKeepsItsBlock) {
  const std::vector<TensorRegion> cut = ReplicateTensors(dir_, 2);
  const AllGather gather{[](void*, uint64_t) { return Status::Ok(); }, {}};
  for (const bool can_stop : {false, true}) {
    auto device = MakeDevice(std::string("sim:stall_after=1MiB,abandon=") + (can_stop ? "1" : "0"));
    LoadOptions o;
    o.stall_timeout_s = 1;
    o.chunk_bytes = 1 << 20;
    std::vector<TensorRegion> mine;
    auto model = LoadRank(dir_, device, cut, 0, 2, gather, o, &mine);
    ASSERT_FALSE(model.ok());
    EXPECT_EQ(model.status().code(), Code::kStalled);
    const bool kept =
        model.status().message().find("must stay allocated until the process") != std::string::npos;
    EXPECT_EQ(kept, !can_stop) << model.status().message();
    EXPECT_EQ(device->live_device_allocations(), can_stop ? 0u : 1u);
    // This test's own clean-up: the sim's hung copies touch no memory.
    device->set_free_on_destroy(true);
  }
}

// A rank's exchange that never finishes (a peer that died or never loaded) ends at the stall
// timeout, or at once on cancel or a failing poll, naming the wait; its block stays allocated,
// since the exchange may still write into it. One that finishes after a few polls gives a model
// equal to the file.
TEST_F(FaultTest, APolledRankExchangeKeepsTheStallTimeoutAndCancel) {
  const std::vector<TensorRegion> cut = ReplicateTensors(dir_, 2);
  int polls = 0;
  bool started = false;
  AllGather never{[&](void*, uint64_t) {
                    started = true;
                    return Status::Ok();
                  },
                  [&]() -> Result<bool> {
                    ++polls;
                    return false;
                  }};
  {
    auto device = MakeDevice("host");
    LoadOptions o;
    // The timeout covers this rank's own reads too: under a sanitizer on a busy machine a
    // 4 MiB read has taken longer than 0.3 s.
    o.stall_timeout_s = testing::TimeBound(0.3);
    char timeout[64];
    std::snprintf(timeout, sizeof timeout, "%.1f", o.stall_timeout_s);
    std::vector<TensorRegion> mine;
    auto model = LoadRank(dir_, device, cut, 1, 2, never, o, &mine);
    ASSERT_FALSE(model.ok());
    EXPECT_EQ(model.status().code(), Code::kStalled);
    EXPECT_EQ(model.status().message().rfind("rank 1 of 2 waited ", 0), 0u)
        << model.status().message();
    EXPECT_NE(
        model.status().message().find(
            std::string(" s for the other ranks in the check before the all-gather (stall "
                        "timeout ") +
            timeout + " s): a rank failed, hangs or never started its load; this rank's block ("),
        std::string::npos)
        << model.status().message();
    EXPECT_TRUE(started);
    EXPECT_GT(polls, 1);
    EXPECT_EQ(device->live_device_allocations(), 1u);
    EXPECT_FALSE(device->free_on_destroy());
    device->set_free_on_destroy(true);  // this test's own clean-up: its exchange writes nothing
  }
  {
    auto device = MakeDevice("host");
    std::atomic<bool> cancel{false};
    LoadOptions o;
    o.cancel = &cancel;
    AllGather cancelled = never;
    cancelled.poll = [&]() -> Result<bool> {
      cancel.store(true);  // the job gives up while this rank waits for its peers
      return false;
    };
    std::vector<TensorRegion> mine;
    auto model = LoadRank(dir_, device, cut, 0, 2, cancelled, o, &mine);
    ASSERT_FALSE(model.ok());
    EXPECT_EQ(model.status().code(), Code::kCancelled);
    EXPECT_NE(model.status().message().find("the check before the all-gather: cancelled; this "
                                            "rank's block ("),
              std::string::npos)
        << model.status().message();
    device->set_free_on_destroy(true);
  }
  {
    auto device = MakeDevice("host");
    AllGather failing = never;
    failing.poll = []() -> Result<bool> { return Status::DeviceError("the peer went away"); };
    std::vector<TensorRegion> mine;
    auto model = LoadRank(dir_, device, cut, 0, 2, failing, LoadOptions{}, &mine);
    ASSERT_FALSE(model.ok());
    EXPECT_EQ(model.status().code(), Code::kDeviceError);
    EXPECT_NE(model.status().message().find("the peer went away; this rank's block ("),
              std::string::npos)
        << model.status().message();
    EXPECT_EQ(device->live_device_allocations(), 1u);
    device->set_free_on_destroy(true);
  }
  {
    auto device = MakeDevice("host");
    int left = 3;
    AllGather finishes{[](void*, uint64_t) { return Status::Ok(); },
                       [&]() -> Result<bool> { return --left == 0; }};
    std::vector<TensorRegion> mine;
    const std::vector<TensorRegion> alone = ReplicateTensors(dir_, 1);
    auto model = LoadRank(dir_, device, alone, 0, 1, finishes, LoadOptions{}, &mine);
    ASSERT_TRUE(model.ok()) << model.status().message();
    EXPECT_EQ(left, 0);
    auto parts = RegionDirectory(dir_, mine);
    ASSERT_TRUE(parts.ok()) << parts.status().message();
    auto mismatches = Verify(*parts, **model, 2, 10);
    ASSERT_TRUE(mismatches.ok()) << mismatches.status().message();
    EXPECT_TRUE(mismatches->empty());
  }
}

// Cancelled from another thread once the first bytes landed (the progress callback says so),
// the load ends promptly and frees everything.
TEST_F(FaultTest, CancelEndsTheLoadPromptlyAndFreesEverything) {
  auto device = MakeDevice("sim:bandwidth=20MB/s");
  std::atomic<bool> cancel{false};
  std::mutex mutex;
  std::condition_variable landed_cv;
  bool landed = false;
  LoadOptions o;
  o.cancel = &cancel;
  o.progress = [&](const LoadProgress& p) {
    if (p.copied_bytes > 0) {
      std::lock_guard<std::mutex> lock(mutex);
      landed = true;
      landed_cv.notify_all();
    }
    return true;
  };
  Clock::time_point cancelled;
  std::thread canceller([&] {
    std::unique_lock<std::mutex> lock(mutex);
    landed_cv.wait(lock, [&] { return landed; });
    cancelled = Clock::now();
    cancel.store(true);
  });
  auto model = Load(dir_, device, o);
  const auto returned = Clock::now();
  {
    std::lock_guard<std::mutex> lock(mutex);
    landed = true;  // a load that ended before any byte landed must not leave the thread waiting
    landed_cv.notify_all();
  }
  canceller.join();
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), Code::kCancelled);
  EXPECT_LT(std::chrono::duration<double>(returned - cancelled).count(), testing::TimeBound(2.0));
  EXPECT_EQ(device->live_device_allocations(), 0u);
  EXPECT_EQ(device->live_pinned_allocations(), 0u);
}

TEST_F(FaultTest, ProgressCallbackCanCancel) {
  LoadOptions o;
  int calls = 0;
  o.progress = [&](const LoadProgress& p) {
    EXPECT_LE(p.copied_bytes, p.total_bytes);
    return ++calls < 2;
  };
  auto model = Load(dir_, MakeDevice("sim:bandwidth=50MB/s"), o);
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), Code::kCancelled);
  EXPECT_EQ(calls, 2);
}

TEST_F(FaultTest, ProgressReportsEverythingAtTheEnd) {
  LoadOptions o;
  LoadProgress last;
  o.progress = [&](const LoadProgress& p) {
    last = p;
    return true;
  };
  auto model = Load(dir_, MakeDevice("sim"), o);
  ASSERT_TRUE(model.ok());
  EXPECT_EQ(last.copied_bytes, last.total_bytes);
  EXPECT_EQ(last.total_bytes, (*model)->report.read_bytes);
}

// A file written to while the load reads it: kFileChanged naming it, nothing left allocated,
// never a success with tensors that mix old and new bytes.
TEST_F(FaultTest, FileWrittenToDuringTheLoadIsReportedAsChanged) {
  const std::string path = dir_.files[0].path;
  testing::AgeFile(path);
  auto opened = ReadModelDirectory(path);
  ASSERT_TRUE(opened.ok());
  auto device = MakeDevice("sim:bandwidth=50MB/s");
  LoadOptions o;
  bool written = false;
  o.progress = [&](const LoadProgress&) {
    if (!written) {
      std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(-4096, std::ios::end);
      f.write(std::string(4096, 'x').data(), 4096);
      written = true;
    }
    return true;
  };
  auto model = Load(*opened, device, o);
  ASSERT_TRUE(written) << "the load ended before its first progress report";
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), Code::kFileChanged);
  EXPECT_EQ(model.status().message(),
            path +
                ": written to (its modification time changed) while it was being loaded; the "
                "loaded tensors may mix old and new bytes");
  EXPECT_EQ(device->live_device_allocations(), 0u);
  EXPECT_EQ(device->live_pinned_allocations(), 0u);
}

// Truncated under the load: the reads that fail at the new end are explained as the change
// they are, not as an I/O error of the disk.
TEST_F(FaultTest, FileTruncatedDuringTheLoadIsReportedAsChanged) {
  const std::string path = dir_.files[0].path;
  const uint64_t size = dir_.files[0].size;
  auto device = MakeDevice("sim:bandwidth=50MB/s");
  LoadOptions o;
  bool truncated = false;
  o.progress = [&](const LoadProgress&) {
    if (!truncated) std::filesystem::resize_file(path, size / 2);
    truncated = true;
    return true;
  };
  auto model = Load(dir_, device, o);
  ASSERT_TRUE(truncated) << "the load ended before its first progress report";
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), Code::kFileChanged) << model.status().message();
  EXPECT_EQ(model.status().message(),
            path + ": written to (its size went from " + std::to_string(size) + " to " +
                std::to_string(size / 2) +
                " bytes) while it was being loaded; the loaded tensors may mix old and new bytes");
  EXPECT_EQ(device->live_device_allocations(), 0u);
  EXPECT_EQ(device->live_pinned_allocations(), 0u);
}

TEST_F(FaultTest, OptionsOutOfBoundsAreRefusedBeforeAnythingIsAllocated) {
  auto device = MakeDevice("sim");
  const std::vector<std::pair<std::function<void(LoadOptions&)>, std::string>> cases = {
      {[](LoadOptions& o) { o.threads = kMaxReaderThreads + 1; }, "threads is 1025"},
      {[](LoadOptions& o) { o.chunk_bytes = kMinChunkBytes - 1; }, "chunk of 4095 bytes"},
      {[](LoadOptions& o) { o.chunk_bytes = kMaxChunkBytes + 1; }, "chunk of 1073741825 bytes"},
      {[](LoadOptions& o) { o.staging_bytes = MaxStagingBytes() + 1; }, "staging budget of"},
      {[](LoadOptions& o) { o.stall_timeout_s = std::nan(""); }, "stall timeout of nan s"},
      {[](LoadOptions& o) { o.stall_timeout_s = 0; }, "stall timeout of 0"},
      {[](LoadOptions& o) { o.stall_timeout_s = 1e300; }, "stall timeout of"},
  };
  for (const auto& [set, message] : cases) {
    LoadOptions o;
    set(o);
    auto model = Load(dir_, device, o);
    ASSERT_FALSE(model.ok()) << message;
    EXPECT_EQ(model.status().code(), Code::kInvalidArgument) << message;
    EXPECT_NE(model.status().message().find(message), std::string::npos)
        << model.status().message();
    EXPECT_EQ(device->live_device_allocations(), 0u);
    EXPECT_EQ(device->live_pinned_allocations(), 0u);
  }
}

TEST_F(FaultTest, DeviceOutOfMemoryIsADeviceError) {
  auto model = Load(dir_, MakeDevice("sim:mem=1MiB"), LoadOptions{});
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), Code::kDeviceError);
}

}  // namespace
}  // namespace hoist
