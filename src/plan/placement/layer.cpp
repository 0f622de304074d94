#include "plan/placement/layer.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <numeric>

#include "plan/placement/builtin.h"

namespace hoist {
namespace {

// The input side of a model: embeddings go with the first layers.
bool IsInputTensor(const std::string& name) {
  for (const char* part : {"embed", "token_embd", "wte", "wpe", "tok_embeddings"}) {
    if (name.find(part) != std::string::npos) return true;
  }
  return false;
}

}  // namespace

int LayerIndex(const std::string& name) {
  for (const char* prefix : {"blk.", "layers.", "h.", "layer.", "blocks."}) {
    const std::string p = prefix;
    for (size_t at = name.find(p); at != std::string::npos; at = name.find(p, at + 1)) {
      if (at != 0 && name[at - 1] != '.') continue;  // "blk." itself, not "xblk."
      size_t end = at + p.size();
      int value = 0;
      size_t digits = 0;
      while (end < name.size() && name[end] >= '0' && name[end] <= '9' && digits < 9) {
        value = value * 10 + (name[end] - '0');
        ++end;
        ++digits;
      }
      if (digits > 0 && end < name.size() && name[end] == '.') return value;
    }
  }
  return -1;
}

Result<Placement> SplitByLayer(const TensorDirectory& dir, const std::vector<double>& weights) {
  if (weights.empty()) return Status::InvalidArgument("a layer split needs a device");
  for (double w : weights) {
    if (!(w > 0) || !std::isfinite(w)) {
      return Status::InvalidArgument("a device's share of the layers must be a positive number");
    }
  }
  const auto devices = static_cast<uint32_t>(weights.size());
  Placement placement{devices, std::vector<uint32_t>(dir.tensors.size(), devices - 1)};
  std::map<int, uint64_t> layer_bytes;  // in layer order
  uint64_t total = 0;
  uint64_t input = 0;
  for (size_t i = 0; i < dir.tensors.size(); ++i) {
    const TensorEntry& t = dir.tensors[i];
    total += t.nbytes;
    const int layer = LayerIndex(t.name);
    if (layer >= 0) {
      layer_bytes[layer] += t.nbytes;
    } else if (IsInputTensor(t.name)) {
      placement.device_of[i] = 0;
      input += t.nbytes;
    }
  }
  // Device d ends where the cumulative share of the first d + 1 devices ends; a layer goes to
  // the device whose range holds its middle byte.
  const double sum = std::accumulate(weights.begin(), weights.end(), 0.0);
  std::vector<double> end(devices);
  double share = 0;
  for (uint32_t d = 0; d < devices; ++d) {
    share += weights[d];
    end[d] = static_cast<double>(total) * share / sum;
  }
  std::map<int, uint32_t> device_of_layer;
  uint64_t before = input;
  uint32_t d = 0;
  for (const auto& [layer, bytes] : layer_bytes) {
    const double middle = static_cast<double>(before) + static_cast<double>(bytes) / 2;
    while (d + 1 < devices && middle > end[d]) ++d;
    device_of_layer[layer] = d;
    before += bytes;
  }
  for (size_t i = 0; i < dir.tensors.size(); ++i) {
    const int layer = LayerIndex(dir.tensors[i].name);
    if (layer >= 0) placement.device_of[i] = device_of_layer[layer];
  }
  return placement;
}

Result<std::vector<TensorRegion>> PlaceLayers(const PlacementInput& input) {
  std::vector<double> weights = input.shares;
  if (weights.empty()) {
    const std::vector<uint64_t>& free = input.free_memory;
    const bool known = free.size() == input.devices &&
                       std::all_of(free.begin(), free.end(), [](uint64_t f) { return f > 0; });
    for (uint32_t d = 0; d < input.devices; ++d) {
      weights.push_back(known ? static_cast<double>(free[d]) : 1.0);
    }
  }
  HOIST_ASSIGN_OR_RETURN(const Placement placement, SplitByLayer(*input.dir, weights));
  std::vector<TensorRegion> parts;
  parts.reserve(placement.device_of.size());
  for (size_t i = 0; i < placement.device_of.size(); ++i) {
    parts.push_back(WholePart(*input.dir, i, placement.device_of[i]));
  }
  return parts;
}

}  // namespace hoist
