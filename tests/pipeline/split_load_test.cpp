// One load that cuts a model's tensors among several devices (tensor parallel) or puts every
// tensor on every device: every part byte-exact on its device, each file byte read once, and a
// device that fails or stalls mid-load leaves nothing allocated on any of them.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "pipeline/load_checks.h"
#include "pipeline/loader.h"
#include "plan/placement/replicate.h"
#include "plan/placement/tensor.h"

namespace hoist {
namespace {

using testing::FileBytes;
using testing::MakeDevice;
using testing::Sample;

using Devices = std::vector<std::shared_ptr<CheckedDevice>>;

class SplitLoadTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    SampleSpec spec;
    spec.format = GetParam();
    spec.target_bytes = 12 << 20;
    spec.dtypes = GetParam() == "gguf" ? std::vector<std::string>{"Q4_K", "F16"}
                                       : std::vector<std::string>{"BF16", "F32"};
    dir_ = Sample(tmp_, GetParam() == "gguf" ? "model.gguf" : "model.safetensors", spec);
  }

  // Region k of the load equals the file's bytes of that part of its tensor, read
  // independently, and Verify agrees.
  void ExpectPartsByteExact(const std::vector<TensorRegion>& regions, LoadedModel& m,
                            const Devices& devices) const {
    for (size_t k = 0; k < regions.size(); ++k) {
      const TensorRegion& r = regions[k];
      const std::vector<unsigned char> whole = FileBytes(dir_, dir_.tensors[r.tensor]);
      std::vector<unsigned char> want;
      for (uint64_t row = r.row_begin; row < r.row_end; ++row) {
        want.insert(want.end(),
                    whole.begin() + static_cast<ptrdiff_t>(row * r.row_bytes + r.column_begin),
                    whole.begin() + static_cast<ptrdiff_t>(row * r.row_bytes + r.column_end));
      }
      ASSERT_EQ(&m.device_of(k), devices[r.device].get());
      std::vector<unsigned char> got(want.size());
      ASSERT_TRUE(m.device_of(k).CopyToHost(got.data(), m.data(k), got.size()).ok());
      ASSERT_TRUE(got == want) << "part " << k << " of '" << dir_.tensors[r.tensor].name
                               << "' on device " << r.device << " differs";
    }
    auto parts = RegionDirectory(dir_, regions);
    ASSERT_TRUE(parts.ok());
    auto mismatches = Verify(*parts, m, 4, 10);
    ASSERT_TRUE(mismatches.ok()) << mismatches.status().ToString();
    EXPECT_TRUE(mismatches->empty());
  }

  static void ExpectNothingAllocated(const Devices& devices) {
    for (const auto& d : devices) {
      EXPECT_EQ(d->live_device_allocations(), 0u) << d->name();
      EXPECT_EQ(d->live_pinned_allocations(), 0u) << d->name();
    }
  }

  testing::TempDir tmp_;
  TensorDirectory dir_;
};

TEST_P(SplitLoadTest, ATensorSplitPutsEachPartOnItsDeviceByteExactReadingEachByteOnce) {
  struct Case {
    std::vector<double> shares;
    int threads;
    uint64_t chunk_bytes;
  };
  for (const Case& c : {Case{{1, 1}, 1, 1 << 20}, Case{{1, 1}, 4, 64 << 10}, Case{{3, 1}, 3, 4096},
                        Case{{1, 1, 1}, 8, 256 << 10}}) {
    SCOPED_TRACE(std::to_string(c.shares.size()) + " devices, " + std::to_string(c.threads) +
                 " readers, chunks of " + std::to_string(c.chunk_bytes));
    Devices devices;
    for (size_t d = 0; d < c.shares.size(); ++d) devices.push_back(MakeDevice("sim:latency_us=0"));
    auto regions = CutTensors(dir_, ChooseCuts(dir_, {}), c.shares);
    ASSERT_TRUE(regions.ok()) << regions.status().ToString();
    LoadOptions o;
    o.threads = c.threads;
    o.chunk_bytes = c.chunk_bytes;
    {
      auto model = LoadRegions(dir_, devices, *regions, o);
      ASSERT_TRUE(model.ok()) << model.status().ToString();
      ExpectPartsByteExact(*regions, **model, devices);
      // Columns of one tensor are read once for all devices: the bytes read are the model's
      // (and the small gaps between tensors a device reads through), not N times them.
      EXPECT_GE((*model)->report.read_bytes, dir_.total_bytes());
      EXPECT_LE((*model)->report.read_bytes, dir_.total_bytes() + dir_.tensors.size() * 4096);
      for (const DeviceShare& share : (*model)->report.devices) EXPECT_GT(share.stream_s, 0);
    }
    ExpectNothingAllocated(devices);
  }
}

