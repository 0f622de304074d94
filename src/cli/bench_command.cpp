// `hoist bench`: the flags, and the table and the JSON of what measure/bench_runner returns.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "base/json_schema.h"
#include "base/platform.h"
#include "base/units.h"
#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "cli/load_flags.h"
#include "device/checked_device.h"
#include "device/host_memory.h"
#include "format/model.h"
#include "io/http_storage.h"
#include "measure/bench_runner.h"
#include "pipeline/loader.h"

namespace hoist::cli {
namespace {

struct BenchFlags {
  std::string path;
  std::string device = "auto";
  bool cold = false;
  int repeat = 3;
  std::string json_path;
  bool json = false;          // --json given: to json_path, or stdout when it has no value
  LoadSettingFlags settings;  // hoist's own load
  std::vector<std::string> strategies = {"mmap-pageable", "pinned-4x1MiB", "direct-4x64MiB"};
  double settle_s = -1;  // < 0: the bench runner's default (2 s on GPUs, 0 on host and sim)
};

void Print(const BenchResult& b, const BenchFlags& flags, const TensorDirectory& dir) {
  std::printf("hoist bench: %s (%s in %zu tensors, %zu file%s) on %s\n",
              RedactUrl(flags.path).c_str(), FormatBytes(b.model_bytes).c_str(), dir.tensors.size(),
              dir.files.size(), dir.files.size() == 1 ? "" : "s", b.device.description.c_str());
  char direct[32] = "n/a";
  if (b.direct_read_gbps > 0) std::snprintf(direct, sizeof direct, "%.2f GB/s", b.direct_read_gbps);
  std::printf(
      "ceilings: host-to-device pinned %.2f GB/s, page-cache read %.2f GB/s, direct read %s\n",
      b.h2d_pinned_gbps, b.page_cache_read_gbps, direct);
  std::printf("%-16s %-5s %9s %9s %9s %12s %9s\n", "strategy", "mode", "GB/s", "best", "ratio",
              "peak host", "verified");
  // ratio: median GB/s over the slowest ceiling on the path (warm: min(h2d, page cache);
  // cold: min(h2d, direct read)); peak host: resident memory above the run's start, less the
  // destination itself on host and sim.
  for (const BenchRow& r : b.rows) {
    std::printf("%-16s %-5s %9.2f %9.2f %8.0f%% %12s %9s\n", r.strategy.c_str(), r.mode.c_str(),
                r.gbps, r.best_gbps, r.ceiling_gbps > 0 ? 100 * r.gbps / r.ceiling_gbps : 0.0,
                FormatBytes(r.peak_host_bytes).c_str(), r.verified ? "yes" : "NO");
  }
  for (const BenchRow& r : b.rows) {
    if (r.time_to_first_byte_s && r.mode == "warm") {
      std::printf("time to first byte (%s, plan + allocate after open): %.1f ms\n",
                  r.strategy.c_str(), *r.time_to_first_byte_s * 1e3);
      break;
    }
  }
  const BenchRow* hoist_warm = b.Find("hoist", "warm");
  if (hoist_warm != nullptr && flags.repeat > 1 && b.device.kind == DeviceKind::kGpu) {
    std::printf(
        "hoist warm, first load in the process (pins its staging memory): %.2f GB/s; "
        "later loads reuse it\n",
        hoist_warm->first_gbps);
  }
  if (b.settle_s > 0 && b.loads > 1) {
    std::printf(
        "each load after the first began %.1f s after the previous one freed its device memory "
        "(--settle)\n",
        b.settle_s);
  }
  for (const BenchRow& r : b.rows) {
    if (hoist_warm != nullptr && r.strategy != "hoist" && r.mode == "warm" && r.gbps > 0) {
      std::printf("hoist warm is %.1fx %s\n", hoist_warm->gbps / r.gbps, r.strategy.c_str());
    }
  }
  for (const std::string& n : b.notes) std::printf("note: %s\n", n.c_str());
  for (const BenchRow& r : b.rows) {
    if (!r.note.empty())
      std::printf("note: %s %s: %s\n", r.strategy.c_str(), r.mode.c_str(), r.note.c_str());
  }
}

nlohmann::json Json(const BenchResult& b, const BenchFlags& flags, const TensorDirectory& dir) {
  nlohmann::json j;
  j["schema_version"] = kJsonSchemaVersion;
  j["model"] = {{"path", RedactUrl(flags.path)},
                {"bytes", b.model_bytes},
                {"tensors", dir.tensors.size()},
                {"files", dir.files.size()},
                {"format", dir.format}};
  j["ceilings"] = {{"h2d_pinned_gbps", b.h2d_pinned_gbps},
                   {"page_cache_read_gbps", b.page_cache_read_gbps},
                   {"read_bytes", b.ceiling_read_bytes},
                   {"direct_read_gbps", b.direct_read_gbps > 0 ? nlohmann::json(b.direct_read_gbps)
                                                               : nlohmann::json()}};
  j["results"] = nlohmann::json::array();
  for (const BenchRow& r : b.rows) {
    nlohmann::json row = {{"strategy", r.strategy},
                          {"mode", r.mode},
                          {"gbps", r.gbps},
                          {"best_gbps", r.best_gbps},
                          {"first_gbps", r.first_gbps},
                          {"ceiling_gbps", r.ceiling_gbps},
                          {"ratio_to_ceiling", r.ceiling_gbps > 0 ? r.gbps / r.ceiling_gbps : 0.0},
                          {"peak_host_bytes", r.peak_host_bytes},
                          {"verified", r.verified}};
    if (r.time_to_first_byte_s) row["time_to_first_byte_s"] = *r.time_to_first_byte_s;
    if (!r.note.empty()) row["note"] = r.note;
    row["runs"] = nlohmann::json::array();
    for (const BenchRun& run : r.runs) {
      nlohmann::json one = {{"gbps", run.gbps}, {"wall_s", run.wall_s}};
      if (run.phases) {
        one.update({{"plan_s", run.phases->plan},
                    {"allocate_s", run.phases->allocate},
                    {"allocate_device_s", run.phases->allocate_device},
                    {"allocate_staging_s", run.phases->allocate_staging},
                    {"stream_s", run.phases->stream},
                    {"teardown_s", run.phases->teardown}});
      }
      row["runs"].push_back(std::move(one));
    }
    j["results"].push_back(row);
  }
  const DeviceInfo& info = b.device;
  j["machine"] = {{"cpus", CpuCount()},
                  {"memory_bytes", PhysicalMemoryBytes()},
                  {"device", info.name},
                  {"device_description", info.description},
                  {"device_memory_bytes", info.total_memory}};
  j["notes"] = b.notes;
  j["repeat"] = flags.repeat;
  j["settle_s"] = b.settle_s;
  return j;
}

int RunBenchCommand(BenchFlags f) {
  std::erase_if(f.strategies, [](const std::string& s) { return s.empty() || s == "none"; });
  InstallStopSignalHandlers();
  auto options = ToLoadOptions(f.settings);
  if (!options.ok()) return ReportFailure(options.status());
  auto dir = ReadModelDirectory(f.path);
  if (!dir.ok()) return ReportFailure(dir.status());
  auto device = OpenDevice(f.device);
  if (!device.ok()) return ReportFailure(device.status());
  BenchSpec spec;
  spec.cold = f.cold;
  spec.repeat = f.repeat;
  spec.strategies = f.strategies;
  spec.settle_s = f.settle_s;
  spec.on_stage = [](const std::string& what) {
    std::fprintf(stderr, "hoist bench: %s\n", what.c_str());
  };
  auto result = RunBench(spec, *dir, *device, *options);
  if (!result.ok()) return ReportOrExitNow(result.status());
  // stdout holds one document: the table, or (--json without a file) the JSON alone.
  if (f.json && f.json_path.empty()) {
    std::cout << Json(*result, f, *dir).dump(2) << "\n";
  } else {
    Print(*result, f, *dir);
  }
  if (!f.json_path.empty()) {
    std::ofstream out(f.json_path);
    out << Json(*result, f, *dir).dump(2) << "\n";
    out.close();  // a write error may only show when the buffer goes out
    if (!out) return ReportFailure(Status::IoError(f.json_path + ": cannot write the JSON report"));
  }
  if (!result->AllVerified()) {
    std::fprintf(stderr, "hoist: bench: a load did not verify byte-exact\n");
    return kExitVerifyMismatch;
  }
  return kExitOk;
}

}  // namespace

Runner RegisterBench(CLI::App& app) {
  auto f = std::make_shared<BenchFlags>();
  CLI::App* cmd = app.add_subcommand(
      "bench",
      "Measure the machine's ceilings, hoist's load and other loaders' strategies on one model");
  cmd->add_option("PATH", f->path,
                  "a model file, index, directory or first GGUF split; or a URL, s3://, gs://, "
                  "az:// or hf:// name")
      ->required();
  cmd->add_option("--device", f->device,
                  "auto, host, cuda:N, hip:N or sim[:options] (default auto)");
  cmd->add_flag("--cold", f->cold,
                "also run each load once from a cold page cache (drops it where allowed)");
  cmd->add_option("--repeat", f->repeat,
                  "warm runs of each load; the table shows the median (default 3)")
      ->check(CLI::Range(1, 100));
  cmd->add_option("--json", f->json_path,
                  "the results as one JSON object on stdout instead of the table, or with FILE "
                  "written to that file beside the table")
      ->expected(0, 1)
      ->each([f](const std::string&) { f->json = true; });
  cmd->parse_complete_callback([f, cmd] { f->json = f->json || cmd->count("--json") > 0; });
  cmd->add_option("--settle", f->settle_s,
                  "seconds to pause before each load after the first, while the GPU driver "
                  "finishes with the memory the previous load freed (default 2 on GPUs, 0 on "
                  "host and sim)")
      ->check(FiniteRange(0.0, 600.0));
  AddLoadSettingFlags(cmd, f->settings, false);
  cmd->add_option("--strategies", f->strategies,
                  "reference strategies to run, or none (default: mmap-pageable pinned-4x1MiB "
                  "direct-4x64MiB)")
      ->delimiter(',');
  return [f] { return RunBenchCommand(*f); };
}

}  // namespace hoist::cli
