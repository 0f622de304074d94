#include "cli/device_flags.h"

#include <algorithm>
#include <cstdio>

#include "base/units.h"
#include "cli/load_flags.h"
#include "plan/placement/layer.h"

namespace hoist::cli {

void AddDeviceFlags(CLI::App* cmd, DeviceFlags& flags) {
  cmd->add_option(
         "--device", flags.device,
         "auto, host, sim[:key=value,...], gpu:N or cuda:N (hip:N); several joined by commas "
         "(cuda:0,cuda:1) place the model across them")
      ->default_str("auto");
  cmd->add_option("--split", flags.split,
                  "how a model is placed across several devices: layer (consecutive layers per "
                  "device, embeddings with the first, the output head with the last), tensor "
                  "(each weight cut among the devices, tensor parallel: q/k/v, gate/up, "
                  "embeddings and head by rows, attention output and down by columns, the rest "
                  "whole on each) or replicate (every tensor on every device, each byte read "
                  "once)")
      ->check(CLI::IsMember({"layer", "tensor", "replicate"}))
      ->default_str("layer");
  cmd->add_option("--tensor-split", flags.tensor_split,
                  "each device's share of the model, as 3,1 (default: layer: in proportion to "
                  "each device's free memory; tensor: equal)")
      ->delimiter(',')
      ->check(FiniteRange(1e-9, 1e9));
  cmd->add_option("--split-plan", flags.split_plan,
                  "with --split tensor: a JSON file of name pattern: cut (\"*.q_proj.weight\": "
                  "\"rows\", \"columns\", \"replicate\" or a device index), tried in order "
                  "before the built-in rules")
      ->check(CLI::ExistingFile);
}

Result<LoadRequest> ToRequest(const DeviceFlags& flags) {
  LoadRequest request;
  request.device = flags.device;
  HOIST_ASSIGN_OR_RETURN(request.split, ParseSplit(flags.split, "--split"));
  request.shares = flags.tensor_split;
  request.split_plan = flags.split_plan;
  request.spelling = {"--device",     "--split",    "--tensor-split",
                      "--split-plan", "--checksum", "--names"};
  return request;
}

namespace {

// What each tensor became: cut by rows or by columns, whole on every device, whole on one;
// empty when no tensor is cut or alone on a device (replicas only). pieces: parts per tensor.
std::string DescribeCuts(const TensorDirectory& dir, const std::vector<TensorRegion>& parts,
                         const std::vector<uint32_t>& pieces) {
  enum Kind : uint8_t { kNone, kWhole, kRows, kColumns };
  std::vector<Kind> kind(dir.tensors.size(), kNone);
  for (const TensorRegion& r : parts) {
    if (r.row_bytes == 0) continue;  // a tensor without bytes
    const uint64_t rows = dir.tensors[r.tensor].nbytes / r.row_bytes;
    if (r.row_end - r.row_begin != rows) {
      kind[r.tensor] = kRows;
    } else if (r.column_end - r.column_begin != r.row_bytes) {
      kind[r.tensor] = kColumns;
    } else if (kind[r.tensor] == kNone) {
      kind[r.tensor] = kWhole;
    }
  }
  size_t counts[4] = {0, 0, 0, 0};
  size_t whole_on_one = 0;
  for (size_t i = 0; i < dir.tensors.size(); ++i) {
    if (kind[i] == kWhole && pieces[i] == 1) {
      ++whole_on_one;
    } else {
      ++counts[kind[i]];
    }
  }
  if (counts[kRows] + counts[kColumns] + whole_on_one == 0) return "";
  return "cut by rows: " + std::to_string(counts[kRows]) +
         " tensors, by columns: " + std::to_string(counts[kColumns]) +
         ", whole on every device: " + std::to_string(counts[kWhole]) +
         ", whole on one: " + std::to_string(whole_on_one);
}

// A split into parts: per device, its parts' bytes; then what each tensor became.
std::vector<std::string> DescribeRegions(
    const TensorDirectory& dir, const ModelPlan& plan,
    const std::vector<std::shared_ptr<CheckedDevice>>& devices) {
  std::vector<size_t> tensors(devices.size(), 0);
  std::vector<uint64_t> bytes(devices.size(), 0);
  std::vector<uint32_t> pieces(dir.tensors.size(), 0);
  for (const TensorRegion& r : plan.parts) {
    ++tensors[r.device];
    bytes[r.device] += (r.row_end - r.row_begin) * (r.column_end - r.column_begin);
    ++pieces[r.tensor];
  }
  const double total = static_cast<double>(dir.total_bytes());
  std::vector<std::string> lines;
  for (size_t d = 0; d < devices.size(); ++d) {
    char percent[32];
    std::snprintf(percent, sizeof percent, "%.0f%%",
                  total > 0 ? 100.0 * static_cast<double>(bytes[d]) / total : 0.0);
    lines.push_back(devices[d]->name() + ": " + std::to_string(tensors[d]) + " tensors or parts, " +
                    FormatBytes(bytes[d]) + " (" + percent + " of the model's bytes)");
  }
  const std::string cuts = DescribeCuts(dir, plan.parts, pieces);
  if (!cuts.empty()) lines.push_back(cuts);
  return lines;
}

}  // namespace

std::vector<std::string> DescribePlacement(
    const TensorDirectory& dir, const ModelPlan& plan,
    const std::vector<std::shared_ptr<CheckedDevice>>& devices) {
  if (plan.by_parts) return DescribeRegions(dir, plan, devices);
  const std::vector<uint32_t> placement = DeviceOfTensors(plan.parts, dir.tensors.size());
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
    Share& s = shares[placement[i]];
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
