// One load across several devices: each tensor on the device its placement names, byte-exact,
// and a device that fails or stalls mid-load leaves nothing allocated on any of them.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "base/units.h"
#include "pipeline/load_checks.h"
#include "pipeline/loader.h"

namespace hoist {
namespace {

using testing::ExpectByteExact;
using testing::MakeDevice;
using testing::Sample;

class PlacementTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SampleSpec spec;
    spec.format = "safetensors";
    spec.shards = 2;
    spec.target_bytes = 24 << 20;
    spec.dtypes = {"BF16", "F32", "I8"};
    dir_ = Sample(tmp_, "model.safetensors.index.json", spec);
    ASSERT_GE(dir_.tensors.size(), 6u);
  }

  // Tensor i on device i % devices.
  std::vector<uint32_t> RoundRobin(uint32_t devices) const {
    std::vector<uint32_t> placement;
    for (size_t i = 0; i < dir_.tensors.size(); ++i) {
      placement.push_back(static_cast<uint32_t>(i % devices));
    }
    return placement;
  }

  static void ExpectNothingAllocated(const std::vector<std::shared_ptr<CheckedDevice>>& devices) {
    for (const auto& d : devices) {
      EXPECT_EQ(d->live_device_allocations(), 0u) << d->name();
      EXPECT_EQ(d->live_pinned_allocations(), 0u) << d->name();
    }
  }

  testing::TempDir tmp_;
  TensorDirectory dir_;
};

TEST_F(PlacementTest, TwoSimDevicesAndHostEachGetTheirTensorsByteExact) {
  const std::vector<std::shared_ptr<CheckedDevice>> devices = {MakeDevice("sim"), MakeDevice("sim"),
                                                               MakeDevice("host")};
  LoadOptions o;
  std::vector<uint32_t> placement = RoundRobin(3);
  o.checksum = true;
  o.chunk_bytes = 1 << 20;  // several chunks per device, so every lane streams
  {
    auto model = Load(dir_, devices, o, placement);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    LoadedModel& m = **model;
    EXPECT_EQ(m.report.device, "sim, sim, host");
    EXPECT_EQ(m.report.tensors, dir_.tensors.size());
    EXPECT_GE(m.report.threads, 3);
    for (size_t i = 0; i < dir_.tensors.size(); ++i) {
      EXPECT_EQ(&m.device_of(i), devices[i % 3].get()) << dir_.tensors[i].name;
    }
    // One block per device, and each tensor inside its own device's block: a copy checked
    // against the other devices' allocations would fail.
    for (const auto& d : devices) EXPECT_EQ(d->live_device_allocations(), 1u) << d->name();
    ExpectByteExact(dir_, m);
    auto mismatches = Verify(dir_, m, 4, 10);
    ASSERT_TRUE(mismatches.ok()) << mismatches.status().ToString();
    EXPECT_TRUE(mismatches->empty());
  }
  ExpectNothingAllocated(devices);
}

// Two sims whose links are fast but share a slow host side (host_bandwidth): together they
// cannot load faster than the host side carries, as GPUs behind one host's memory cannot.
TEST_F(PlacementTest, SimsSharingAHostSideTogetherTakeAtLeastItsTime) {
  const std::string spec = "sim:bandwidth=10GB/s,latency_us=0,host_bandwidth=100MB/s";
  std::vector<std::shared_ptr<CheckedDevice>> devices = {MakeDevice(spec), MakeDevice(spec)};
  LoadOptions o;
  std::vector<uint32_t> placement = RoundRobin(2);
  const auto start = std::chrono::steady_clock::now();
  auto model = Load(dir_, devices, o, placement);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  ExpectByteExact(dir_, **model);
  // A lower bound only (the modelled time is slept; more is the machine's load).
  EXPECT_GE(seconds, static_cast<double>((*model)->report.read_bytes) / 100e6 * 0.95);
  EXPECT_NE(devices[0]->Info().description.find("sharing a host side of"), std::string::npos);
}

// A read-back that crawls on one device ends the verify at the stall timeout, naming the tensor
// and the device; the sim cuts its read-back short, so the model is then freed as usual.
TEST_F(PlacementTest, AStalledReadBackEndsVerifyAndTheModelIsStillFreed) {
  const std::vector<std::shared_ptr<CheckedDevice>> devices = {
      MakeDevice("host"), MakeDevice("sim:readback_bandwidth=1KB/s")};
  {
    LoadOptions o;
    std::vector<uint32_t> placement = RoundRobin(2);
    auto model = Load(dir_, devices, o, placement);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    const auto start = std::chrono::steady_clock::now();
    // Scaled: under a sanitizer on a busy machine the files' own reads may pause that long.
    const double stall_timeout_s = testing::TimeBound(0.5);
    auto mismatches = Verify(dir_, **model, 4, 10, stall_timeout_s);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ASSERT_FALSE(mismatches.ok());
    EXPECT_EQ(mismatches.status().code(), Code::kStalled);
    EXPECT_NE(mismatches.status().message().find("verify: no progress for "), std::string::npos)
        << mismatches.status().message();
    EXPECT_NE(mismatches.status().message().find(" s: reading tensor '"), std::string::npos)
        << mismatches.status().message();
    EXPECT_NE(mismatches.status().message().find("' back from sim has not returned"),
              std::string::npos)
        << mismatches.status().message();
    EXPECT_EQ(mismatches.status().message().find("left allocated"), std::string::npos);
    EXPECT_LT(seconds, stall_timeout_s + testing::TimeBound(2.0));
  }
  ExpectNothingAllocated(devices);
}

