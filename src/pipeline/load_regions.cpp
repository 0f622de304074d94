// Loading parts of tensors (slices) as tensors of their own: each region becomes an entry of a
// directory made for the load, read by rows when it takes a column range.
#include <string>
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
  if (r.destination == nullptr) return Status::InvalidArgument(of + ": no destination");
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<LoadedModel>> LoadRegions(const TensorDirectory& dir,
                                                 const std::shared_ptr<CheckedDevice>& device,
                                                 const std::vector<TensorRegion>& regions,
                                                 const LoadOptions& options) {
  if (!options.names.empty() || options.destination || !options.strides.empty() ||
      options.checksum) {
    return Status::InvalidArgument(
        "a load of regions takes no names, destinations, strides or checksum");
  }
  TensorDirectory parts;
  parts.format = dir.format;
  parts.files = dir.files;
  parts.storage = dir.storage;
  LoadOptions o = options;
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
    // Whole rows, or one row: one file range; else rows with a gap between them.
    const bool by_rows = width != r.row_bytes && rows > 1;
    if (by_rows) {
      o.strides.resize(regions.size());
      o.strides[i] = {width, r.row_bytes};
    }
    parts.tensors.push_back(std::move(part));
  }
  parts.IndexNames();
  o.destination = [&regions](size_t i, const TensorEntry&) -> Result<void*> {
    return regions[i].destination;
  };
  return Load(parts, device, o);
}

}  // namespace hoist
