// The one check that each device can hold what a placement gives it, for every policy.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "plan/load_plan.h"

namespace hoist {

struct DeviceRoom {
  std::string name;
  uint64_t free_memory = 0;  // bytes; 0: unknown, never refused
};

// Per device, the bytes its parts take in its one block, each part 256-aligned as a load lays
// them out.
std::vector<uint64_t> PartBytesPerDevice(const std::vector<TensorRegion>& parts, size_t devices);

// OK, or kDeviceError for the first device whose parts exceed its free memory: "the <split>
// split puts <bytes> on <device>, which has <free> free; <hint>".
Status CheckPartsFit(const std::vector<TensorRegion>& parts, const std::vector<DeviceRoom>& devices,
                     const std::string& split, const std::string& hint);

}  // namespace hoist
