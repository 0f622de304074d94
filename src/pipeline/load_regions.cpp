// Loading parts of tensors (slices) as tensors of their own: each region becomes an entry of a
// directory made for the load, read by rows when it takes a column range, and regions that
// cover the same rows of one tensor are read once for all of them.
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "pipeline/loader.h"

namespace hoist {
namespace {

Status CheckRegion(const TensorDirectory& dir, const TensorRegion& r, size_t i) {
  const std::string where = "region " + std::to_string(i);
  if (r.tensor >= dir.tensors.size()) {
    return Status::InvalidArgument(where + " names tensor " + std::to_string(r.tensor) +
                                   "; the model has " + std::to_string(dir.tensors.size()));
  }
  const TensorEntry& t = dir.tensors[r.tensor];
  const std::string of = where + " of '" + t.name + "' (" + std::to_string(t.nbytes) + " bytes)";
  if (r.row_bytes == 0 || t.nbytes % r.row_bytes != 0) {
    return Status::InvalidArgument(of + ": rows of " + std::to_string(r.row_bytes) +
                                   " bytes do not divide it");
  }
  const uint64_t rows = t.nbytes / r.row_bytes;
  if (r.row_begin >= r.row_end || r.row_end > rows) {
    return Status::InvalidArgument(of + ": rows [" + std::to_string(r.row_begin) + ", " +
                                   std::to_string(r.row_end) + ") are not a range of its " +
                                   std::to_string(rows));
  }
  if (r.column_begin >= r.column_end || r.column_end > r.row_bytes) {
    return Status::InvalidArgument(of + ": bytes [" + std::to_string(r.column_begin) + ", " +
                                   std::to_string(r.column_end) + ") are not a range of its " +
                                   std::to_string(r.row_bytes) + "-byte rows");
  }
  return Status::Ok();
}

// Whole rows, or one row, are one file range; else rows with a gap between them.
bool ByRows(const TensorRegion& r) {
  return r.column_end - r.column_begin != r.row_bytes && r.row_end - r.row_begin > 1;
}

}  // namespace

Result<TensorDirectory> RegionDirectory(const TensorDirectory& dir,
                                        const std::vector<TensorRegion>& regions) {
  TensorDirectory parts;
  parts.format = dir.format;
  parts.files = dir.files;
  parts.storage = dir.storage;
  for (size_t i = 0; i < regions.size(); ++i) {
    const TensorRegion& r = regions[i];
    HOIST_RETURN_IF_ERROR(CheckRegion(dir, r, i));
    const TensorEntry& t = dir.tensors[r.tensor];
    const uint64_t rows = r.row_end - r.row_begin;
    const uint64_t width = r.column_end - r.column_begin;
    TensorEntry part;
    part.name = t.name + " rows [" + std::to_string(r.row_begin) + ", " +
                std::to_string(r.row_end) + ") bytes [" + std::to_string(r.column_begin) + ", " +
                std::to_string(r.column_end) + ")";
    part.dtype = t.dtype;
    part.shape = {rows, width};
    part.file = t.file;
    part.offset = t.offset + r.row_begin * r.row_bytes + r.column_begin;
    part.nbytes = rows * width;
    parts.tensors.push_back(std::move(part));
  }
  parts.IndexNames();
  return parts;
}

Result<std::unique_ptr<LoadedModel>> LoadRegions(
    const TensorDirectory& dir, const std::vector<std::shared_ptr<CheckedDevice>>& devices,
    const std::vector<TensorRegion>& regions, const LoadOptions& options) {
  if (!options.names.empty() || options.destination || options.checksum) {
    return Status::InvalidArgument("a load of regions takes no names, destinations or checksum");
  }
  HOIST_ASSIGN_OR_RETURN(const TensorDirectory parts, RegionDirectory(dir, regions));
  size_t with_destination = 0;
  for (size_t i = 0; i < regions.size(); ++i) {
    if (regions[i].device >= devices.size()) {
      return Status::InvalidArgument("region " + std::to_string(i) + " is for device " +
                                     std::to_string(regions[i].device) + "; the load has " +
                                     std::to_string(devices.size()));
    }
    if (regions[i].destination != nullptr) ++with_destination;
  }
  if (with_destination != 0 && with_destination != regions.size()) {
    return Status::InvalidArgument(std::to_string(with_destination) + " of " +
                                   std::to_string(regions.size()) +
                                   " regions have a destination: give every region one or none");
  }
  LoadOptions o = options;
  ReadSpec read;
  // Regions of the same rows of a tensor: one read group.
  std::map<std::tuple<size_t, uint64_t, uint64_t, uint64_t>, std::vector<uint32_t>> same_rows;
  for (size_t i = 0; i < regions.size(); ++i) {
    const TensorRegion& r = regions[i];
    if (ByRows(r)) {
      read.strides.resize(regions.size());
      read.strides[i] = {r.column_end - r.column_begin, r.row_bytes};
    }
    same_rows[{r.tensor, r.row_bytes, r.row_begin, r.row_end}].push_back(static_cast<uint32_t>(i));
  }
  uint32_t group = 0;
  for (const auto& [rows, members] : same_rows) {
    if (members.size() < 2) continue;
    read.read_groups.resize(regions.size());
    ++group;
    for (uint32_t i : members) read.read_groups[i] = group;
  }
  std::vector<uint32_t> placement;
  if (devices.size() > 1) {
    placement.resize(regions.size());
    for (size_t i = 0; i < regions.size(); ++i) placement[i] = regions[i].device;
  }
  if (with_destination != 0) {
    o.destination = [&regions](size_t i, const TensorEntry&) -> Result<void*> {
      return regions[i].destination;
    };
  }
  return Load(parts, devices, o, placement, read);
}

Result<std::unique_ptr<LoadedModel>> LoadRegions(const TensorDirectory& dir,
                                                 const std::shared_ptr<CheckedDevice>& device,
                                                 const std::vector<TensorRegion>& regions,
                                                 const LoadOptions& options) {
  return LoadRegions(dir, std::vector<std::shared_ptr<CheckedDevice>>{device}, regions, options);
}

}  // namespace hoist
