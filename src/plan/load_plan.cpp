#include "plan/load_plan.h"

#include <algorithm>
#include <numeric>

#include "base/units.h"

namespace hoist {

namespace {

Status CheckPlacement(const TensorDirectory& dir, const Placement& placement) {
  if (placement.devices == 0) return Status::InvalidArgument("a placement needs a device");
  if (placement.device_of.empty()) return Status::Ok();
  if (placement.device_of.size() != dir.tensors.size()) {
    return Status::InvalidArgument("the placement names a device for " +
                                   std::to_string(placement.device_of.size()) +
                                   " tensors; the model has " + std::to_string(dir.tensors.size()));
  }
  for (size_t i = 0; i < dir.tensors.size(); ++i) {
    if (placement.device_of[i] >= placement.devices) {
      return Status::InvalidArgument("the placement puts tensor '" + dir.tensors[i].name +
                                     "' on device " + std::to_string(placement.device_of[i]) +
                                     "; there are " + std::to_string(placement.devices));
    }
  }
  return Status::Ok();
}

}  // namespace

Result<DeviceLayout> LayOutTensors(const TensorDirectory& dir, const std::vector<bool>& selected,
                                   const Placement& placement) {
  HOIST_RETURN_IF_ERROR(CheckPlacement(dir, placement));
  DeviceLayout layout;
  layout.device_of.assign(dir.tensors.size(), 0);
  layout.device_offset.assign(dir.tensors.size(), 0);
  layout.allocation_bytes.assign(placement.devices, 0);
  layout.device_tensor_bytes.assign(placement.devices, 0);
  for (uint32_t i = 0; i < dir.tensors.size(); ++i) {
    if (!selected.empty() && !selected[i]) continue;
    const TensorEntry& t = dir.tensors[i];
    const uint32_t d = placement.device_of.empty() ? 0 : placement.device_of[i];
    layout.tensors.push_back(i);
    layout.device_of[i] = d;
    uint64_t& block = layout.allocation_bytes[d];
    block = AlignUp(block, kDeviceAlignment);
    layout.device_offset[i] = block;
    block += t.nbytes;
    layout.device_tensor_bytes[d] += t.nbytes;
    layout.tensor_bytes += t.nbytes;
    layout.largest_tensor = std::max(layout.largest_tensor, t.nbytes);
  }
  return layout;
}

Result<LoadPlan> PlanLoad(const TensorDirectory& dir, const std::vector<bool>& selected,
                          uint64_t chunk_bytes, const Placement& placement) {
  HOIST_ASSIGN_OR_RETURN(const DeviceLayout layout, LayOutTensors(dir, selected, placement));
  return PlanChunks(dir, layout, chunk_bytes);
}

Result<LoadPlan> PlanChunks(const TensorDirectory& dir, const DeviceLayout& layout,
                            uint64_t chunk_bytes) {
  if (chunk_bytes == 0) return Status::InvalidArgument("chunk size must be positive");
  LoadPlan plan;
  static_cast<DeviceLayout&>(plan) = layout;

  // Extents: runs of tensors bound for one device, in one file, whose ranges touch or nearly
  // touch.
  std::vector<uint32_t> order;
  for (uint32_t i : plan.tensors) {
    if (dir.tensors[i].nbytes > 0) order.push_back(i);
  }
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    const TensorEntry& x = dir.tensors[a];
    const TensorEntry& y = dir.tensors[b];
    if (plan.device_of[a] != plan.device_of[b]) return plan.device_of[a] < plan.device_of[b];
    return x.file != y.file ? x.file < y.file : x.offset < y.offset;
  });
  plan.first_chunk.assign(plan.allocation_bytes.size() + 1, 0);
  size_t i = 0;
  while (i < order.size()) {
    const uint32_t device = plan.device_of[order[i]];
    const uint32_t file = dir.tensors[order[i]].file;
    const uint64_t begin = dir.tensors[order[i]].offset;
    uint64_t end = begin + dir.tensors[order[i]].nbytes;
    size_t j = i + 1;
    while (j < order.size() && plan.device_of[order[j]] == device &&
           dir.tensors[order[j]].file == file &&
           dir.tensors[order[j]].offset <= end + kCoalesceGap) {
      end = std::max(end, dir.tensors[order[j]].offset + dir.tensors[order[j]].nbytes);
      ++j;
    }
    // Cut [begin, end) into chunks; each tensor's bytes become segments of the chunks they
    // fall in.
    const size_t first_chunk = plan.chunks.size();
    for (uint64_t at = begin; at < end; at += chunk_bytes) {
      plan.chunks.push_back({device, file, at, std::min(chunk_bytes, end - at), {}});
    }
    for (size_t k = i; k < j; ++k) {
      const uint32_t index = order[k];
      const TensorEntry& t = dir.tensors[index];
      for (uint64_t done = 0; done < t.nbytes;) {
        const uint64_t pos = t.offset + done;
        Chunk& c = plan.chunks[first_chunk + (pos - begin) / chunk_bytes];
        const uint64_t length = std::min(t.nbytes - done, c.offset + c.length - pos);
        c.segments.push_back({index, pos - c.offset, done, length});
        done += length;
      }
    }
    for (size_t c = first_chunk; c < plan.chunks.size(); ++c)
      plan.read_bytes += plan.chunks[c].length;
    i = j;
  }
  // first_chunk[d + 1] counts the chunks of devices up to d.
  for (const Chunk& c : plan.chunks) ++plan.first_chunk[c.device + 1];
  for (size_t d = 1; d < plan.first_chunk.size(); ++d) {
    plan.first_chunk[d] += plan.first_chunk[d - 1];
  }
  return plan;
}

}  // namespace hoist
