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

// Chunks for tensor t read by rows: as many whole rows as a chunk holds, each chunk from a
// row's first byte to the last row's last column; rows wider than a chunk are read in pieces
// of one row, their columns only.
void PlanRows(const TensorEntry& t, uint32_t index, uint32_t device, const RowStride& s,
              uint64_t chunk_bytes, LoadPlan& plan) {
  const uint64_t rows = t.nbytes / s.width;
  if (s.width > chunk_bytes) {
    for (uint64_t r = 0; r < rows; ++r) {
      for (uint64_t at = 0; at < s.width; at += chunk_bytes) {
        const uint64_t n = std::min(chunk_bytes, s.width - at);
        plan.chunks.push_back(
            {device, t.file, t.offset + r * s.pitch + at, n, {{index, 0, r * s.width + at, n, 0}}});
        plan.read_bytes += n;
      }
    }
    return;
  }
  const uint64_t per_chunk = (chunk_bytes - s.width) / s.pitch + 1;
  for (uint64_t r = 0; r < rows; r += per_chunk) {
    const uint64_t n = std::min(per_chunk, rows - r);
    const uint64_t length = (n - 1) * s.pitch + s.width;
    plan.chunks.push_back({device,
                           t.file,
                           t.offset + r * s.pitch,
                           length,
                           {{index, 0, r * s.width, n * s.width, n}}});
    plan.read_bytes += length;
  }
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

  auto strided = [&](uint32_t i) { return !plan.strides.empty() && plan.strides[i].width != 0; };
  for (uint32_t i : plan.tensors) {
    if (!strided(i)) continue;
    const RowStride& s = plan.strides[i];
    if (s.pitch <= s.width || dir.tensors[i].nbytes % s.width != 0) {
      return Status::InvalidArgument("tensor '" + dir.tensors[i].name + "': rows of " +
                                     std::to_string(s.width) + " bytes " + std::to_string(s.pitch) +
                                     " bytes apart do not make " +
                                     std::to_string(dir.tensors[i].nbytes) + " bytes");
    }
  }
  // Extents: runs of tensors bound for one device, in one file, whose ranges touch or nearly
  // touch; a tensor read by rows is an extent of its own.
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
    if (strided(order[i])) {
      PlanRows(dir.tensors[order[i]], order[i], plan.device_of[order[i]], plan.strides[order[i]],
               chunk_bytes, plan);
      ++i;
      continue;
    }
    const uint32_t device = plan.device_of[order[i]];
    const uint32_t file = dir.tensors[order[i]].file;
    const uint64_t begin = dir.tensors[order[i]].offset;
    uint64_t end = begin + dir.tensors[order[i]].nbytes;
    size_t j = i + 1;
    while (j < order.size() && !strided(order[j]) && plan.device_of[order[j]] == device &&
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
