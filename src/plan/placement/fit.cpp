#include "plan/placement/fit.h"

#include "base/units.h"

namespace hoist {

std::vector<uint64_t> PartBytesPerDevice(const std::vector<TensorRegion>& parts, size_t devices) {
  std::vector<uint64_t> bytes(devices, 0);
  for (const TensorRegion& r : parts) {
    if (r.device >= devices) continue;  // PlaceModel refuses it
    bytes[r.device] = AlignUp(bytes[r.device], kDeviceAlignment) +
                      (r.row_end - r.row_begin) * (r.column_end - r.column_begin);
  }
  return bytes;
}

Status CheckPartsFit(const std::vector<TensorRegion>& parts, const std::vector<DeviceRoom>& devices,
                     const std::string& split, const std::string& hint) {
  const std::vector<uint64_t> bytes = PartBytesPerDevice(parts, devices.size());
  for (size_t d = 0; d < devices.size(); ++d) {
    const uint64_t free = devices[d].free_memory;
    if (free > 0 && bytes[d] > free) {
      return Status::DeviceError("the " + split + " split puts " + FormatBytes(bytes[d]) + " on " +
                                 devices[d].name + ", which has " + FormatBytes(free) + " free; " +
                                 hint);
    }
  }
  return Status::Ok();
}

}  // namespace hoist
