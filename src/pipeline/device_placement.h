// Placing a model's tensors across opened devices: by layers, in proportion to given shares or
// to each device's free memory, refused up front when a device would get more than it has free.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "device/checked_device.h"
#include "format/tensor_directory.h"
#include "plan/load_plan.h"
#include "plan/tensor_split.h"

namespace hoist {

// Which device each tensor of dir goes to (an index into devices): empty for one device; for
// several, consecutive layers per device (SplitByLayer) in proportion to shares (one positive
// share per device), or to the devices' free memory when shares is empty. A device that would
// get more than its free memory is kDeviceError with the numbers, ending with `hint` (how the
// caller gives shares).
Result<std::vector<uint32_t>> PlaceByLayer(
    const TensorDirectory& dir, const std::vector<std::shared_ptr<CheckedDevice>>& devices,
    const std::vector<double>& shares, const std::string& hint);

}  // namespace hoist

namespace hoist {

// The parts each device gets: Split::kTensor cuts every tensor among the devices by `rules`
// (then the built-in ones) in proportion to shares (empty: equal), kReplicate puts every
// tensor on every device. A device that would get more than its free memory is kDeviceError
// with the numbers, ending with `hint` for a tensor split; another split is kInvalidArgument.
Result<std::vector<TensorRegion>> PlaceParts(
    const TensorDirectory& dir, const std::vector<std::shared_ptr<CheckedDevice>>& devices,
    Split split, const std::vector<double>& shares, const std::vector<CutRule>& rules,
    const std::string& hint);

}  // namespace hoist
