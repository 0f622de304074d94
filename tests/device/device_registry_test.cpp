// The registry lists what can be opened with what it can do, and the checked layer is itself a
// Device that stacks.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>

#include "device/checked_device.h"
#include "device/device.h"
#include "device/sim_device.h"

namespace hoist {
namespace {

const DeviceInfo* Named(const std::vector<DeviceInfo>& devices, const std::string& name) {
  auto it = std::find_if(devices.begin(), devices.end(),
                         [&](const DeviceInfo& d) { return d.name == name; });
  return it == devices.end() ? nullptr : &*it;
}

TEST(DeviceRegistryTest, ListsHostAndSimWithTheirCapabilities) {
  const std::vector<DeviceInfo> devices = ListDevices();
  const DeviceInfo* host = Named(devices, "host");
  const DeviceInfo* sim = Named(devices, "sim");
  ASSERT_NE(host, nullptr);
  ASSERT_NE(sim, nullptr);
  EXPECT_EQ(host->kind, DeviceKind::kHost);
  EXPECT_FALSE(host->capabilities.needs_pinned_staging());
  EXPECT_TRUE(host->capabilities.can_abandon);
  EXPECT_EQ(sim->kind, DeviceKind::kSim);
  EXPECT_TRUE(sim->capabilities.needs_pinned_staging());
  EXPECT_FALSE(sim->capabilities.pageable_copies_can_hang);
  for (const DeviceInfo& d : devices) {
    if (d.kind != DeviceKind::kGpu) continue;
    EXPECT_TRUE(d.capabilities.needs_pinned_staging()) << d.name;
    EXPECT_FALSE(d.capabilities.can_abandon) << d.name;
  }
}

TEST(DeviceRegistryTest, AnOpenedDeviceReportsWhatItsOptionsMake) {
  auto device = OpenDevice("sim:reject_pageable=1");
  ASSERT_TRUE(device.ok());
  EXPECT_TRUE((*device)->capabilities().pageable_copies_can_hang);
  EXPECT_TRUE((*device)->CanAbandon());
  EXPECT_EQ(DeviceKindName((*device)->kind()), std::string("sim"));
}

TEST(CheckedDeviceTest, StacksAndChecksAtEveryLayer) {
  auto backend = MakeSimDevice(SimOptions{});
  ASSERT_TRUE(backend.ok());
  auto inner = std::make_unique<CheckedDevice>(std::move(backend).value());
  CheckedDevice* inner_view = inner.get();
  CheckedDevice outer(std::move(inner));
  EXPECT_EQ(outer.name(), "sim");

  auto block = outer.AllocateDevice(4096);
  ASSERT_TRUE(block.ok());
  EXPECT_EQ(outer.live_device_allocations(), 1u);
  EXPECT_EQ(inner_view->live_device_allocations(), 1u);
  std::vector<unsigned char> src(4096, 7);
  auto staging = outer.AllocatePinned(4096);
  ASSERT_TRUE(staging.ok());
  std::copy(src.begin(), src.end(), static_cast<unsigned char*>(*staging));
  // Through the Device interface, as a stacked wrapper would call it: checked all the same.
  Device& as_device = outer;
  auto copy = as_device.CopyToDeviceAsync(*block, *staging, 4096, 0);
  ASSERT_TRUE(copy.ok());
  ASSERT_TRUE(WaitForCopy(**copy, 10).ok());
  EXPECT_EQ(as_device.CopyToDeviceAsync(static_cast<char*>(*block) + 1, *staging, 4096, 0)
                .status()
                .code(),
            Code::kInternal);
  std::vector<unsigned char> back(4096);
  ASSERT_TRUE(as_device.CopyToHost(back.data(), *block, 4096).ok());
  EXPECT_EQ(back, src);

  EXPECT_EQ(as_device.ReturnPinned(*staging, 100).code(), Code::kInternal);  // not its size
  EXPECT_TRUE(as_device.ReturnPinned(*staging, 4096).ok());
  EXPECT_EQ(inner_view->live_pinned_allocations(), 0u);
  EXPECT_TRUE(outer.FreeDevice(*block).ok());
  EXPECT_EQ(inner_view->live_device_allocations(), 0u);
}

}  // namespace
}  // namespace hoist
