#include "plan/load_plan.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <string>

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
        plan.chunks.push_back({device,
                               t.file,
                               t.offset + r * s.pitch + at,
                               n,
                               {{index, 0, r * s.width + at, n, 0, device}}});
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
                           {{index, 0, r * s.width, n * s.width, n, device}}});
    plan.read_bytes += length;
  }
}

// One tensor's contiguous range, cut into chunks read by `device`'s readers.
void PlanRange(const TensorEntry& t, uint32_t index, uint32_t device, uint64_t chunk_bytes,
               LoadPlan& plan) {
  for (uint64_t at = 0; at < t.nbytes; at += chunk_bytes) {
    const uint64_t n = std::min(chunk_bytes, t.nbytes - at);
    plan.chunks.push_back({device, t.file, t.offset + at, n, {{index, 0, at, n, 0, device}}});
    plan.read_bytes += n;
  }
}

// Chunks of a read group not yet given to a device's readers.
constexpr uint32_t kUnassigned = UINT32_MAX;
// Forwarded pieces start on this boundary: whole pages for the DMA engines.
constexpr uint64_t kPieceAlignment = 4096;

// Whether device `lane`'s staging may feed copies to `device`.
bool StagingServes(const LoadPlan& plan, uint32_t lane, uint32_t device) {
  if (plan.staging_domain.empty() || lane == device) return true;
  return plan.staging_domain[device] == 0 ||
         plan.staging_domain[device] == plan.staging_domain[lane];
}

// The devices whose staging may feed every one of the members' devices and which have
// readers.
std::vector<uint32_t> ReadersFor(const LoadPlan& plan, const std::vector<uint32_t>& members) {
  std::vector<uint32_t> lanes;
  for (uint32_t lane = 0; lane < plan.allocation_bytes.size(); ++lane) {
    if (plan.device_tensor_bytes[lane] == 0) continue;
    const bool serves = std::all_of(members.begin(), members.end(), [&](uint32_t i) {
      return StagingServes(plan, lane, plan.device_of[i]);
    });
    if (serves) lanes.push_back(lane);
  }
  return lanes;
}

// A read group's members, as PlanGroup sees them.
struct Group {
  const TensorDirectory& dir;
  const std::vector<uint32_t>& members;
  uint64_t chunk_bytes;
  LoadPlan& plan;
  uint32_t file = 0;
  uint64_t begin = UINT64_MAX;  // the members' file range
  uint64_t end = 0;
  bool any_strided = false;
  bool same_range = true;  // every member is the same file range

  RowStride stride(uint32_t i) const {
    return plan.strides.empty() ? RowStride{} : plan.strides[i];
  }
  Status Fail(const std::string& why) const {
    return Status::InvalidArgument("read group of '" + dir.tensors[members[0]].name + "': " + why);
  }
  // Each member read for its own device.
  void EachAlone() const {
    for (uint32_t i : members) {
      if (stride(i).width != 0) {
        PlanRows(dir.tensors[i], i, plan.device_of[i], stride(i), chunk_bytes, plan);
      } else {
        PlanRange(dir.tensors[i], i, plan.device_of[i], chunk_bytes, plan);
      }
    }
  }
};

// Forwarding: 1/N of chunk c (aligned pieces) to each member, which passes it on to the others.
void SplitChunkAmongMembers(const Group& g, Chunk& c) {
  const uint64_t count = g.members.size();
  const uint64_t n = c.length;
  const uint64_t piece = AlignUp((n + count - 1) / count, kPieceAlignment);
  for (uint64_t k = 0; k < count && k * piece < n; ++k) {
    const uint32_t i = g.members[k];
    c.segments.push_back({i, k * piece, c.offset - g.begin + k * piece,
                          std::min(piece, n - k * piece), 0, g.plan.device_of[i], true});
  }
}

// Chunk c's bytes to every member that covers them.
void ChunkToEveryCoveringMember(const Group& g, Chunk& c) {
  for (uint32_t i : g.members) {
    const TensorEntry& t = g.dir.tensors[i];
    const uint64_t from = std::max(c.offset, t.offset);
    const uint64_t to = std::min(c.offset + c.length, t.offset + t.nbytes);
    if (from >= to) continue;
    c.segments.push_back({i, from - c.offset, from - t.offset, to - from, 0, g.plan.device_of[i]});
  }
}

