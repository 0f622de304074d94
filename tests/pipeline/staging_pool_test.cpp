#include "pipeline/staging_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <vector>

#include "device/device.h"

namespace hoist {
namespace {

constexpr uint64_t kMiB = 1 << 20;

std::shared_ptr<CheckedDevice> SimWith(const std::string& options = "") {
  auto device = OpenDevice(options.empty() ? "sim" : "sim:" + options);
  EXPECT_TRUE(device.ok()) << device.status().ToString();
  return *device;
}

TEST(StagingPoolTest, CarvesBuffersFromAFewPinnedAllocations) {
  auto device = SimWith();
  auto pool = StagingPool::Create(device, 96 * kMiB, 4 * kMiB);
  ASSERT_TRUE(pool.ok()) << pool.status().ToString();
  EXPECT_EQ((*pool)->planned_buffers(), 24u);
  ASSERT_EQ((*pool)->ReportOnceGrown().buffers, 24u);
  // The first four before Create returned, the other twenty in four background allocations.
  EXPECT_EQ(device->live_pinned_allocations(), 5u);
  EXPECT_EQ(device->live_pinned_bytes(), 96 * kMiB);
  std::vector<StagingBuffer> held;
  for (int i = 0; i < 24; ++i) {
    auto b = (*pool)->Acquire(std::chrono::milliseconds(0));
    ASSERT_TRUE(b.has_value()) << "buffer " << i;
    held.push_back(std::move(*b));
  }
  EXPECT_FALSE((*pool)->Acquire(std::chrono::milliseconds(0)).has_value());
  std::vector<unsigned char*> starts;
  for (const StagingBuffer& b : held) starts.push_back(b.data());
  std::sort(starts.begin(), starts.end());
  for (size_t i = 1; i < starts.size(); ++i) {
    EXPECT_GE(static_cast<uint64_t>(starts[i] - starts[i - 1]), 4 * kMiB) << "buffers overlap";
  }
  held.clear();
  pool->reset();
  EXPECT_EQ(device->live_pinned_allocations(), 0u);
}

TEST(StagingPoolTest, AnAbandonedBufferKeepsItsAllocationAlive) {
  auto device = SimWith();
  auto pool = StagingPool::Create(device, 8 * kMiB, 4 * kMiB);
  ASSERT_TRUE(pool.ok()) << pool.status().ToString();
  auto b = (*pool)->Acquire(std::chrono::milliseconds(0));
  ASSERT_TRUE(b.has_value());
  b->Abandon();  // a stalled copy may still read it
  pool->reset();
  EXPECT_EQ(device->live_pinned_allocations(), 1u);
  EXPECT_EQ(device->live_pinned_bytes(), 8 * kMiB);
}

TEST(StagingPoolTest, RunningOutOfPinnedMemoryMidwayKeepsWhatItGot) {
  auto device = SimWith("pinned_limit=40MiB");
  auto pool = StagingPool::Create(device, 96 * kMiB, 4 * kMiB);
  ASSERT_TRUE(pool.ok()) << pool.status().ToString();
  const StagingPoolReport report = (*pool)->ReportOnceGrown();
  EXPECT_TRUE(report.pinned);
  EXPECT_EQ(report.buffers, 10u);  // 40 MiB of 4 MiB buffers
  ASSERT_FALSE(report.fallbacks.empty());
  EXPECT_EQ(report.fallbacks.back(),
            "pinned memory ran out after 10 of 24 staging buffers of 4.00 MiB; staging with fewer");
}

}  // namespace
}  // namespace hoist
