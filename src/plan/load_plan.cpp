#include "plan/load_plan.h"

#include <algorithm>
#include <numeric>

#include "base/units.h"

namespace hoist {

Result<LoadPlan> PlanLoad(const TensorDirectory& dir, const std::vector<bool>& selected,
                          uint64_t chunk_bytes) {
  if (chunk_bytes == 0) return Status::InvalidArgument("chunk size must be positive");
  LoadPlan plan;
  plan.device_offset.assign(dir.tensors.size(), 0);
  for (uint32_t i = 0; i < dir.tensors.size(); ++i) {
    if (!selected.empty() && !selected[i]) continue;
    const TensorEntry& t = dir.tensors[i];
    plan.tensors.push_back(i);
    plan.allocation_bytes = AlignUp(plan.allocation_bytes, kDeviceAlignment);
    plan.device_offset[i] = plan.allocation_bytes;
    plan.allocation_bytes += t.nbytes;
    plan.tensor_bytes += t.nbytes;
    plan.largest_tensor = std::max(plan.largest_tensor, t.nbytes);
  }

  // Extents: runs of tensors in one file whose ranges touch or nearly touch.
  std::vector<uint32_t> order;
  for (uint32_t i : plan.tensors) {
    if (dir.tensors[i].nbytes > 0) order.push_back(i);
  }
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    const TensorEntry& x = dir.tensors[a];
    const TensorEntry& y = dir.tensors[b];
    return x.file != y.file ? x.file < y.file : x.offset < y.offset;
  });
  size_t i = 0;
  while (i < order.size()) {
    const uint32_t file = dir.tensors[order[i]].file;
    const uint64_t begin = dir.tensors[order[i]].offset;
    uint64_t end = begin + dir.tensors[order[i]].nbytes;
    size_t j = i + 1;
    while (j < order.size() && dir.tensors[order[j]].file == file &&
           dir.tensors[order[j]].offset <= end + kCoalesceGap) {
      end = std::max(end, dir.tensors[order[j]].offset + dir.tensors[order[j]].nbytes);
      ++j;
    }
    // Cut [begin, end) into chunks; each tensor's bytes become segments of the chunks they
    // fall in.
    const size_t first_chunk = plan.chunks.size();
    for (uint64_t at = begin; at < end; at += chunk_bytes) {
      plan.chunks.push_back({file, at, std::min(chunk_bytes, end - at), {}});
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
  return plan;
}

}  // namespace hoist
