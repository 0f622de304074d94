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
};

// A tensor whose device bytes are a column range of rows in the file: from its offset, rows of
// `width` bytes, `pitch` (> width) bytes apart, packed on the device (its nbytes is a whole
// number of rows). What a column slice is: its file range is read whole, once, into staging,
// and only the columns cross to the device.
struct RowStride {
  uint64_t width = 0;
  uint64_t pitch = 0;
};

// One read: a file range that lands in one staging buffer and goes to one device.
struct Chunk {
  uint32_t device = 0;  // index into the load's devices
  uint32_t file = 0;
  uint64_t offset = 0;  // absolute, in the file
  uint64_t length = 0;
  std::vector<Segment> segments;  // in tensor-offset order for each tensor
};

// Which device each tensor goes to.
struct Placement {
  uint32_t devices = 1;
  std::vector<uint32_t> device_of;  // per directory tensor, below `devices`; empty: all on 0
};

// Where each selected tensor lives: its device and its offset in that device's one block.
struct DeviceLayout {
  std::vector<uint32_t> tensors;              // the tensors loaded, in directory order
  std::vector<uint32_t> device_of;            // per directory tensor: its device
  std::vector<uint64_t> device_offset;        // per directory tensor: offset in its block
  std::vector<uint64_t> allocation_bytes;     // per device: one block, each tensor 256-aligned
  std::vector<uint64_t> device_tensor_bytes;  // per device: the loaded tensors' bytes
  uint64_t tensor_bytes = 0;                  // sum of the loaded tensors' sizes
  uint64_t largest_tensor = 0;
  // Per directory tensor, for tensors read by rows (width 0: contiguous); empty: none is.
  std::vector<RowStride> strides;
};

// The layout and the reads that fill it.
struct LoadPlan : DeviceLayout {
  std::vector<Chunk> chunks;  // in (device, file, offset) order
  // Per device d, its chunks are [first_chunk[d], first_chunk[d + 1]).
  std::vector<size_t> first_chunk;
  uint64_t read_bytes = 0;  // sum of chunk lengths (tensor bytes plus small gaps)
};

// selected: which tensors to load (empty: all). A placement that names a device outside its
// count, or that does not cover every tensor, is kInvalidArgument.
Result<DeviceLayout> LayOutTensors(const TensorDirectory& dir, const std::vector<bool>& selected,
                                   const Placement& placement = {});
// Cuts the layout's file ranges into chunks of at most chunk_bytes (> 0).
Result<LoadPlan> PlanChunks(const TensorDirectory& dir, const DeviceLayout& layout,
                            uint64_t chunk_bytes);
// Both at once.
Result<LoadPlan> PlanLoad(const TensorDirectory& dir, const std::vector<bool>& selected,
                          uint64_t chunk_bytes, const Placement& placement = {});

}  // namespace hoist
