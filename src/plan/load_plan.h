// Planning a load: which device each tensor goes to and where in that device's one allocation,
// which file ranges to read (adjacent tensors bound for one device coalesced into extents),
// and how the extents are cut into chunks.
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "format/tensor_directory.h"

namespace hoist {

inline constexpr uint64_t kDeviceAlignment = 256;
// Tensors closer than this in a file are read as one extent (reading a small gap costs less
// than another request).
inline constexpr uint64_t kCoalesceGap = 4096;

// The part of a chunk that belongs to one tensor.
struct Segment {
  uint32_t tensor = 0;         // index into TensorDirectory::tensors
  uint64_t chunk_offset = 0;   // where the segment starts inside the chunk
  uint64_t tensor_offset = 0;  // where it starts inside the tensor (on the device)
  uint64_t length = 0;         // bytes it puts on the device
  // Nonzero for a tensor read by rows (RowStride): the segment is `rows` rows of the stride's
  // width, its pitch apart in the chunk, and length is rows * width.
  uint64_t rows = 0;
  uint32_t device = 0;  // where it goes: its tensor's device, not always the chunk's
  // Once on the device, the same bytes are copied from there to the same place in each of the
  // tensor's replicas (LoadPlan::replicas) over the devices' peer link.
  bool forward = false;
};

// A tensor whose device bytes are a column range of rows in the file: from its offset, rows of
// `width` bytes, `pitch` (> width) bytes apart, packed on the device (its nbytes is a whole
// number of rows). What a column slice is: its file range is read whole, once, into staging,
// and only the columns cross to the device.
struct RowStride {
  uint64_t width = 0;
  uint64_t pitch = 0;
};

// One read: a file range that lands in one staging buffer and goes to one device or, for a
// read group, to several.
struct Chunk {
  uint32_t device = 0;  // whose readers and staging read it: an index into the load's devices
  uint32_t file = 0;
  uint64_t offset = 0;  // absolute, in the file
  uint64_t length = 0;
  std::vector<Segment> segments;  // in tensor-offset order for each tensor
};

// Part of a tensor seen as rows of row_bytes (its nbytes a whole number of them): rows
// [row_begin, row_end), bytes [column_begin, column_end) of each, packed
// ((row_end - row_begin) * (column_end - column_begin) bytes). Row slices are one file range;
// column slices read their rows' range once into staging and copy only the columns.
struct TensorRegion {
  size_t tensor = 0;  // index into the directory
  uint64_t row_bytes = 0;
  uint64_t row_begin = 0;
  uint64_t row_end = 0;
  uint64_t column_begin = 0;
  uint64_t column_end = 0;
  void* destination = nullptr;  // the caller's memory on the region's device; null: hoist's
  uint32_t device = 0;          // index into the load's devices
};

// Which device each tensor goes to.
struct Placement {
  uint32_t devices = 1;
  std::vector<uint32_t> device_of;  // per directory tensor, below `devices`; empty: all on 0
};

// Where each selected tensor lives: its device and its offset in that device's one block.
struct TensorLayout {
  std::vector<uint32_t> tensors;              // the tensors loaded, in directory order
  std::vector<uint32_t> device_of;            // per directory tensor: its device
  std::vector<uint64_t> device_offset;        // per directory tensor: offset in its block
  std::vector<uint64_t> allocation_bytes;     // per device: one block, each tensor 256-aligned
  std::vector<uint64_t> device_tensor_bytes;  // per device: the loaded tensors' bytes
  uint64_t tensor_bytes = 0;                  // sum of the loaded tensors' sizes
  uint64_t largest_tensor = 0;
};

// How tensors are read, beyond one file range each: by rows, once for several devices.
struct ReadSpec {
  // Per directory tensor, for tensors read by rows (width 0: contiguous); empty: none is.
  std::vector<RowStride> strides;
  // Per directory tensor: tensors with the same nonzero number are read once for all of them
  // (the parts of one tensor bound for several devices): either contiguous ranges of one file,
  // read as their union, or rows at one pitch (column ranges of the same rows), read as whole
  // rows. Empty: none is.
  std::vector<uint32_t> read_groups;
  // With read groups whose members are one file range on distinct devices that reach each
  // other: each member takes 1/N of every chunk from staging and forwards it to the others
  // over the peer link, so each host link carries 1/N of the bytes.
  bool forward_replicas = false;
  // Per device: which devices' staging its copies may read. 0: any (host memory); else only
  // staging of devices with the same number (pinned memory that serves every device of a kind,
  // as portable pinned memory does every GPU). Empty: every device one kind.
  std::vector<uint32_t> staging_domain;
};

// The layout and the reads that fill it.
struct LoadPlan : TensorLayout, ReadSpec {
  std::vector<Chunk> chunks;  // in (device, file, offset) order
  // Per directory tensor, with forward_replicas: the other members of its read group that take
  // its forwarded segments; empty: none.
  std::vector<std::vector<uint32_t>> replicas;
  // Per device d, its chunks are [first_chunk[d], first_chunk[d + 1]).
  std::vector<size_t> first_chunk;
  uint64_t read_bytes = 0;  // sum of chunk lengths (tensor bytes plus small gaps)
};

// Which of dir's tensors `names` select, for LayOutTensors: empty when names is (all of them).
// kNotFound naming the first name the model lacks.
Result<std::vector<bool>> SelectTensors(const TensorDirectory& dir,
                                        const std::vector<std::string>& names);
// selected: which tensors to load (empty: all). A placement that names a device outside its
// count, or that does not cover every tensor, is kInvalidArgument.
Result<TensorLayout> LayOutTensors(const TensorDirectory& dir, const std::vector<bool>& selected,
                                   const Placement& placement = {});
// Cuts the layout's file ranges, read as `read` says, into chunks of at most chunk_bytes (> 0).
Result<LoadPlan> PlanChunks(const TensorDirectory& dir, const TensorLayout& layout,
                            const ReadSpec& read, uint64_t chunk_bytes);
// Both at once.
Result<LoadPlan> PlanLoad(const TensorDirectory& dir, const std::vector<bool>& selected,
                          uint64_t chunk_bytes, const Placement& placement = {});

}  // namespace hoist
