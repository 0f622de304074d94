// The device flags that `hoist load`, `verify` and `inspect` share: one device or several
// (--device cuda:0,cuda:1), how a model is placed across several (--split, --tensor-split,
// --split-plan), their translation into the façade's request (api/request.h), and the plan
// described for a person.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "api/request.h"
#include "base/status.h"
#include "device/checked_device.h"
#include "format/tensor_directory.h"

namespace hoist::cli {

struct DeviceFlags {
  std::string device = "auto";       // one device, or several joined by commas
  std::string split = "layer";       // how a model is placed across several
  std::vector<double> tensor_split;  // each device's share; empty: its free memory
  std::string split_plan;            // --split tensor's rule file; empty: the built-in rules
};

// Adds --device, --split, --tensor-split and --split-plan.
void AddDeviceFlags(CLI::App* cmd, DeviceFlags& flags);

// The façade's request for the flags, spelled as the command line spells them (the settings,
// names and callbacks are the caller's to add).
Result<LoadRequest> ToRequest(const DeviceFlags& flags);

// One line per device: what the plan puts there ("cuda:0: layers 0-19 and 3 others,
// 182 tensors, 10.12 GiB (50%)"), and for a tensor split how many tensors each cut took.
std::vector<std::string> DescribePlacement(
    const TensorDirectory& dir, const ModelPlan& plan,
    const std::vector<std::shared_ptr<CheckedDevice>>& devices);

}  // namespace hoist::cli