TEST_F(PlacementTest, ADeviceThatFailsMidLoadLeavesNothingAllocatedOnAnyDevice) {
  const std::vector<std::shared_ptr<CheckedDevice>> devices = {
      MakeDevice("sim"), MakeDevice("sim:fail_copy_after=2MiB"), MakeDevice("host")};
  LoadOptions o;
  std::vector<uint32_t> placement = RoundRobin(3);
  o.chunk_bytes = 1 << 20;
  auto model = Load(dir_, devices, o, placement);
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), Code::kDeviceError);
  EXPECT_NE(model.status().message().find("fail_copy_after"), std::string::npos)
      << model.status().message();
  ExpectNothingAllocated(devices);
}

TEST_F(PlacementTest, ADeviceThatStallsIsNamedAndEverythingIsFreed) {
  const std::vector<std::shared_ptr<CheckedDevice>> devices = {MakeDevice("host"),
                                                               MakeDevice("sim:stall_after=1MiB")};
  LoadOptions o;
  std::vector<uint32_t> placement = RoundRobin(2);
  o.chunk_bytes = 1 << 20;
  o.stall_timeout_s = 1;
  auto model = Load(dir_, devices, o, placement);
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), Code::kStalled);
  EXPECT_NE(model.status().message().find("device copy stage on sim"), std::string::npos)
      << model.status().message();
  ExpectNothingAllocated(devices);  // the sim can abandon its copies, so nothing is kept
}

TEST_F(PlacementTest, CallerDestinationsOnTwoDevices) {
  const std::vector<std::shared_ptr<CheckedDevice>> devices = {MakeDevice("sim"),
                                                               MakeDevice("host")};
  std::vector<void*> mine;
  LoadOptions o;
  std::vector<uint32_t> placement = RoundRobin(2);
  o.destination = [&](size_t i, const TensorEntry& t) -> Result<void*> {
    HOIST_ASSIGN_OR_RETURN(void* p, devices[placement[i]]->AllocateDevice(t.nbytes));
    mine.push_back(p);
    return p;
  };
  {
    auto model = Load(dir_, devices, o, placement);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    ExpectByteExact(dir_, **model);
  }
  // The caller's memory is the caller's: still there after the model is gone.
  EXPECT_EQ(devices[0]->live_device_allocations() + devices[1]->live_device_allocations(),
            mine.size());
  for (size_t k = 0; k < mine.size(); ++k) {
    // Destinations were made in directory order, so k is the tensor's index.
    ASSERT_TRUE(devices[placement[k]]->FreeDevice(mine[k]).ok());
  }
}

TEST_F(PlacementTest, APlacementThatDoesNotFitTheDevicesIsRefused) {
  const std::vector<std::shared_ptr<CheckedDevice>> devices = {MakeDevice("sim"),
                                                               MakeDevice("sim")};
  LoadOptions o;
  std::vector<uint32_t> placement = RoundRobin(3);
  auto model = Load(dir_, devices, o, placement);
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(model.status().message(),
            "the placement puts tensor '" + dir_.tensors[2].name + "' on device 2; there are 2");
  placement = {0};
  model = Load(dir_, devices, o, placement);
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().message(), "the placement names a device for 1 tensors; the model has " +
                                          std::to_string(dir_.tensors.size()));
  ExpectNothingAllocated(devices);
}

TEST_F(PlacementTest, ADeviceWithNothingPlacedOnItIsLeftAlone) {
  const std::vector<std::shared_ptr<CheckedDevice>> devices = {MakeDevice("sim"),
                                                               MakeDevice("sim")};
  LoadOptions o;
  std::vector<uint32_t> placement(dir_.tensors.size(), 1);
  auto model = Load(dir_, devices, o, placement);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  EXPECT_EQ(devices[0]->live_device_allocations(), 0u);
  EXPECT_EQ(devices[0]->live_pinned_allocations(), 0u);
  EXPECT_EQ(devices[1]->live_device_allocations(), 1u);
  ExpectByteExact(dir_, **model);
}

}  // namespace
}  // namespace hoist
