// The one way the front ends open a model and load it: the C API (api/c_api.cpp, and Python
// through it) and the CLI's load, verify and inspect. Every rule of which options go together,
// the placement across devices, the load and the verification of what was loaded live here, so
// that a front end only translates its own spelling of a request. Doctor, bench and
// make-sample reach the layers below directly, as LevelDB's db_bench does.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "device/checked_device.h"
#include "format/tensor_directory.h"
#include "io/shared_bytes.h"
#include "io/storage.h"
#include "pipeline/loader.h"
#include "plan/load_plan.h"
#include "plan/placement/policy.h"

namespace hoist {

// Where a model's bytes are: a path (a file, an index, a directory of shards, the first GGUF
// split) in `storage`, or the bytes of one safetensors or GGUF file held in memory, which
// `path` then names in messages.
struct ModelSource {
  std::string path;
  std::shared_ptr<Storage> storage;  // null: the local file system
  std::optional<SharedBytes> bytes;  // set: the model is these bytes (storage must be null)
  // Above 0: no remote request of the opening (HEAD, header, listing) waits longer than this
  // without progress, in seconds (the load's stall timeout).
  double stall_timeout_s = 0;
};

// The model's directory, its names indexed; rules it bends are in its warnings.
Result<TensorDirectory> OpenModel(const ModelSource& source);

// How a front end spells the options the rules name, so that an error names what its user wrote
// ("--tensor-split" on the command line, "split_shares" in the C API).
struct OptionSpelling {
  std::string device = "device";
  std::string split = "split";
  std::string shares = "split_shares";
  std::string split_plan = "split_plan";
  std::string checksum = "checksum";
  std::string names = "names";
};

struct LoadRequest {
  std::string device = "auto";  // one device, or several joined by commas
  // How several devices share the model; never null.
  const PlacementPolicy* split = &DefaultPlacementPolicy();
  std::vector<double> shares;       // one per device; empty: the policy's default
  std::string split_plan;           // a plan file's path (ParseCutRules); a split that takes_plan
  std::vector<uint32_t> placement;  // whole tensors: per directory tensor, a device index
  // Parts the caller chose (the C API's regions and parts): they are the load, not the split.
  std::optional<std::vector<TensorRegion>> parts;
  bool parts_on_one_device = false;  // the C API's regions: one device, the caller's memory
  LoadOptions options;               // settings, names, callbacks
  OptionSpelling spelling;
  // What the load allocates, other processes can map (a model held for them: held_model.h);
  // a device that cannot share is kUnavailable.
  bool shareable_memory = false;
};

// Every rule of which options go together that needs nothing opened: OK, or kInvalidArgument
// naming the options as the request spells them.
Status CheckRequest(const LoadRequest& request);

// The request's devices, opened in order (the same GPU named twice is refused).
Result<std::vector<std::shared_ptr<CheckedDevice>>> OpenRequestDevices(const LoadRequest& request);

// Where a load puts the model, as parts. A load of whole tensors (by_parts false) has one whole
// part per tensor, or none: all on the first device. A load of parts (a split's that places
// parts, or the caller's) has each device's parts.
struct ModelPlan {
  const PlacementPolicy* split = &DefaultPlacementPolicy();
  size_t devices = 1;
  bool by_parts = false;
  std::vector<TensorRegion> parts;
};

// The plan for dir on devices, each device checked to hold what it gets (kDeviceError with the
// numbers and how to ask for less otherwise). Opens nothing beyond reading a plan file.
Result<ModelPlan> Place(const TensorDirectory& dir,
                        const std::vector<std::shared_ptr<CheckedDevice>>& devices,
                        const LoadRequest& request);

// What Load(dir, request) would do, without loading: the request checked, its devices opened
// and the plan placed on them (each checked to hold what it gets). A plan of whole tensors has
// one whole part per tensor of dir, in order, on the device that gets it.
Result<ModelPlan> PlanRequest(const TensorDirectory& dir, const LoadRequest& request);

// The parts the request's split gives devices, on any number of them, each device checked to
// hold its parts (what Place does for several devices).
Result<std::vector<TensorRegion>> PlaceParts(
    const TensorDirectory& dir, const std::vector<std::shared_ptr<CheckedDevice>>& devices,
    const LoadRequest& request);

// A finished load and the directory it answers to: tensor i of directory() is what the model's
// tensor i holds (the model's own tensor, or part i of a load of parts).
// Thread safety: as LoadedModel's. REQUIRES: the model's directory outlives it.
class CompletedLoad {
 public:
  CompletedLoad(const TensorDirectory& model_dir, std::unique_ptr<LoadedModel> model,
                ModelPlan plan, std::unique_ptr<TensorDirectory> parts, bool verifiable)
      : model_dir_(&model_dir),
        model_(std::move(model)),
        plan_(std::move(plan)),
        parts_(std::move(parts)),
        verifiable_(verifiable) {}

  const TensorDirectory& directory() const { return parts_ ? *parts_ : *model_dir_; }
  LoadedModel& model() const { return *model_; }
  const ModelPlan& plan() const { return plan_; }
  // Whether Verify can compare it with the file: not for regions in the caller's memory, which
  // the caller compares itself.
  bool verifiable() const { return verifiable_; }

 private:
  const TensorDirectory* model_dir_;
  std::unique_ptr<LoadedModel> model_;
  ModelPlan plan_;
  std::unique_ptr<TensorDirectory> parts_;
  bool verifiable_;
};

// Checks the request, opens its devices, places dir on them and loads it. The time the devices
// took to open is the report's phases.device_open.
Result<CompletedLoad> Load(const TensorDirectory& dir, const LoadRequest& request);

// Rank `rank` of a job of `world` processes, one device each (the request's device): this
// rank's parts of the request's split, cut for `world` devices, its shared tensors gathered by
// all_gather (LoadRank in pipeline/loader.h). directory() is this rank's parts.
Result<CompletedLoad> LoadAsRank(const TensorDirectory& dir, const LoadRequest& request,
                                 uint32_t rank, uint32_t world, const AllGather& all_gather);

// The parts `request.split` gives `devices` devices without opening one or checking memory
// (what a rank of a job takes its share from); a split of whole tensors is kInvalidArgument.
Result<std::vector<TensorRegion>> CutForDevices(const TensorDirectory& dir,
                                                const LoadRequest& request, uint32_t devices);

// Reads every loaded tensor back and compares it with the file (Verify in pipeline/loader.h);
// kInvalidArgument for a load that is not verifiable().
Result<std::vector<Mismatch>> Verify(CompletedLoad& loaded, int threads, size_t max_reported,
                                     double stall_timeout_s);
// Compares every loaded tensor with the tensor of the same name of the model at `original`
// (the original of a packed or converted copy), which must hold every one of them with the same
// dtype, shape and size; kInvalidArgument naming the first that differs, or for a load that is
// not verifiable().
Result<std::vector<Mismatch>> VerifyAgainst(CompletedLoad& loaded, const std::string& original,
                                            int threads, size_t max_reported,
                                            double stall_timeout_s);

}  // namespace hoist
