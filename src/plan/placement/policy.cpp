#include "plan/placement/policy.h"

#include <algorithm>
#include <deque>
#include <mutex>
#include <string>

#include "plan/placement/builtin.h"

namespace hoist {
namespace {

const std::vector<PlacementPolicy>& BuiltInPolicies() {
  static const std::vector<PlacementPolicy> rows = {
      {"layer", true, false, "", PlaceLayers},
      {"tensor", false, true, "", PlaceTensorCuts},
      {"replicate", false, false, "every device holds the whole model when replicated",
       PlaceReplicas},
  };
  return rows;
}

std::mutex g_policies_mutex;

// A deque: rows handed out stay where they are as more are added.
std::deque<PlacementPolicy>& RegisteredPolicies() {
  static std::deque<PlacementPolicy> rows;
  return rows;
}

std::string Choices() {
  std::string choices;
  for (const PlacementPolicy* p : PlacementPolicies()) {
    if (!choices.empty()) choices += ", ";
    choices += p->name;
  }
  return choices;
}

std::string Where(const PlacementPolicy& policy, const TensorDirectory& dir,
                  const TensorRegion& part) {
  return "the " + policy.name + " split's part of tensor " +
         (part.tensor < dir.tensors.size() ? "'" + dir.tensors[part.tensor].name + "'"
                                           : std::to_string(part.tensor));
}

// Each part inside its tensor, on a device of the load.
Status CheckParts(const PlacementPolicy& policy, const PlacementInput& input,
                  const std::vector<TensorRegion>& parts) {
  const TensorDirectory& dir = *input.dir;
  for (const TensorRegion& r : parts) {
    if (r.tensor >= dir.tensors.size()) {
      return Status::InvalidArgument(Where(policy, dir, r) + ": the model has " +
                                     std::to_string(dir.tensors.size()) + " tensors");
    }
    if (r.device >= input.devices) {
      return Status::InvalidArgument(Where(policy, dir, r) + " is on device " +
                                     std::to_string(r.device) + " of " +
                                     std::to_string(input.devices));
    }
    const uint64_t nbytes = dir.tensors[r.tensor].nbytes;
    const bool inside = r.row_begin <= r.row_end && r.column_begin <= r.column_end &&
                        r.column_end <= r.row_bytes &&
                        (r.row_bytes == 0 ? nbytes == 0 : r.row_end <= nbytes / r.row_bytes);
    if (!inside || (r.row_bytes != 0 && nbytes % r.row_bytes != 0) || r.destination != nullptr) {
      return Status::InvalidArgument(Where(policy, dir, r) +
                                     " does not lie inside the tensor (or carries a destination)");
    }
  }
  return Status::Ok();
}

// A whole_tensors policy: every tensor once, whole.
Status CheckWhole(const PlacementPolicy& policy, const TensorDirectory& dir,
                  const std::vector<TensorRegion>& parts) {
  std::vector<bool> seen(dir.tensors.size(), false);
  for (const TensorRegion& r : parts) {
    const TensorRegion whole = WholePart(dir, r.tensor, r.device);
    if (seen[r.tensor] || r.row_begin != whole.row_begin || r.row_end != whole.row_end ||
        r.column_end - r.column_begin != whole.column_end) {
      return Status::InvalidArgument(Where(policy, dir, r) +
                                     " is not the tensor's one whole part: the policy places "
                                     "whole tensors");
    }
    seen[r.tensor] = true;
  }
  for (size_t i = 0; i < seen.size(); ++i) {
    if (!seen[i]) {
      return Status::InvalidArgument("the " + policy.name + " split places no part of tensor '" +
                                     dir.tensors[i].name + "'");
    }
  }
  return Status::Ok();
}

}  // namespace

Result<const PlacementPolicy*> RegisterPlacementPolicy(PlacementPolicy policy) {
  if (policy.name.empty() || !policy.place) {
    return Status::InvalidArgument("a placement policy needs a name and a place function");
  }
  std::lock_guard<std::mutex> lock(g_policies_mutex);  // the name checked and taken at once
  const auto taken = [&](const PlacementPolicy& p) { return p.name == policy.name; };
  if (std::any_of(BuiltInPolicies().begin(), BuiltInPolicies().end(), taken) ||
      std::any_of(RegisteredPolicies().begin(), RegisteredPolicies().end(), taken)) {
    return Status::InvalidArgument("a placement policy named '" + policy.name + "' exists");
  }
  RegisteredPolicies().push_back(std::move(policy));
  return &RegisteredPolicies().back();
}

std::vector<const PlacementPolicy*> PlacementPolicies() {
  std::vector<const PlacementPolicy*> rows;
  for (const PlacementPolicy& p : BuiltInPolicies()) rows.push_back(&p);
  std::lock_guard<std::mutex> lock(g_policies_mutex);
  for (const PlacementPolicy& p : RegisteredPolicies()) rows.push_back(&p);
  return rows;
}

const PlacementPolicy& DefaultPlacementPolicy() { return BuiltInPolicies().front(); }

Result<const PlacementPolicy*> ParseSplit(std::string_view text, std::string_view option) {
  for (const PlacementPolicy* p : PlacementPolicies()) {
    if (text == p->name) return p;
  }
  std::string message(option);
  message.append(" '").append(text).append("' is not a split: ").append(Choices());
  return Status::InvalidArgument(std::move(message));
}

TensorRegion WholePart(const TensorDirectory& dir, size_t i, uint32_t device) {
  const uint64_t nbytes = i < dir.tensors.size() ? dir.tensors[i].nbytes : 0;
  return {i, nbytes, 0, 1, 0, nbytes, nullptr, device};
}

std::vector<uint32_t> DeviceOfTensors(const std::vector<TensorRegion>& parts, size_t tensors) {
  std::vector<uint32_t> device_of(tensors, 0);
  for (const TensorRegion& r : parts) {
    if (r.tensor < tensors) device_of[r.tensor] = r.device;
  }
  return device_of;
}

Result<std::vector<TensorRegion>> PlaceModel(const PlacementPolicy& policy,
                                             const PlacementInput& input) {
  if (input.dir == nullptr || input.devices == 0) {
    return Status::InvalidArgument("a split needs a model and a device");
  }
  if (!input.shares.empty() && input.shares.size() != input.devices) {
    return Status::InvalidArgument(std::to_string(input.shares.size()) + " shares for " +
                                   std::to_string(input.devices) + " devices");
  }
  HOIST_ASSIGN_OR_RETURN(std::vector<TensorRegion> parts, policy.place(input));
  HOIST_RETURN_IF_ERROR(CheckParts(policy, input, parts));
  if (policy.whole_tensors) HOIST_RETURN_IF_ERROR(CheckWhole(policy, *input.dir, parts));
  return parts;
}

}  // namespace hoist