// Whole members: the group's range in chunks, each chunk's bytes to every member that covers
// them, or, forwarding (one range on distinct devices), 1/N of each chunk to each member and on
// to the others from there.
void PlanWholeGroup(const Group& g, bool forward) {
  LoadPlan& plan = g.plan;
  std::vector<uint32_t> devices;
  devices.reserve(g.members.size());
  for (uint32_t i : g.members) devices.push_back(plan.device_of[i]);
  std::sort(devices.begin(), devices.end());
  const bool distinct = std::adjacent_find(devices.begin(), devices.end()) == devices.end();
  const bool forwarding = forward && g.same_range && distinct;
  if (forwarding) {
    for (uint32_t i : g.members) {
      for (uint32_t j : g.members) {
        if (j != i) plan.replicas[i].push_back(j);
      }
    }
  }
  for (uint64_t at = g.begin; at < g.end; at += g.chunk_bytes) {
    const uint64_t n = std::min(g.chunk_bytes, g.end - at);
    Chunk c{kUnassigned, g.file, at, n, {}};
    if (forwarding) {
      SplitChunkAmongMembers(g, c);
    } else {
      ChunkToEveryCoveringMember(g, c);
    }
    plan.read_bytes += n;
    plan.chunks.push_back(std::move(c));
  }
}

// Rows at one pitch: every member covers the same rows, each its own columns (a contiguous
// member covers whole rows); chunks of whole rows, each member's columns of them.
Status PlanRowGroup(const Group& g) {
  LoadPlan& plan = g.plan;
  uint64_t pitch = 0;
  for (uint32_t i : g.members) {
    if (g.stride(i).width == 0) continue;
    if (pitch != 0 && g.stride(i).pitch != pitch)
      return g.Fail("its rows lie at different pitches");
    pitch = g.stride(i).pitch;
  }
  if (pitch == 0) return g.Fail("no member is read by rows");  // PlanGroup sends only those
  uint64_t rows = 0;
  uint64_t span_end = 0;
  for (uint32_t i : g.members) {
    const TensorEntry& t = g.dir.tensors[i];
    const RowStride stride = g.stride(i);
    const uint64_t width = stride.width != 0 ? stride.width : pitch;
    if (t.nbytes % width != 0) return g.Fail("'" + t.name + "' is not whole rows");
    const uint64_t n = t.nbytes / width;
    if (rows != 0 && n != rows) return g.Fail("its members have different numbers of rows");
    rows = n;
    span_end = std::max(span_end, t.offset + width);
  }
  const uint64_t span = span_end - g.begin;
  if (span > pitch) return g.Fail("its members do not share rows");
  if (span > g.chunk_bytes) {
    g.EachAlone();  // rows wider than a chunk
    return Status::Ok();
  }
  const uint64_t per_chunk = (g.chunk_bytes - span) / pitch + 1;
  for (uint64_t r = 0; r < rows; r += per_chunk) {
    const uint64_t n = std::min(per_chunk, rows - r);
    Chunk c{kUnassigned, g.file, g.begin + r * pitch, (n - 1) * pitch + span, {}};
    for (uint32_t i : g.members) {
      const TensorEntry& t = g.dir.tensors[i];
      const uint64_t width = g.stride(i).width;
      if (width != 0) {
        c.segments.push_back({i, t.offset - g.begin, r * width, n * width, n, plan.device_of[i]});
      } else {
        c.segments.push_back({i, t.offset - g.begin, r * pitch, n * pitch, 0, plan.device_of[i]});
      }
    }
    plan.read_bytes += c.length;
    plan.chunks.push_back(std::move(c));
  }
  return Status::Ok();
}

