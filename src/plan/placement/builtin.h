// The built-in policies' entry points, one per file of this directory; policy.cpp's table
// names them.
#pragma once

#include <vector>

#include "base/status.h"
#include "plan/load_plan.h"
#include "plan/placement/policy.h"

namespace hoist {

// layer.cpp: consecutive layers per device, in proportion to the shares, else to free memory.
Result<std::vector<TensorRegion>> PlaceLayers(const PlacementInput& input);

// tensor.cpp: every weight cut among the devices by the plan's rules, then the built-in ones.
Result<std::vector<TensorRegion>> PlaceTensorCuts(const PlacementInput& input);

// replicate.cpp: every tensor whole on every device.
Result<std::vector<TensorRegion>> PlaceReplicas(const PlacementInput& input);

}  // namespace hoist
