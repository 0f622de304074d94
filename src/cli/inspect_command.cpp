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

Runner RegisterInspect(CLI::App& app) {
  struct Options {
    std::string path;
    bool json = false;
    DeviceFlags devices;
    CLI::Option* device_option = nullptr;
  };
  auto options = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand(
      "inspect", "Show a model's format, files, metadata and tensors without loading it");
  cmd->add_option("PATH", options->path,
                  "a .gguf or .safetensors file, a model.safetensors.index.json, a directory "
                  "of shards, or the first GGUF split")
      ->required();
  cmd->add_flag("--json", options->json, "print one JSON object (schema in docs/CLI.md)");
  AddDeviceFlags(cmd, options->devices);
  options->device_option = cmd->get_option("--device");
  return [options]() -> int {
    auto dir = OpenModel({options->path, nullptr, std::nullopt});
    if (!dir.ok()) {
      return ReportFailure(dir.status());
    }
    for (const std::string& w : dir->warnings)
      std::fprintf(stderr, "hoist: warning: %s\n", w.c_str());
    // With --device: where a load onto those devices would put each tensor, checked against
    // their free memory before anything is allocated.
    std::vector<std::shared_ptr<CheckedDevice>> devices;
    Plan plan;
    if (options->device_option->count() > 0) {
      auto request = ToRequest(options->devices);
      if (!request.ok()) return ReportFailure(request.status());
      if (Status s = CheckRequest(*request); !s.ok()) return ReportFailure(s);
      auto opened = OpenRequestDevices(*request);
      if (!opened.ok()) return ReportFailure(opened.status());
      devices = std::move(opened).value();
      auto placed = Place(*dir, devices, *request);
      if (!placed.ok()) return ReportFailure(placed.status());
      plan = std::move(placed).value();
    }
    if (options->json) {
      nlohmann::ordered_json j = {{"schema_version", kJsonSchemaVersion}};
      j.update(DirectoryToJson(dir.value()));
      if (!devices.empty()) {
        nlohmann::ordered_json names = nlohmann::ordered_json::array();
        for (const auto& d : devices) names.push_back(d->name());
        j["placement"] = {{"split", devices.size() > 1 ? SplitName(plan.split) : "none"},
                          {"devices", names}};
        if (plan.by_parts) {
          // Each part: its tensor, device, rows and bytes of each row.
          nlohmann::ordered_json parts = nlohmann::ordered_json::array();
          for (const TensorRegion& r : plan.parts) {
            parts.push_back({{"tensor", dir->tensors[r.tensor].name},
                             {"device", r.device},
                             {"row_bytes", r.row_bytes},
                             {"rows", {r.row_begin, r.row_end}},
                             {"bytes", {r.column_begin, r.column_end}}});
          }
          j["placement"]["parts"] = std::move(parts);
        } else {
          nlohmann::ordered_json device_of = nlohmann::ordered_json::array();
          for (size_t i = 0; i < dir->tensors.size(); ++i) {
            device_of.push_back(plan.placement.empty() ? 0u : plan.placement[i]);
          }
          j["placement"]["device_of"] = std::move(device_of);
        }
      }
      std::cout << DumpJson(j) << "\n";
    } else {
      std::cout << DirectoryToText(dir.value());
      if (!devices.empty()) {
        std::printf("\nplacement (%s split):\n", devices.size() > 1 ? SplitName(plan.split) : "no");
        for (const std::string& line : DescribePlacement(*dir, plan, devices)) {
          std::printf("  %s\n", line.c_str());
        }
      }
    }
    return kExitOk;
  };
}

}  // namespace hoist::cli
