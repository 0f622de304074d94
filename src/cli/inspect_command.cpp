#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include "api/request.h"
#include "base/json_schema.h"
#include "cli/commands.h"
#include "cli/device_flags.h"
#include "cli/exit_codes.h"
#include "cli/render.h"
#include "format/directory_json.h"

namespace hoist::cli {

namespace {

struct InspectFlags {
  std::string path;
  bool json = false;
  DeviceFlags devices;
  CLI::Option* device_option = nullptr;
};

// With --device: where a load onto those devices would put each tensor, checked against their
// free memory before anything is allocated. Returns the exit code, or -1 with the devices and
// the plan filled in.
int PlaceOnDevices(const InspectFlags& f, const TensorDirectory& dir,
                   std::vector<std::shared_ptr<CheckedDevice>>* devices, ModelPlan* plan) {
  auto request = ToRequest(f.devices);
  if (!request.ok()) return ReportFailure(request.status());
  if (Status s = CheckRequest(*request); !s.ok()) return ReportFailure(s);
  auto opened = OpenRequestDevices(*request);
  if (!opened.ok()) return ReportFailure(opened.status());
  *devices = std::move(opened).value();
  auto placed = Place(dir, *devices, *request);
  if (!placed.ok()) return ReportFailure(placed.status());
  *plan = std::move(placed).value();
  return -1;
}

nlohmann::ordered_json PlacementJson(const TensorDirectory& dir,
                                     const std::vector<std::shared_ptr<CheckedDevice>>& devices,
                                     const ModelPlan& plan) {
  nlohmann::ordered_json names = nlohmann::ordered_json::array();
  for (const auto& d : devices) names.push_back(d->name());
  nlohmann::ordered_json j = {{"split", devices.size() > 1 ? plan.split->name.c_str() : "none"},
                              {"devices", names}};
  if (plan.by_parts) {
    // Each part: its tensor, device, rows and bytes of each row.
    nlohmann::ordered_json parts = nlohmann::ordered_json::array();
    for (const TensorRegion& r : plan.parts) {
      parts.push_back({{"tensor", dir.tensors[r.tensor].name},
                       {"device", r.device},
                       {"row_bytes", r.row_bytes},
                       {"rows", {r.row_begin, r.row_end}},
                       {"bytes", {r.column_begin, r.column_end}}});
    }
    j["parts"] = std::move(parts);
  } else {
    j["device_of"] = DeviceOfTensors(plan.parts, dir.tensors.size());
  }
  return j;
}

int RunInspect(const InspectFlags& f) {
  auto dir = OpenModel({f.path, nullptr, std::nullopt, 0});
  if (!dir.ok()) return ReportFailure(dir.status());
  for (const std::string& w : dir->warnings)
    std::fprintf(stderr, "hoist: warning: %s\n", w.c_str());
  std::vector<std::shared_ptr<CheckedDevice>> devices;
  ModelPlan plan;
  if (f.device_option->count() > 0) {
    if (int code = PlaceOnDevices(f, *dir, &devices, &plan); code >= 0) return code;
  }
  if (f.json) {
    nlohmann::ordered_json j = {{"schema_version", kJsonSchemaVersion}};
    j.update(DirectoryToJson(dir.value()));
    if (!devices.empty()) j["placement"] = PlacementJson(*dir, devices, plan);
    std::cout << DumpJson(j) << "\n";
    return kExitOk;
  }
  std::cout << DirectoryToText(dir.value());
  if (!devices.empty()) {
    std::printf("\nplacement (%s split):\n", devices.size() > 1 ? plan.split->name.c_str() : "no");
    for (const std::string& line : DescribePlacement(*dir, plan, devices)) {
      std::printf("  %s\n", line.c_str());
    }
  }
  return kExitOk;
}

}  // namespace

Runner RegisterInspect(CLI::App& app) {
  auto options = std::make_shared<InspectFlags>();
  CLI::App* cmd = app.add_subcommand(
      "inspect", "Show a model's format, files, metadata and tensors without loading it");
  cmd->add_option("PATH", options->path,
                  "a .gguf or .safetensors file, a model.safetensors.index.json, a directory "
                  "of shards, or the first GGUF split; or a URL, s3://, gs://, az:// or hf:// "
                  "name")
      ->required();
  cmd->add_flag("--json", options->json, "print one JSON object (schema in docs/CLI.md)");
  AddDeviceFlags(cmd, options->devices);
  options->device_option = cmd->get_option("--device");
  return [options]() -> int { return RunInspect(*options); };
}

}  // namespace hoist::cli