// A read group's chunks: its members' file ranges read once, each chunk's bytes copied to every
// member that covers them (or, forwarding, 1/N to each and on from there). Its chunks are left
// for the devices' readers that ReadersFor allows.
Status PlanGroup(const TensorDirectory& dir, const std::vector<uint32_t>& members,
                 uint64_t chunk_bytes, bool forward, LoadPlan& plan) {
  Group g{dir, members, chunk_bytes, plan};
  const TensorEntry& first = dir.tensors[members[0]];
  g.file = first.file;
  for (uint32_t i : members) {
    const TensorEntry& t = dir.tensors[i];
    if (t.file != first.file) return g.Fail("its members lie in different files");
    g.any_strided = g.any_strided || g.stride(i).width != 0;
    g.same_range = g.same_range && t.offset == first.offset && t.nbytes == first.nbytes;
    g.begin = std::min(g.begin, t.offset);
    g.end = std::max(g.end, t.offset + t.nbytes);
  }
  if (ReadersFor(plan, members).empty()) {
    // No device's staging may feed all of them (host memory and a GPU's pinned memory, for
    // a device that needs pinned memory): each member is read for its own device.
    g.EachAlone();
    return Status::Ok();
  }
  if (!g.any_strided) {
    PlanWholeGroup(g, forward);
    return Status::Ok();
  }
  return PlanRowGroup(g);
}

// Every tensor read by rows is whole rows of its stride.
Status CheckStrides(const TensorDirectory& dir, const LoadPlan& plan) {
  for (uint32_t i : plan.tensors) {
    if (plan.strides.empty() || plan.strides[i].width == 0) continue;
    const RowStride& s = plan.strides[i];
    if (s.pitch <= s.width || dir.tensors[i].nbytes % s.width != 0) {
      return Status::InvalidArgument("tensor '" + dir.tensors[i].name + "': rows of " +
                                     std::to_string(s.width) + " bytes " + std::to_string(s.pitch) +
                                     " bytes apart do not make " +
                                     std::to_string(dir.tensors[i].nbytes) + " bytes");
    }
  }
  return Status::Ok();
}

// Read groups of two or more members, which are planned apart (a group of one is an ordinary
// tensor).
std::map<uint32_t, std::vector<uint32_t>> ReadGroups(const TensorDirectory& dir,
                                                     const LoadPlan& plan) {
  std::map<uint32_t, std::vector<uint32_t>> groups;
  for (uint32_t i : plan.tensors) {
    if (!plan.read_groups.empty() && plan.read_groups[i] != 0 && dir.tensors[i].nbytes > 0) {
      groups[plan.read_groups[i]].push_back(i);
    }
  }
  std::erase_if(groups, [](const auto& g) { return g.second.size() < 2; });
  return groups;
}

// Extents: runs of the tensors in `order` (sorted by device, file and offset) bound for one
// device, in one file, whose ranges touch or nearly touch, cut into chunks; each tensor's bytes
// become segments of the chunks they fall in. A tensor read by rows is an extent of its own.
void PlanExtents(const TensorDirectory& dir, const std::vector<uint32_t>& order,
                 uint64_t chunk_bytes, LoadPlan& plan) {
  auto strided = [&](uint32_t i) { return !plan.strides.empty() && plan.strides[i].width != 0; };
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
        c.segments.push_back({index, pos - c.offset, done, length, 0, device});
        done += length;
      }
    }
    for (size_t c = first_chunk; c < plan.chunks.size(); ++c)
      plan.read_bytes += plan.chunks[c].length;
    i = j;
  }
}

// Each group chunk (from `planned` on) goes to the readers of the device with the least read
// for its share (readers are spread by the devices' bytes).
void AssignGroupChunks(size_t planned, LoadPlan& plan) {
  const size_t devices = plan.allocation_bytes.size();
  std::vector<double> assigned(devices, 0);
  for (size_t k = 0; k < planned; ++k) {
    assigned[plan.chunks[k].device] += static_cast<double>(plan.chunks[k].length);
  }
  for (size_t k = planned; k < plan.chunks.size(); ++k) {
    Chunk& c = plan.chunks[k];
    if (c.device != kUnassigned) {
      assigned[c.device] += static_cast<double>(c.length);
      continue;
    }
    // Forwards copy device to device: only the segments read the staging.
    std::vector<uint32_t> targets;
    targets.reserve(c.segments.size());
    for (const Segment& s : c.segments) targets.push_back(s.tensor);
    double best = 0;
    for (uint32_t d : ReadersFor(plan, targets)) {
      const auto share = static_cast<double>(plan.device_tensor_bytes[d]);
      const double load = (assigned[d] + static_cast<double>(c.length)) / share;
      if (c.device == kUnassigned || load < best) {
        c.device = d;
        best = load;
      }
    }
    assigned[c.device] += static_cast<double>(c.length);
  }
}

