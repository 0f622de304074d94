#include "pipeline/device_placement.h"

#include <algorithm>

#include "base/units.h"
#include "plan/layer_split.h"
#include "plan/load_plan.h"

namespace hoist {

Result<std::vector<uint32_t>> PlaceByLayer(
    const TensorDirectory& dir, const std::vector<std::shared_ptr<CheckedDevice>>& devices,
    const std::vector<double>& shares, const std::string& hint) {
  if (devices.size() < 2) return std::vector<uint32_t>{};
  if (!shares.empty() && shares.size() != devices.size()) {
    return Status::InvalidArgument(std::to_string(shares.size()) + " shares for " +
                                   std::to_string(devices.size()) + " devices");
  }
  std::vector<DeviceInfo> infos;
  infos.reserve(devices.size());
  for (const auto& d : devices) infos.push_back(d->Info());
  std::vector<double> weights = shares;
  if (weights.empty()) {
    const bool known = std::all_of(infos.begin(), infos.end(),
                                   [](const DeviceInfo& i) { return i.free_memory > 0; });
    for (const DeviceInfo& i : infos) {
      weights.push_back(known ? static_cast<double>(i.free_memory) : 1.0);
    }
  }
  HOIST_ASSIGN_OR_RETURN(Placement placement, SplitByLayer(dir, weights));
  HOIST_ASSIGN_OR_RETURN(const DeviceLayout layout, LayOutTensors(dir, {}, placement));
  for (size_t d = 0; d < devices.size(); ++d) {
    const uint64_t free = infos[d].free_memory;
    if (free > 0 && layout.allocation_bytes[d] > free) {
      return Status::DeviceError("the layer split puts " + FormatBytes(layout.allocation_bytes[d]) +
                                 " on " + devices[d]->name() + ", which has " + FormatBytes(free) +
                                 " free; " + hint);
    }
  }
  return placement.device_of;
}

namespace {

Status CheckRegionsFit(const TensorDirectory& dir, const std::vector<TensorRegion>& regions,
                       const std::vector<std::shared_ptr<CheckedDevice>>& devices,
                       const std::string& hint) {
  std::vector<uint64_t> bytes(devices.size(), 0);
  for (const TensorRegion& r : regions) {
    if (r.device >= devices.size() || r.tensor >= dir.tensors.size()) continue;  // refused later
    bytes[r.device] = AlignUp(bytes[r.device], kDeviceAlignment) +
                      (r.row_end - r.row_begin) * (r.column_end - r.column_begin);
  }
  for (size_t d = 0; d < devices.size(); ++d) {
    const uint64_t free = devices[d]->Info().free_memory;
    if (free > 0 && bytes[d] > free) {
      return Status::DeviceError("the split puts " + FormatBytes(bytes[d]) + " on " +
                                 devices[d]->name() + ", which has " + FormatBytes(free) +
                                 " free; " + hint);
    }
  }
  return Status::Ok();
}

}  // namespace

Result<std::vector<TensorRegion>> PlaceParts(
    const TensorDirectory& dir, const std::vector<std::shared_ptr<CheckedDevice>>& devices,
    Split split, const std::vector<double>& shares, const std::vector<CutRule>& rules,
    const std::string& hint) {
  HOIST_ASSIGN_OR_RETURN(
      std::vector<TensorRegion> parts,
      CutModel(dir, split, static_cast<uint32_t>(devices.size()), shares, rules));
  HOIST_RETURN_IF_ERROR(CheckRegionsFit(
      dir, parts, devices,
      split == Split::kReplicate ? "every device holds the whole model when replicated" : hint));
  return parts;
}

}  // namespace hoist
