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
#include "plan/load_plan.h"

namespace hoist::cli {

struct DeviceFlags {
  std::string device = "auto";       // one device, or several joined by commas
  std::string split = "layer";       // how a model is placed across several
  std::vector<double> tensor_split;  // each device's share; empty: its free memory
  std::string split_plan;            // --split tensor's rule file; empty: the built-in rules
};

// Where a load puts each tensor.
struct DevicePlan {
  std::string split = "none";         // "none" (one device), "layer", "tensor" or "replicate"
  std::vector<uint32_t> placement;    // layer: per tensor, an index into the devices
  std::vector<TensorRegion> regions;  // tensor, replicate: each device's parts of the tensors
  bool by_regions() const { return split == "tensor" || split == "replicate"; }
};

// Adds --device, --split, --tensor-split and --split-plan.
void AddDeviceFlags(CLI::App* cmd, DeviceFlags& flags);

// The devices named, opened, in order. The same GPU named twice is an invalid argument.
Result<std::vector<std::shared_ptr<CheckedDevice>>> OpenDevices(const DeviceFlags& flags);

// Where each tensor of dir goes: nowhere special for one device; for several, by the split. A
// device that would get more than its free memory is refused (kDeviceError) with the numbers.
Result<DevicePlan> PlaceTensors(const DeviceFlags& flags, const TensorDirectory& dir,
                                const std::vector<std::shared_ptr<CheckedDevice>>& devices);

// One line per device: what the plan puts there ("cuda:0: layers 0-19 and 3 others,
// 182 tensors, 10.12 GiB (50%)"), and for a tensor split how many tensors each cut took.
std::vector<std::string> DescribePlacement(
    const TensorDirectory& dir, const DevicePlan& plan,
    const std::vector<std::shared_ptr<CheckedDevice>>& devices);

}  // namespace hoist::cli