// Chunks in device, file and offset order; first_chunk[d] where device d's begin.
void OrderChunksByDevice(LoadPlan& plan) {
  std::stable_sort(plan.chunks.begin(), plan.chunks.end(), [](const Chunk& a, const Chunk& b) {
    if (a.device != b.device) return a.device < b.device;
    return a.file != b.file ? a.file < b.file : a.offset < b.offset;
  });
  plan.first_chunk.assign(plan.allocation_bytes.size() + 1, 0);
  // first_chunk[d + 1] counts the chunks of devices up to d.
  for (const Chunk& c : plan.chunks) ++plan.first_chunk[c.device + 1];
  for (size_t d = 1; d < plan.first_chunk.size(); ++d) {
    plan.first_chunk[d] += plan.first_chunk[d - 1];
  }
}

}  // namespace

Result<std::vector<bool>> SelectTensors(const TensorDirectory& dir,
                                        const std::vector<std::string>& names) {
  std::vector<bool> selected;
  if (names.empty()) return selected;
  selected.assign(dir.tensors.size(), false);
  for (const std::string& name : names) {
    const TensorEntry* t = dir.Find(name);
    if (t == nullptr) return Status::NotFound("no tensor named '" + name + "' in the model");
    selected[static_cast<size_t>(t - dir.tensors.data())] = true;
  }
  return selected;
}

Result<TensorLayout> LayOutTensors(const TensorDirectory& dir, const std::vector<bool>& selected,
                                   const Placement& placement) {
  HOIST_RETURN_IF_ERROR(CheckPlacement(dir, placement));
  TensorLayout layout;
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
  HOIST_ASSIGN_OR_RETURN(const TensorLayout layout, LayOutTensors(dir, selected, placement));
  return PlanChunks(dir, layout, {}, chunk_bytes);
}

Result<LoadPlan> PlanChunks(const TensorDirectory& dir, const TensorLayout& layout,
                            const ReadSpec& read, uint64_t chunk_bytes) {
  if (chunk_bytes == 0) return Status::InvalidArgument("chunk size must be positive");
  LoadPlan plan;
  static_cast<TensorLayout&>(plan) = layout;
  static_cast<ReadSpec&>(plan) = read;
  HOIST_RETURN_IF_ERROR(CheckStrides(dir, plan));
  const std::map<uint32_t, std::vector<uint32_t>> groups = ReadGroups(dir, plan);
  std::vector<bool> in_group(dir.tensors.size(), false);
  for (const auto& [id, members] : groups) {
    for (uint32_t i : members) in_group[i] = true;
  }
  std::vector<uint32_t> order;
  for (uint32_t i : plan.tensors) {
    if (dir.tensors[i].nbytes > 0 && !in_group[i]) order.push_back(i);
  }
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    const TensorEntry& x = dir.tensors[a];
    const TensorEntry& y = dir.tensors[b];
    if (plan.device_of[a] != plan.device_of[b]) return plan.device_of[a] < plan.device_of[b];
    return x.file != y.file ? x.file < y.file : x.offset < y.offset;
  });
  PlanExtents(dir, order, chunk_bytes, plan);
  const size_t planned = plan.chunks.size();
  if (!plan.forward_replicas || groups.empty()) {
    plan.forward_replicas = false;
  } else {
    plan.replicas.assign(dir.tensors.size(), {});
  }
  for (const auto& [id, members] : groups) {
    HOIST_RETURN_IF_ERROR(PlanGroup(dir, members, chunk_bytes, plan.forward_replicas, plan));
  }
  AssignGroupChunks(planned, plan);
  OrderChunksByDevice(plan);
  return plan;
}

}  // namespace hoist
