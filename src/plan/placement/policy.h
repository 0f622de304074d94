// Placement policies: how a split puts a model on several devices. Every policy gives the same
// shape, a list of parts (a whole tensor is one part), and every front end names one by the
// same word (--split, hoist_load_options.split, Python's split=). A policy is one file in this
// directory and one row of policy.cpp's table; a test or a host program adds its own row with
// RegisterPlacementPolicy.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "format/tensor_directory.h"
#include "plan/load_plan.h"
#include "plan/placement/tensor.h"

namespace hoist {

// What a policy places: the model on `devices` devices.
struct PlacementInput {
  const TensorDirectory* dir = nullptr;
  uint32_t devices = 1;
  std::vector<double> shares;         // one positive share per device, or empty: none given
  std::vector<uint64_t> free_memory;  // per device, 0 where unknown; empty: no device opened
  std::vector<CutRule> rules;         // a plan file's, for a policy that takes_plan
};

struct PlacementPolicy {
  std::string name;
  // Each tensor is one whole part on one device, so that the load is of whole tensors (names,
  // checksums and destinations apply) rather than of parts.
  bool whole_tensors = false;
  bool takes_plan = false;  // reads a plan file's rules (--split-plan)
  // Said when a device cannot hold what it gets; empty: "give it a smaller share (<option>)".
  std::string fit_hint;
  // The parts: each TensorRegion's device below input.devices. Parts carry no destination.
  std::function<Result<std::vector<TensorRegion>>(const PlacementInput& input)> place;
};

// Adds a policy after the built-in ones (layer, tensor, replicate). Thread safe; the returned
// row lives as long as the process. A name already taken is kInvalidArgument.
Result<const PlacementPolicy*> RegisterPlacementPolicy(PlacementPolicy policy);

// The rows, built-in first, then the registered ones in order.
std::vector<const PlacementPolicy*> PlacementPolicies();

// The layer split: what a load uses when nothing is asked.
const PlacementPolicy& DefaultPlacementPolicy();

// The policy named `text`; anything else is kInvalidArgument naming `option` and the choices.
Result<const PlacementPolicy*> ParseSplit(std::string_view text, std::string_view option);

// The parts `policy` gives input, each checked to name a tensor and a device that exist and to
// lie inside its tensor; for a whole_tensors policy, every tensor exactly once and whole
// (kInvalidArgument naming the policy and the part otherwise).
Result<std::vector<TensorRegion>> PlaceModel(const PlacementPolicy& policy,
                                             const PlacementInput& input);

// Tensor i of dir whole, as one part on `device`.
TensorRegion WholePart(const TensorDirectory& dir, size_t i, uint32_t device);

// Per directory tensor, the device of its part (0 for a tensor without one): the placement of
// a whole_tensors policy's parts.
std::vector<uint32_t> DeviceOfTensors(const std::vector<TensorRegion>& parts, size_t tensors);

}  // namespace hoist