TEST_P(SplitLoadTest, ReplicasAreReadOnceAndForwardedOverPeerLinksOrEachOverItsOwn) {
  for (const char* spec : {"sim:latency_us=0", "sim:latency_us=0,peers=0"}) {
    SCOPED_TRACE(spec);
    const Devices devices = {MakeDevice(spec), MakeDevice(spec), MakeDevice(spec)};
    const std::vector<TensorRegion> regions = ReplicateTensors(dir_, 3);
    LoadOptions o;
    o.chunk_bytes = 256 << 10;
    {
      auto model = LoadRegions(dir_, devices, regions, o);
      ASSERT_TRUE(model.ok()) << model.status().ToString();
      ExpectPartsByteExact(regions, **model, devices);
      EXPECT_EQ((*model)->report.read_bytes, dir_.total_bytes());
      const std::vector<std::string>& fallbacks = (*model)->report.fallbacks;
      if (std::string(spec).find("peers=0") != std::string::npos) {
        ASSERT_EQ(fallbacks.size(), 1u);
        EXPECT_EQ(fallbacks[0],
                  "sim cannot copy to sim directly: each device takes every byte of a tensor it "
                  "shares over its own link");
      } else {
        EXPECT_TRUE(fallbacks.empty());
      }
    }
    ExpectNothingAllocated(devices);
  }
}

TEST_P(SplitLoadTest, ADeviceFailingMidSplitFailsTheLoadAndFreesEveryDevice) {
  for (bool replicate : {false, true}) {
    SCOPED_TRACE(replicate ? "replicated" : "tensor split");
    const Devices devices = {MakeDevice("sim"), MakeDevice("sim:fail_copy_after=2MiB")};
    auto regions = replicate ? ReplicateTensors(dir_, 2)
                             : CutTensors(dir_, ChooseCuts(dir_, {}), {1, 1}).value();
    LoadOptions o;
    o.chunk_bytes = 256 << 10;
    auto model = LoadRegions(dir_, devices, regions, o);
    ASSERT_FALSE(model.ok());
    EXPECT_EQ(model.status().code(), Code::kDeviceError);
    EXPECT_NE(model.status().message().find("fail_copy_after"), std::string::npos)
        << model.status().message();
    ExpectNothingAllocated(devices);
  }
}

TEST_P(SplitLoadTest, ADeviceStallingMidSplitIsNamedAndEveryDeviceFreed) {
  for (bool replicate : {false, true}) {
    SCOPED_TRACE(replicate ? "replicated" : "tensor split");
    const Devices devices = {MakeDevice("sim"), MakeDevice("sim:stall_after=1MiB")};
    auto regions = replicate ? ReplicateTensors(dir_, 2)
                             : CutTensors(dir_, ChooseCuts(dir_, {}), {1, 1}).value();
    LoadOptions o;
    o.chunk_bytes = 256 << 10;
    o.stall_timeout_s = 1;
    auto model = LoadRegions(dir_, devices, regions, o);
    ASSERT_FALSE(model.ok());
    EXPECT_EQ(model.status().code(), Code::kStalled);
    EXPECT_NE(model.status().message().find("sim"), std::string::npos) << model.status().message();
    ExpectNothingAllocated(devices);
  }
}

// Host memory (the host device's staging) never feeds a device that needs pinned staging: a sim
// that hangs on pageable copies (reject_pageable) loads its parts from its own staging.
TEST_P(SplitLoadTest, HostStagingNeverFeedsADeviceThatNeedsPinnedMemory) {
  for (bool replicate : {false, true}) {
    SCOPED_TRACE(replicate ? "replicated" : "tensor split");
    const Devices devices = {MakeDevice("host"), MakeDevice("sim:reject_pageable=1,latency_us=0")};
    auto regions = replicate ? ReplicateTensors(dir_, 2)
                             : CutTensors(dir_, ChooseCuts(dir_, {}), {1, 1}).value();
    LoadOptions o;
    o.stall_timeout_s = 5;
    {
      auto model = LoadRegions(dir_, devices, regions, o);
      ASSERT_TRUE(model.ok()) << model.status().ToString();
      ExpectPartsByteExact(regions, **model, devices);
      EXPECT_EQ((*model)->report.read_bytes, dir_.total_bytes());
    }
    ExpectNothingAllocated(devices);
  }
}

TEST_P(SplitLoadTest, RegionsRefuseWhatALoadOfThemCannotDo) {
  const Devices devices = {MakeDevice("sim"), MakeDevice("sim")};
  std::vector<TensorRegion> regions = ReplicateTensors(dir_, 2);
  LoadOptions checksum;
  checksum.checksum = true;
  EXPECT_EQ(LoadRegions(dir_, devices, regions, checksum).status().code(), Code::kInvalidArgument);
  regions[0].device = 2;
  EXPECT_EQ(LoadRegions(dir_, devices, regions, {}).status().message(),
            "region 0 is for device 2; the load has 2");
  regions[0].device = 0;
  unsigned char byte = 0;
  regions[1].destination = &byte;
  EXPECT_EQ(LoadRegions(dir_, devices, regions, {}).status().message(),
            "1 of " + std::to_string(regions.size()) +
                " regions have a destination: give every region one or none");
  ExpectNothingAllocated(devices);
}

INSTANTIATE_TEST_SUITE_P(Formats, SplitLoadTest, ::testing::Values("safetensors", "gguf"));

}  // namespace
}  // namespace hoist
