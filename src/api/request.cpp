#include "api/request.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <utility>

#include "api/settings.h"
#include "format/model.h"
#include "io/http_storage.h"
#include "plan/placement/fit.h"
#include "plan/placement/tensor.h"

namespace hoist {

Result<TensorDirectory> OpenModel(const ModelSource& source) {
  std::shared_ptr<Storage> storage = source.storage;
  if (source.bytes) {
    if (storage) return Status::InvalidArgument("a model is a path or bytes in memory, not both");
    auto memory = std::make_shared<MemoryStorage>();
    memory->Add(source.path, *source.bytes);
    storage = std::move(memory);
  }
  Result<TensorDirectory> dir = storage ? ReadModelDirectory(storage, source.path)
                                        : ReadModelDirectory(source.path, source.stall_timeout_s);
  if (dir.ok()) dir->IndexNames();
  return dir;
}

namespace {

Status Refuse(const std::string& what) { return Status::InvalidArgument(what); }

// A plan file names cuts: it goes with the tensor split alone.
Status CheckSplitPlan(const LoadRequest& request) {
  if (request.split_plan.empty() || request.split->takes_plan) return Status::Ok();
  return Refuse(request.spelling.split_plan + " is for " + request.spelling.split + " tensor");
}

// The rules for a load of parts (the caller's, or a split's on several devices): what each
// takes no part in.
Status CheckParts(const LoadRequest& request) {
  const LoadOptions& o = request.options;
  const OptionSpelling& s = request.spelling;
  const std::string what = !request.parts                ? s.split + " " + request.split->name
                           : request.parts_on_one_device ? std::string("a load of regions")
                                                         : std::string("a load of parts");
  if (o.checksum) return Refuse(what + " takes no " + s.checksum + ": verify compares every part");
  if (!o.names.empty()) return Refuse(what + " takes no " + s.names + ": it loads its parts");
  if (!request.placement.empty()) return Refuse(what + " takes no placement");
  if (o.destination || o.destinations_when_needed) {
    return Refuse(what + " takes no destination callback (parts carry their destinations)");
  }
  return Status::Ok();
}

}  // namespace

Status CheckRequest(const LoadRequest& request) {
  const LoadOptions& o = request.options;
  const OptionSpelling& s = request.spelling;
  HOIST_RETURN_IF_ERROR(CheckLoadOptions(o));
  if (o.destinations_when_needed && !o.destination) {
    return Refuse("destinations_when_needed needs a destination callback");
  }
  if (o.destination_at_once && !o.destinations_when_needed) {
    return Refuse("destination_at_once is for destinations_when_needed");
  }
  if (request.parts && !request.split_plan.empty()) {
    return Refuse(s.split_plan + " is for " + s.split + " tensor");
  }
  HOIST_RETURN_IF_ERROR(CheckSplitPlan(request));
  if (!request.placement.empty() && !request.split->whole_tensors) {
    return Refuse("a placement places whole tensors: " + s.split + " " + request.split->name +
                  " places parts");
  }
  return request.parts ? CheckParts(request) : Status::Ok();
}

Result<std::vector<std::shared_ptr<CheckedDevice>>> OpenRequestDevices(const LoadRequest& request) {
  HOIST_ASSIGN_OR_RETURN(auto devices, OpenDevices(request.device, request.spelling.device));
  const OptionSpelling& s = request.spelling;
  if (devices.size() > 1 && !request.shares.empty() && request.shares.size() != devices.size()) {
    return Status::InvalidArgument(s.shares + " gives " + std::to_string(request.shares.size()) +
                                   " shares for " + std::to_string(devices.size()) + " devices");
  }
  if (request.parts_on_one_device && devices.size() != 1) {
    return Status::InvalidArgument("a load of regions goes to one device");
  }
  if (request.shareable_memory) {
    for (const auto& device : devices) {
      if (!device->capabilities().shares_memory) {
        return Status::Unavailable(device->name() +
                                   " cannot share its memory with other processes here");
      }
      device->set_shareable_allocations(true);
    }
  }
  return devices;
}

namespace {

// A plan file's text. Only a regular file of at most kMaxPlanBytes is read: a FIFO would block
// waiting for a writer and a device such as /dev/zero never ends.
constexpr uint64_t kMaxPlanBytes = 16ull << 20;

Result<std::string> ReadPlanFile(const std::string& path) {
  std::error_code error;
  const auto status = std::filesystem::status(path, error);
  if (error) return Status::IoError(path + ": cannot be read: " + error.message());
  if (!std::filesystem::is_regular_file(status)) {
    return Status::InvalidArgument(path + ": not a regular file (a plan is a JSON file)");
  }
  const uint64_t size = std::filesystem::file_size(path, error);
  if (error) return Status::IoError(path + ": cannot be read: " + error.message());
  if (size > kMaxPlanBytes) {
    return Status::InvalidArgument(path + ": " + std::to_string(size) +
                                   " bytes; a plan is at most " + std::to_string(kMaxPlanBytes) +
                                   " bytes");
  }
  std::ifstream in(path, std::ios::binary);
  std::string text(size, '\0');
  if (!in.read(text.data(), static_cast<std::streamsize>(size))) {
    return Status::IoError(path + ": cannot be read");
  }
  return text;
}

Result<std::vector<CutRule>> ReadCutRules(const LoadRequest& request, uint32_t devices) {
  if (request.split_plan.empty() || !request.split->takes_plan) return std::vector<CutRule>{};
  HOIST_ASSIGN_OR_RETURN(const std::string text, ReadPlanFile(request.split_plan));
  return ParseCutRules(text, request.split_plan, devices);
}

// The caller's placement (a device index per tensor) as whole parts.
Result<std::vector<TensorRegion>> CheckedPlacement(const TensorDirectory& dir,
                                                   const LoadRequest& request, size_t devices) {
  const std::vector<uint32_t>& placement = request.placement;
  if (placement.size() != dir.tensors.size()) {
    return Status::InvalidArgument("the placement has " + std::to_string(placement.size()) +
                                   " entries; the model has " + std::to_string(dir.tensors.size()) +
                                   " tensors");
  }
  std::vector<TensorRegion> parts;
  parts.reserve(placement.size());
  for (size_t i = 0; i < placement.size(); ++i) {
    if (placement[i] >= devices) {
      return Status::InvalidArgument("the placement puts tensor '" + dir.tensors[i].name +
                                     "' on device " + std::to_string(placement[i]) + " of " +
                                     std::to_string(devices));
    }
    parts.push_back(WholePart(dir, i, placement[i]));
  }
  return parts;
}

}  // namespace

Result<ModelPlan> Place(const TensorDirectory& dir,
                        const std::vector<std::shared_ptr<CheckedDevice>>& devices,
                        const LoadRequest& request) {
  ModelPlan plan;
  plan.split = request.split;
  plan.devices = devices.size();
  if (request.parts) {
    plan.by_parts = true;
    plan.parts = *request.parts;
    return plan;
  }
  if (!request.placement.empty()) {
    HOIST_ASSIGN_OR_RETURN(plan.parts, CheckedPlacement(dir, request, devices.size()));
    return plan;
  }
  if (devices.size() < 2) return plan;
  plan.by_parts = !request.split->whole_tensors;
  HOIST_ASSIGN_OR_RETURN(plan.parts, PlaceParts(dir, devices, request));
  return plan;
}

Result<ModelPlan> PlanRequest(const TensorDirectory& dir, const LoadRequest& request) {
  HOIST_RETURN_IF_ERROR(CheckRequest(request));
  HOIST_ASSIGN_OR_RETURN(auto devices, OpenRequestDevices(request));
  HOIST_ASSIGN_OR_RETURN(ModelPlan plan, Place(dir, devices, request));
  if (plan.by_parts) HOIST_RETURN_IF_ERROR(CheckParts(request));
  if (!plan.by_parts && plan.parts.empty()) {  // all on the first device
    plan.parts.reserve(dir.tensors.size());
    for (size_t i = 0; i < dir.tensors.size(); ++i) plan.parts.push_back(WholePart(dir, i, 0));
  }
  return plan;
}

Result<std::vector<TensorRegion>> PlaceParts(
    const TensorDirectory& dir, const std::vector<std::shared_ptr<CheckedDevice>>& devices,
    const LoadRequest& request) {
  const auto count = static_cast<uint32_t>(devices.size());
  PlacementInput input{&dir, count, request.shares, {}, {}};
  HOIST_ASSIGN_OR_RETURN(input.rules, ReadCutRules(request, count));
  std::vector<DeviceRoom> rooms;
  for (const auto& d : devices) {
    const DeviceInfo info = d->Info();
    input.free_memory.push_back(info.free_memory);
    rooms.push_back({d->name(), info.free_memory});
  }
  const PlacementPolicy& policy = *request.split;
  HOIST_ASSIGN_OR_RETURN(std::vector<TensorRegion> parts, PlaceModel(policy, input));
  const std::string hint = policy.fit_hint.empty()
                               ? "give it a smaller share (" + request.spelling.shares + ")"
                               : policy.fit_hint;
  HOIST_RETURN_IF_ERROR(CheckPartsFit(parts, rooms, policy.name, hint));
  return parts;
}

namespace {

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

Result<CompletedLoad> Load(const TensorDirectory& dir, const LoadRequest& request) {
  HOIST_RETURN_IF_ERROR(CheckRequest(request));
  const auto start = std::chrono::steady_clock::now();
  HOIST_ASSIGN_OR_RETURN(auto devices, OpenRequestDevices(request));
  const double device_open = SecondsSince(start);
  HOIST_ASSIGN_OR_RETURN(ModelPlan plan, Place(dir, devices, request));
  if (plan.by_parts) HOIST_RETURN_IF_ERROR(CheckParts(request));  // a split's, on several devices
  HOIST_ASSIGN_OR_RETURN(const Settings settings, ProcessSettings());
  LoadOptions options = request.options;
  options.gather_cached_rows = options.gather_cached_rows && settings.gather_cached_rows;
  std::unique_ptr<TensorDirectory> parts;
  Result<std::unique_ptr<LoadedModel>> loaded = Status::Internal("not loaded");
  if (plan.by_parts) {
    if (!request.parts_on_one_device) {  // regions are the caller's to compare: no directory
      HOIST_ASSIGN_OR_RETURN(TensorDirectory part_dir, RegionDirectory(dir, plan.parts));
      parts = std::make_unique<TensorDirectory>(std::move(part_dir));
    }
    loaded = LoadRegions(dir, devices, plan.parts, options);
  } else {
    const std::vector<uint32_t> placement = plan.parts.empty()
                                                ? std::vector<uint32_t>{}
                                                : DeviceOfTensors(plan.parts, dir.tensors.size());
    loaded = Load(dir, devices, options, placement);
  }
  if (!loaded.ok()) return loaded.status();
  (*loaded)->report.phases.device_open = device_open;
  return CompletedLoad(dir, std::move(loaded).value(), std::move(plan), std::move(parts),
                       !request.parts_on_one_device);
}

Result<std::vector<TensorRegion>> CutForDevices(const TensorDirectory& dir,
                                                const LoadRequest& request, uint32_t devices) {
  HOIST_RETURN_IF_ERROR(CheckSplitPlan(request));
  const PlacementPolicy& policy = *request.split;
  if (policy.whole_tensors) {
    return Status::InvalidArgument("the " + policy.name +
                                   " split places whole tensors: its parts are given by a split "
                                   "that places parts (tensor, replicate)");
  }
  PlacementInput input{&dir, devices, request.shares, {}, {}};
  HOIST_ASSIGN_OR_RETURN(input.rules, ReadCutRules(request, devices));
  return PlaceModel(policy, input);
}

namespace {

// This rank's cut of the whole model, of the named tensors only; an error here is this rank's
// verdict, told to its peers.
Result<std::vector<TensorRegion>> CutForRank(const TensorDirectory& dir,
                                             const LoadRequest& whole_model,
                                             const std::vector<std::string>& names,
                                             uint32_t world) {
  const LoadOptions& o = whole_model.options;
  if (!whole_model.placement.empty() || o.checksum || o.destination || o.destinations_when_needed ||
      whole_model.parts) {
    return Status::InvalidArgument("rank mode takes no placement, checksum, destinations or parts");
  }
  HOIST_RETURN_IF_ERROR(CheckRequest(whole_model));
  HOIST_ASSIGN_OR_RETURN(std::vector<TensorRegion> cut,
                         CutForDevices(dir, whole_model, world == 0 ? 1 : world));
  if (names.empty()) return cut;
  std::vector<bool> named(dir.tensors.size(), false);
  for (const std::string& name : names) {
    const TensorEntry* t = dir.Find(name);
    if (t == nullptr) return Status::NotFound("no tensor named '" + name + "' in the model");
    named[static_cast<size_t>(t - dir.tensors.data())] = true;
  }
  cut.erase(std::remove_if(cut.begin(), cut.end(),
                           [&](const TensorRegion& r) { return !named[r.tensor]; }),
            cut.end());
  return cut;
}

}  // namespace

Result<CompletedLoad> LoadAsRank(const TensorDirectory& dir, const LoadRequest& request,
                                 uint32_t rank, uint32_t world, const AllGather& all_gather) {
  LoadRequest whole_model = request;
  whole_model.options.names.clear();  // the cut is of the whole model; names pick its parts
  const Result<std::vector<TensorRegion>> cut =
      CutForRank(dir, whole_model, request.options.names, world);
  const auto start = std::chrono::steady_clock::now();
  // Without its device a rank cannot take part in the checks: its peers find it silent.
  HOIST_ASSIGN_OR_RETURN(auto devices, OpenDevices(request.device, request.spelling.device));
  if (devices.size() != 1) {
    return Status::InvalidArgument("rank mode loads onto one device per process");
  }
  const double device_open = SecondsSince(start);
  std::vector<TensorRegion> mine;
  HOIST_ASSIGN_OR_RETURN(
      std::unique_ptr<LoadedModel> model,
      LoadRank(dir, devices.front(), cut, rank, world, all_gather, whole_model.options, &mine));
  model->report.phases.device_open = device_open;
  HOIST_ASSIGN_OR_RETURN(TensorDirectory part_dir, RegionDirectory(dir, mine));
  ModelPlan plan;
  plan.split = request.split;
  plan.by_parts = true;
  plan.parts = std::move(mine);
  return CompletedLoad(dir, std::move(model), std::move(plan),
                       std::make_unique<TensorDirectory>(std::move(part_dir)), true);
}

Result<std::vector<Mismatch>> Verify(CompletedLoad& loaded, int threads, size_t max_reported,
                                     double stall_timeout_s) {
  if (!loaded.verifiable()) {
    return Status::InvalidArgument("a load of regions is checked against its own bytes only");
  }
  return Verify(loaded.directory(), loaded.model(), threads, max_reported, stall_timeout_s);
}

namespace {

// The tensors of the model at `path` that the loaded ones are compared with, in their order.
Result<TensorDirectory> ReferenceFor(const TensorDirectory& loaded, const std::string& path) {
  HOIST_ASSIGN_OR_RETURN(TensorDirectory original, ReadModelDirectory(path));
  const std::string named = RedactUrl(path);  // a URL's password never reaches a message
  if (original.tensors.size() != loaded.tensors.size()) {
    return Status::InvalidArgument(named + " has " + std::to_string(original.tensors.size()) +
                                   " tensors; the model has " +
                                   std::to_string(loaded.tensors.size()));
  }
  TensorDirectory reference;
  reference.format = original.format;
  reference.files = original.files;
  reference.storage = original.storage;
  for (const TensorEntry& t : loaded.tensors) {
    const TensorEntry* o = original.Find(t.name);
    if (o == nullptr) return Status::InvalidArgument(named + " has no tensor " + t.name);
    if (o->dtype != t.dtype || o->shape != t.shape || o->nbytes != t.nbytes) {
      return Status::InvalidArgument(named + ": tensor " + t.name + " is " + o->dtype + " of " +
                                     std::to_string(o->nbytes) + " bytes there, " + t.dtype +
                                     " of " + std::to_string(t.nbytes) + " bytes in the model");
    }
    reference.tensors.push_back(*o);
  }
  reference.IndexNames();
  return reference;
}

}  // namespace

Result<std::vector<Mismatch>> VerifyAgainst(CompletedLoad& loaded, const std::string& original,
                                            int threads, size_t max_reported,
                                            double stall_timeout_s) {
  if (!loaded.verifiable()) {
    return Status::InvalidArgument("a load of regions is checked against its own bytes only");
  }
  HOIST_ASSIGN_OR_RETURN(const TensorDirectory reference,
                         ReferenceFor(loaded.directory(), original));
  return Verify(reference, loaded.model(), threads, max_reported, stall_timeout_s);
}

}  // namespace hoist
