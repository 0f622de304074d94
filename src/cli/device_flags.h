// The device flags that `hoist load`, `verify` and `inspect` share: one device or several
// (--device cuda:0,cuda:1), how a model is placed across several (--split, --tensor-split),
// and the one translation of them into opened devices and a placement.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "base/status.h"
#include "device/checked_device.h"
#include "format/tensor_directory.h"

namespace hoist::cli {

struct DeviceFlags {
  std::string device = "auto";       // one device, or several joined by commas
  std::string split = "layer";       // how a model is placed across several
  std::vector<double> tensor_split;  // each device's share; empty: its free memory
};

// Adds --device, --split and --tensor-split.
void AddDeviceFlags(CLI::App* cmd, DeviceFlags& flags);

// The devices named, opened, in order. The same GPU named twice is an invalid argument.
Result<std::vector<std::shared_ptr<CheckedDevice>>> OpenDevices(const DeviceFlags& flags);

// Which device each tensor of dir goes to: empty for one device; for several, by the split.
// A device that would get more than its free memory is refused (kDeviceError) with the numbers.
Result<std::vector<uint32_t>> PlaceTensors(
    const DeviceFlags& flags, const TensorDirectory& dir,
    const std::vector<std::shared_ptr<CheckedDevice>>& devices);

// One line per device: what the placement puts there ("cuda:0: layers 0-19 and 3 others,
// 182 tensors, 10.12 GiB (50%)").
std::vector<std::string> DescribePlacement(
    const TensorDirectory& dir, const std::vector<uint32_t>& placement,
    const std::vector<std::shared_ptr<CheckedDevice>>& devices);

}  // namespace hoist::cli
