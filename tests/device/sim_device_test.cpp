#include "device/sim_device.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "device/checked_device.h"

namespace hoist {
namespace {

std::shared_ptr<CheckedDevice> Sim(const std::string& options) {
  auto device = OpenDevice("sim:" + options);
  EXPECT_TRUE(device.ok()) << device.status().ToString();
  return device.value();
}

Result<bool> WaitFor(CopyHandle& h, int ms) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  for (;;) {
    auto done = h.Poll();
    if (!done.ok() || done.value() || std::chrono::steady_clock::now() > end) return done;
    // A pacing loop: CopyHandle::Poll never blocks, as the pipeline uses it.
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

TEST(SimOptionsTest, ParsesEveryKey) {
  auto o = ParseSimOptions(
      "bandwidth=5GB/s,latency_us=10,mem=1GiB,pinned_limit=64MiB,stall_after=2GB,"
      "fail_copy_after=1MB,reject_pageable=1,corrupt_at=7,engines=2,readback_bandwidth=1MB/s");
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_DOUBLE_EQ(o->bandwidth, 5e9);
  EXPECT_EQ(o->latency_us, 10u);
  EXPECT_EQ(o->mem, 1ull << 30);
  EXPECT_EQ(o->pinned_limit, 64ull << 20);
  EXPECT_EQ(o->stall_after, 2000000000u);
  EXPECT_EQ(o->fail_copy_after, 1000000u);
  EXPECT_TRUE(o->reject_pageable);
  EXPECT_EQ(o->corrupt_at, 7u);
  EXPECT_EQ(o->engines, 2);
  EXPECT_DOUBLE_EQ(o->readback_bandwidth, 1e6);
  EXPECT_EQ(ParseSimOptions("warp=9").status().message(), "unknown sim option 'warp'");
  EXPECT_FALSE(ParseSimOptions("bandwidth").ok());
  EXPECT_FALSE(ParseSimOptions("abandon=0")->abandon);
  EXPECT_TRUE(ParseSimOptions("")->abandon);
  EXPECT_EQ(ParseSimOptions("abandon=2").status().message(), "sim option abandon takes 0 or 1");
  EXPECT_FALSE(ParseSimOptions("reject_pageable=yes").ok());
  // Values whose modelled durations would overflow 64-bit nanoseconds are refused.
  EXPECT_FALSE(ParseSimOptions("bandwidth=0.5").ok());
  EXPECT_FALSE(ParseSimOptions("latency_us=1000000000001").ok());
  EXPECT_FALSE(ParseSimOptions("mem=10000000TB").ok());
  EXPECT_FALSE(ParseSimOptions("mem=1.2.3MiB").ok());
}

// Policies that differ by device (the bench's settle pause, doctor's traps) read the kind the
// backend reports, never the name.
TEST(DeviceRegistryTest, DevicesReportTheirKind) {
  auto host = OpenDevice("host");
  ASSERT_TRUE(host.ok());
  EXPECT_EQ((*host)->kind(), DeviceKind::kHost);
  EXPECT_EQ((*host)->Info().kind, DeviceKind::kHost);
  auto sim = OpenDevice("sim:bandwidth=1GB/s");
  ASSERT_TRUE(sim.ok());
  EXPECT_EQ((*sim)->kind(), DeviceKind::kSim);
  EXPECT_EQ((*sim)->name(), "sim");
}

TEST(SimDeviceTest, CopiesBytesAndCountsAllocations) {
  auto sim = Sim("");
  auto dst = sim->AllocateDevice(4096);
  auto src = sim->AllocatePinned(4096);
  ASSERT_TRUE(dst.ok() && src.ok());
  std::memset(src.value(), 0x5A, 4096);
  auto copy = sim->CopyToDeviceAsync(dst.value(), src.value(), 4096, 0);
  ASSERT_TRUE(copy.ok());
  ASSERT_TRUE(WaitFor(**copy, 2000).value());
  std::vector<unsigned char> back(4096);
  ASSERT_TRUE(sim->CopyToHost(back.data(), dst.value(), 4096).ok());
  EXPECT_EQ(back, std::vector<unsigned char>(4096, 0x5A));
  EXPECT_EQ(sim->live_device_allocations(), 1u);
  EXPECT_EQ(sim->live_pinned_allocations(), 1u);
  ASSERT_TRUE(sim->FreeDevice(dst.value()).ok());
  ASSERT_TRUE(sim->ReturnPinned(src.value()).ok());
  EXPECT_EQ(sim->live_device_allocations(), 0u);
}

TEST(SimDeviceTest, CheckedLayerRejectsCopiesOutsideAllocations) {
  auto sim = Sim("");
  auto dst = sim->AllocateDevice(100);
  std::vector<unsigned char> src(200);
  auto copy = sim->CopyToDeviceAsync(dst.value(), src.data(), 101, 0);
  ASSERT_FALSE(copy.ok());
  EXPECT_EQ(copy.status().code(), Code::kInternal);
  EXPECT_FALSE(sim->CopyToDeviceAsync(dst.value(), src.data(), 10, 99).ok());
  EXPECT_FALSE(sim->FreeDevice(src.data()).ok());
}

TEST(SimDeviceTest, PinnedLimitAndMemoryCapacity) {
  auto sim = Sim("pinned_limit=1MiB,mem=1MiB");
  EXPECT_TRUE(sim->AllocatePinned(512 << 10).ok());
  auto second = sim->AllocatePinned(768 << 10);
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().message().find("pinned_limit"), std::string::npos);
  auto big = sim->AllocateDevice(2 << 20);
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.status().code(), Code::kDeviceError);
}

TEST(SimDeviceTest, StallAfterHangsEveryLaterCopyUntilAbandoned) {
  auto sim = Sim("stall_after=1000");
  auto dst = sim->AllocateDevice(4096);
  auto src = sim->AllocatePinned(4096);
  auto first = sim->CopyToDeviceAsync(dst.value(), src.value(), 800, 0);
  ASSERT_TRUE(WaitFor(**first, 2000).value());
  auto second = sim->CopyToDeviceAsync(dst.value(), src.value(), 800, 0);
  auto third = sim->CopyToDeviceAsync(dst.value(), src.value(), 10, 1);
  EXPECT_FALSE(WaitFor(**second, 200).value());
  EXPECT_FALSE(WaitFor(**third, 50).value());
  EXPECT_TRUE(sim->Abandon());
  EXPECT_EQ((*second)->Poll().status().code(), Code::kDeviceError);
}

TEST(SimDeviceTest, FailCopyAfterReportsAnError) {
  auto sim = Sim("fail_copy_after=100");
  auto dst = sim->AllocateDevice(4096);
  auto src = sim->AllocatePinned(4096);
  auto copy = sim->CopyToDeviceAsync(dst.value(), src.value(), 200, 0);
  auto done = WaitFor(**copy, 2000);
  ASSERT_FALSE(done.ok());
  EXPECT_NE(done.status().message().find("fail_copy_after"), std::string::npos);
}

TEST(SimDeviceTest, RejectPageableHangsLargePageableCopiesOnly) {
  auto sim = Sim("reject_pageable=1");
  auto dst = sim->AllocateDevice(4 << 20);
  std::vector<unsigned char> pageable(4 << 20, 1);
  auto small = sim->CopyToDeviceAsync(dst.value(), pageable.data(), 512 << 10, 0);
  EXPECT_TRUE(WaitFor(**small, 2000).value());
  auto large = sim->CopyToDeviceAsync(dst.value(), pageable.data(), 1 << 20, 0);
  EXPECT_FALSE(WaitFor(**large, 200).value());
  EXPECT_TRUE(sim->Abandon());
}

TEST(SimDeviceTest, BandwidthIsModelled) {
  auto sim = Sim("bandwidth=100MB/s");
  auto dst = sim->AllocateDevice(10 << 20);
  auto src = sim->AllocatePinned(10 << 20);
  const auto start = std::chrono::steady_clock::now();
  auto copy = sim->CopyToDeviceAsync(dst.value(), src.value(), 10'000'000, 0);
  ASSERT_TRUE(WaitFor(**copy, 5000).value());
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_GE(s, 0.09);  // 10 MB at 100 MB/s
}

}  // namespace
}  // namespace hoist
