#include "cli/device_flags.h"

#include <algorithm>
#include <cstdio>
#include <set>

#include "base/units.h"
#include "cli/load_flags.h"
#include "pipeline/device_placement.h"
#include "plan/layer_split.h"

namespace hoist::cli {

void AddDeviceFlags(CLI::App* cmd, DeviceFlags& flags) {
  cmd->add_option("--device", flags.device,
                  "auto, host, sim[:key=value,...] or cuda:N; several joined by commas "
                  "(cuda:0,cuda:1) place the model across them")
      ->default_str("auto");
  cmd->add_option("--split", flags.split,
                  "how a model is placed across several devices: layer (consecutive layers per "
                  "device, embeddings with the first, the output head with the last)")
      ->check(CLI::IsMember({"layer"}))
      ->default_str("layer");
  cmd->add_option("--tensor-split", flags.tensor_split,
                  "each device's share of the model, as 3,1 (default: in proportion to each "
                  "device's free memory)")
      ->delimiter(',')
      ->check(FiniteRange(1e-9, 1e9));
}

Result<std::vector<std::shared_ptr<CheckedDevice>>> OpenDevices(const DeviceFlags& flags) {
  HOIST_ASSIGN_OR_RETURN(auto devices, hoist::OpenDevices(flags.device, "--device"));
  if (devices.size() > 1 && !flags.tensor_split.empty() &&
      flags.tensor_split.size() != devices.size()) {
    return Status::InvalidArgument("--tensor-split gives " +
                                   std::to_string(flags.tensor_split.size()) + " shares for " +
                                   std::to_string(devices.size()) + " devices");
  }
  return devices;
}

Result<std::vector<uint32_t>> PlaceTensors(
    const DeviceFlags& flags, const TensorDirectory& dir,
    const std::vector<std::shared_ptr<CheckedDevice>>& devices) {
  return PlaceByLayer(dir, devices, flags.tensor_split, "give it a smaller share (--tensor-split)");
}

std::vector<std::string> DescribePlacement(
    const TensorDirectory& dir, const std::vector<uint32_t>& placement,
    const std::vector<std::shared_ptr<CheckedDevice>>& devices) {
  struct Share {
    size_t tensors = 0;
    uint64_t bytes = 0;
    int first_layer = -1;
    int last_layer = -1;
    size_t outside_layers = 0;
  };
  std::vector<Share> shares(devices.size());
  uint64_t total = 0;
  for (size_t i = 0; i < dir.tensors.size(); ++i) {
    Share& s = shares[placement.empty() ? 0 : placement[i]];
    ++s.tensors;
    s.bytes += dir.tensors[i].nbytes;
    total += dir.tensors[i].nbytes;
    const int layer = LayerIndex(dir.tensors[i].name);
    if (layer < 0) {
      ++s.outside_layers;
    } else {
      s.first_layer = s.first_layer < 0 ? layer : std::min(s.first_layer, layer);
      s.last_layer = std::max(s.last_layer, layer);
    }
  }
  std::vector<std::string> lines;
  for (size_t d = 0; d < devices.size(); ++d) {
    const Share& s = shares[d];
    std::string what;
    if (s.first_layer >= 0) {
      what = "layers " + std::to_string(s.first_layer) + "-" + std::to_string(s.last_layer);
    }
    if (s.outside_layers > 0) {
      what += (what.empty() ? "" : " and ") + std::to_string(s.outside_layers) +
              (s.outside_layers == 1 ? " tensor" : " tensors") + " outside the layers";
    }
    if (what.empty()) what = "nothing";
    char percent[16];
    std::snprintf(
        percent, sizeof percent, "%.0f%%",
        total > 0 ? 100.0 * static_cast<double>(s.bytes) / static_cast<double>(total) : 0.0);
    lines.push_back(devices[d]->name() + ": " + what + ", " + std::to_string(s.tensors) +
                    " tensors, " + FormatBytes(s.bytes) + " (" + percent + ")");
  }
  return lines;
}

}  // namespace hoist::cli
