#include "plan/placement/replicate.h"

#include "plan/placement/builtin.h"

namespace hoist {

std::vector<TensorRegion> ReplicateTensors(const TensorDirectory& dir, uint32_t devices) {
  std::vector<TensorRegion> parts;
  for (size_t i = 0; i < dir.tensors.size(); ++i) {
    if (dir.tensors[i].nbytes == 0) continue;
    for (uint32_t d = 0; d < devices; ++d) parts.push_back(WholePart(dir, i, d));
  }
  return parts;
}

Result<std::vector<TensorRegion>> PlaceReplicas(const PlacementInput& input) {
  return ReplicateTensors(*input.dir, input.devices);
}

}  // namespace hoist
