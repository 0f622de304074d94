// A packed model (format/packed.h) loaded onto devices that decode it themselves
// (DeviceCapabilities::decodes_exponents): each coded tensor's coded stream and kept bytes are
// read and copied as they are stored, by the same readers, staging buffers and copy queues as
// any tensor, into a scratch ring on its device; once a tensor's parts have landed, its device
// decodes them into the tensor's place while the next tensors stream. So the link and the disk
// carry the packed bytes, not the decoded ones. The indexes and decoding tables, which the
// reader has checked, go over before streaming. Stored (raw) tensors load as in any model.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "device/checked_device.h"
#include "format/tensor_directory.h"
#include "pipeline/loader.h"

namespace hoist {

// Whether Load takes dir this way: a packed model, every device able to decode, whole tensors
// without checksums (those are of the bytes the host stages, which are not the tensors' here),
// and every coded tensor's parts one range of its file as hoist pack writes them. Otherwise the
// host decodes as it reads.
bool DecodesOnDevice(const TensorDirectory& dir,
                     const std::vector<std::shared_ptr<CheckedDevice>>& devices,
                     const LoadOptions& options, const ReadSpec& read);

// For a load that does not decode on its device: why a packed model's coded tensors are
// decoded on the host for a device that is not the host (at the CPU's decode rate, not the
// link's), in words for the report's fallbacks; empty when none is, or every device is the host.
std::string HostDecodeFor(const TensorDirectory& dir,
                          const std::vector<std::shared_ptr<CheckedDevice>>& devices,
                          const LoadOptions& options);

// Load's arguments; REQUIRES: DecodesOnDevice. A corrupt group is kInvalidModel naming the
// file, the tensor and the group; a decode that does not finish within the stall timeout is
// kStalled naming the tensor, and leaves the device memory it writes allocated.
Result<std::unique_ptr<LoadedModel>> LoadDecodingOnDevice(
    const TensorDirectory& dir, const std::vector<std::shared_ptr<CheckedDevice>>& devices,
    const LoadOptions& options, const std::vector<uint32_t>& placement);

}  // namespace hoist
