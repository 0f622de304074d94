// Placing a model by copying every tensor to every device (data-parallel replicas).
#pragma once

#include <cstdint>
#include <vector>

#include "format/tensor_directory.h"
#include "plan/load_plan.h"

namespace hoist {

// Every tensor with bytes whole on each of `devices` devices, in directory order.
std::vector<TensorRegion> ReplicateTensors(const TensorDirectory& dir, uint32_t devices);

}  // namespace hoist
