// `hoist load` and `hoist verify`: the same load, then (verify) every tensor read back.
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include "api/request.h"
#include "base/checksum.h"
#include "base/json_schema.h"
#include "base/platform.h"
#include "base/units.h"
#include "cli/commands.h"
#include "cli/device_flags.h"
#include "cli/exit_codes.h"
#include "cli/load_flags.h"
#include "cli/progress_meter.h"
#include "format/directory_json.h"
#include "format/model.h"
#include "io/http_storage.h"
#include "pipeline/report_json.h"

namespace hoist::cli {
namespace {

struct LoadFlags {
  std::string path;
  DeviceFlags devices;
  bool json = false;
  bool quiet = false;
  LoadSettingFlags settings;
};

void AddLoadFlags(CLI::App* cmd, LoadFlags& f) {
  cmd->add_option("PATH", f.path,
                  "a model file, index, directory or first GGUF split; or a URL, s3://, gs://, "
                  "az:// or hf:// name")
      ->required();
  AddDeviceFlags(cmd, f.devices);
  cmd->add_flag("--json", f.json, "print the summary as one JSON object on stdout");
  cmd->add_flag("--quiet", f.quiet, "no progress display");
  AddLoadSettingFlags(cmd, f.settings, true);
}

void PrintSummary(const TensorDirectory& dir, const LoadedModel& model, const std::string& path) {
  const LoadReport& r = model.report;
  const double wall = r.wall_s + r.phases.open_parse;  // the device's open is shown apart
  std::printf(
      "loaded %zu tensors, %s from %s to %s in %.3f s (%s; streaming %s)\n", r.tensors,
      FormatBytes(r.tensor_bytes).c_str(), RedactUrl(path).c_str(), r.device.c_str(), wall,
      FormatRate(static_cast<double>(r.tensor_bytes) / wall).c_str(),
      FormatRate(r.phases.stream > 0 ? static_cast<double>(r.tensor_bytes) / r.phases.stream : 0)
          .c_str());
  std::printf(
      "  phases: open+parse %.1f ms, device open %.1f ms, plan %.1f ms, allocate %.1f ms, stream "
      "%.1f ms, teardown %.1f ms\n",
      r.phases.open_parse * 1e3, r.phases.device_open * 1e3, r.phases.plan * 1e3,
      r.phases.allocate * 1e3, r.phases.stream * 1e3, r.phases.teardown * 1e3);
  std::printf("  staging: %zu x %s %s (%s), %d reader threads, %s chunks, %s I/O\n",
              r.staging_buffers, FormatBytes(r.staging_buffer_bytes).c_str(),
              r.pinned_staging ? "pinned" : "pageable",
              FormatBytes(r.staging_buffer_bytes * r.staging_buffers).c_str(), r.threads,
              FormatBytes(r.chunk_bytes).c_str(), IoModeName(r.io));
  if (r.devices.size() > 1) {
    for (const DeviceShare& d : r.devices) {
      std::printf("  %s: %zu tensors, %s by %d reader%s in %.3f s (%s)\n", d.device.c_str(),
                  d.tensors, FormatBytes(d.tensor_bytes).c_str(), d.threads,
                  d.threads == 1 ? "" : "s", d.stream_s,
                  FormatRate(d.stream_s > 0 ? static_cast<double>(d.tensor_bytes) / d.stream_s : 0)
                      .c_str());
    }
  }
  if (r.readers.total > 0) {
    auto share = [&](double s) { return 100 * s / r.readers.total; };
    std::printf(
        "  readers' time: %.3f thread-s; reading %.0f%%, waiting on copies %.0f%%, on staging "
        "buffers %.0f%%, on destinations %.0f%% (settling before asking %.0f%%), starting copies "
        "%.0f%%\n",
        r.readers.total, share(r.readers.read), share(r.readers.copy_wait),
        share(r.readers.buffer_wait), share(r.readers.destination_wait),
        share(r.readers.destination_settle), share(r.readers.copy_start));
  }
  if (r.decoded_on_device_bytes > 0) {
    std::printf(
        "  packed: %s read, %s of tensors decoded on the device (%zu decodes, %.1f ms busy, "
        "%.1f ms after streaming)\n",
        FormatBytes(r.read_bytes).c_str(), FormatBytes(r.decoded_on_device_bytes).c_str(),
        r.decode.tensors, r.decode.busy * 1e3, r.decode.after_stream * 1e3);
  }
  std::printf("  peak RSS: %s\n", FormatBytes(r.peak_rss_bytes).c_str());
  if (r.source_counts.requests > 0) {
    std::printf("  source: %s, %llu requests, %llu retried, %s received\n", r.source.c_str(),
                static_cast<unsigned long long>(r.source_counts.requests),
                static_cast<unsigned long long>(r.source_counts.retries),
                FormatBytes(r.source_counts.bytes).c_str());
  }
  std::printf("  fallbacks: %s\n", r.fallbacks.empty() ? "none" : "");
  for (const std::string& f : r.fallbacks) std::printf("    %s\n", f.c_str());
  for (const std::string& w : r.warnings) std::printf("  warning: %s\n", w.c_str());
  if (!model.checksums().empty()) {
    for (size_t i = 0; i < dir.tensors.size(); ++i) {
      if (!model.loaded(i)) continue;
      std::printf("  %s  %s\n", HexDigest(model.checksums()[i]).c_str(),
                  dir.tensors[i].name.c_str());
    }
  }
}

nlohmann::ordered_json SummaryJson(const TensorDirectory& dir, const LoadedModel& model,
                                   const std::string& path) {
  nlohmann::ordered_json j = {{"schema_version", kJsonSchemaVersion}, {"path", RedactUrl(path)}};
  j.update(ReportToJson(model.report));
  if (!model.checksums().empty()) {
    j["tensors"] = nlohmann::ordered_json::array();
    for (size_t i = 0; i < dir.tensors.size(); ++i) {
      if (!model.loaded(i)) continue;
      j["tensors"].push_back({{"name", dir.tensors[i].name},
                              {"device", model.device_of(i).name()},
                              {"nbytes", dir.tensors[i].nbytes},
                              {"xxh3", HexDigest(model.checksums()[i])}});
    }
  }
  return j;
}

// Opens and loads through the façade; returns the exit code, or -1 with the model loaded.
// `dir` is the model's directory, which the load's own (its parts') refers to.
int OpenAndLoad(const LoadFlags& f, TensorDirectory* dir, std::optional<CompletedLoad>* out) {
  InstallStopSignalHandlers();
  auto request = ToRequest(f.devices);
  if (!request.ok()) return ReportFailure(request.status());
  auto options = ToLoadOptions(f.settings);
  if (!options.ok()) return ReportFailure(options.status());
  request->options = std::move(options).value();
  if (Status s = CheckRequest(*request); !s.ok()) return ReportFailure(s);
  const auto start = std::chrono::steady_clock::now();
  auto opened = OpenModel({f.path, nullptr, std::nullopt, f.settings.stall_timeout_s});
  if (!opened.ok()) return ReportFailure(opened.status());
  *dir = std::move(opened).value();
  const double open_parse =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (const std::string& w : dir->warnings)
    std::fprintf(stderr, "hoist: warning: %s\n", w.c_str());
  ProgressMeter meter(!f.quiet);
  request->options.progress = [&meter](const LoadProgress& p) { return meter.Update(p); };
  Result<CompletedLoad> loaded = Load(*dir, *request);
  meter.Finish();
  if (!loaded.ok()) {
    if (loaded.status().code() == Code::kStalled) ReportAndExitNow(loaded.status());
    return ReportFailure(loaded.status());
  }
  LoadReport& report = loaded->model().report;
  report.phases.open_parse = open_parse;
  for (const std::string& fb : report.fallbacks)
    std::fprintf(stderr, "hoist: warning: %s\n", fb.c_str());
  out->emplace(std::move(loaded).value());
  return -1;
}

}  // namespace

Runner RegisterLoad(CLI::App& app) {
  auto flags = std::make_shared<LoadFlags>();
  CLI::App* cmd = app.add_subcommand(
      "load", "Load every tensor of a model onto a device and report how it went");
  AddLoadFlags(cmd, *flags);
  return [flags]() -> int {
    TensorDirectory model_dir;
    std::optional<CompletedLoad> loaded;
    if (int code = OpenAndLoad(*flags, &model_dir, &loaded); code >= 0) return code;
    const TensorDirectory& dir = loaded->directory();
    if (flags->json) {
      std::cout << DumpJson(SummaryJson(dir, loaded->model(), flags->path)) << "\n";
    } else {
      PrintSummary(dir, loaded->model(), flags->path);
    }
    return kExitOk;
  };
}

// The reference `verify --against` compares with: tensor i is the original's tensor of the same
// name as the loaded directory's tensor i, which must have its dtype, shape and size. A tensor
// either lacks is an invalid argument naming it.
// verify's output: the mismatches listed (exit 5), or the summary and one line saying every
// tensor matched; `against` as RunVerify's.
int ReportVerify(const LoadFlags& flags, const CompletedLoad& loaded,
                 const std::vector<Mismatch>& mismatches, double seconds,
                 const std::string& against) {
  const TensorDirectory& dir = loaded.directory();
  const LoadedModel& model = loaded.model();
  const LoadReport& r = model.report;
  if (flags.json) {
    nlohmann::ordered_json j = SummaryJson(dir, model, flags.path);
    j["verified"] = mismatches.empty();
    j["verify_s"] = seconds;
    j["mismatches"] = nlohmann::ordered_json::array();
    for (const Mismatch& m : mismatches) {
      j["mismatches"].push_back({{"tensor", m.tensor},
                                 {"tensor_offset", m.tensor_offset},
                                 {"file_offset", m.file_offset}});
    }
    std::cout << DumpJson(j) << "\n";
  }
  if (!mismatches.empty()) {
    const std::string compared_with = RedactUrl(against.empty() ? flags.path : against);
    std::fprintf(stderr, "hoist: verify failed: %zu or more tensors on %s differ from %s:\n",
                 mismatches.size(), r.device.c_str(), compared_with.c_str());
    for (const Mismatch& m : mismatches) {
      std::fprintf(stderr, "  %s: first difference at byte %llu of the tensor (file byte %llu)\n",
                   m.tensor.c_str(), static_cast<unsigned long long>(m.tensor_offset),
                   static_cast<unsigned long long>(m.file_offset));
    }
    return kExitVerifyMismatch;
  }
  if (!flags.json) {
    PrintSummary(dir, model, flags.path);
    std::printf("verified %zu tensors (%s) on %s byte for byte against %s in %.3f s: all match\n",
                r.tensors, FormatBytes(r.tensor_bytes).c_str(), r.device.c_str(),
                against.empty() ? "the file" : RedactUrl(against).c_str(), seconds);
  }
  return kExitOk;
}

// hoist verify: loads, then compares every tensor with the file, or with `against`'s tensors
// of the same names.
int RunVerify(const LoadFlags& flags, const std::string& against) {
  TensorDirectory model_dir;
  std::optional<CompletedLoad> loaded;
  if (int code = OpenAndLoad(flags, &model_dir, &loaded); code >= 0) return code;
  const std::string compared_with = against.empty() ? "the file" : RedactUrl(against);
  if (!flags.quiet) {
    std::fprintf(stderr, "hoist: verifying %zu tensors against %s\n",
                 loaded->model().report.tensors, compared_with.c_str());
  }
  const auto start = std::chrono::steady_clock::now();
  constexpr size_t kListed = 10;
  const int threads = loaded->model().report.threads;
  auto mismatches =
      against.empty()
          ? Verify(*loaded, threads, kListed, flags.settings.stall_timeout_s)
          : VerifyAgainst(*loaded, against, threads, kListed, flags.settings.stall_timeout_s);
  if (!mismatches.ok()) return ReportOrExitNow(mismatches.status());
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return ReportVerify(flags, *loaded, *mismatches, seconds, against);
}

Runner RegisterVerify(CLI::App& app) {
  auto flags = std::make_shared<LoadFlags>();
  auto against = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand(
      "verify",
      "Load a model, read every tensor back from the device and compare it with the file");
  AddLoadFlags(cmd, *flags);
  cmd->add_option("--against", *against,
                  "compare with this model's tensors of the same names (the original of a "
                  "packed or converted copy) instead of the loaded file's")
      ->type_name("ORIGINAL");
  return [flags, against]() -> int { return RunVerify(*flags, *against); };
}

}  // namespace hoist::cli
