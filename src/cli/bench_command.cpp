// `hoist bench`: the machine's ceilings, hoist's load and the loaders other engines use, on
// one file and device in one run, each load verified; a table and JSON.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "base/platform.h"
#include "base/units.h"
#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "cli/load_flags.h"
#include "device/checked_device.h"
#include "device/host_memory.h"
#include "format/model.h"
#include "io/file.h"
#include "measure/ceilings.h"
#include "measure/reference_strategies.h"
#include "measure/rss_sampler.h"
#include "pipeline/loader.h"

namespace hoist::cli {
namespace {

struct BenchFlags {
  std::string path;
  std::string device = "auto";
  bool cold = false;
  int repeat = 3;
  std::string json_path;
  LoadSettingFlags settings;  // hoist's own load
  std::vector<std::string> strategies = {"mmap-pageable", "pinned-4x1MiB", "direct-4x64MiB"};
  double settle_s = -1;  // < 0: kGpuSettleSeconds on GPUs, 0 on host and sim
};

// A load into device memory freed just before streams slower while the driver is still busy
// with the freed memory: the plain loop into a new 20 GiB allocation made right after freeing
// the old one ran 47.9-50.1 GB/s against 53.1-53.5 into the same allocation, 51 after a pause
// of 0.1-0.25 s and 52.9-53.3 after 0.5-3 s (H200, runs 19-20, docs/PERFORMANCE.md). A process
// that loads once never sees it; the bench's repeated loads pause so that each one is measured
// as that load would be.
constexpr double kGpuSettleSeconds = 2;

struct Row {
  std::string strategy;
  std::string mode;  // "warm" or "cold"
  double gbps = 0;
  double best_gbps = 0;
  double first_gbps = 0;  // the row's first run: it pinned its staging memory afresh
  double ceiling_gbps = 0;
  uint64_t peak_host_bytes = 0;
  bool verified = false;
  std::string note;
  std::optional<double> time_to_first_byte_s;
  std::vector<nlohmann::json> runs;  // each run's GB/s (and hoist's phases), in order
};

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 == 1 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

// Empties the page cache before a cold run: the whole cache where allowed, else the model's
// files' pages (posix_fadvise DONTNEED). Returns how, for the report.
std::string MakeCold(const TensorDirectory& dir) {
  const CacheDrop drop = DropPageCache();
  if (drop.dropped) return drop.how;
  bool advised = true;
  for (const FileEntry& f : dir.files) {
    auto file = dir.source().Open(f.path, {});
    advised =
        advised && file.ok() && (*file)->Advise(AccessHint::kDropCache, 0, (*file)->size()).ok();
  }
  return advised ? "the model's pages dropped with DONTNEED (" + drop.how + ")"
                 : "not dropped: " + drop.how;
}

class Bench {
 public:
  Bench(const BenchFlags& flags, LoadOptions load_options, TensorDirectory dir,
        std::shared_ptr<CheckedDevice> device)
      : flags_(flags),
        load_options_(std::move(load_options)),
        dir_(std::move(dir)),
        device_(std::move(device)) {
    for (const FileEntry& f : dir_.files) paths_.push_back(f.path);
    for (const TensorEntry& t : dir_.tensors) bytes_ += t.nbytes;
    gpu_ = device_->kind() == DeviceKind::kGpu;
    settle_s_ = flags.settle_s >= 0 ? flags.settle_s : (gpu_ ? kGpuSettleSeconds : 0.0);
  }

  Status Ceilings() {
    const int threads = std::max(8, DefaultReaderThreads());
    HOIST_ASSIGN_OR_RETURN(Throughput warmup,
                           MeasureParallelRead(dir_.source(), paths_, threads, 8 * kMiB, false));
    (void)warmup;
    HOIST_ASSIGN_OR_RETURN(Throughput cached,
                           MeasureParallelRead(dir_.source(), paths_, threads, 8 * kMiB, false));
    page_cache_gbps_ = cached.gbps();
    // The raw direct read: the better of many small reads and fewer large ones (NVMe and
    // virtual disks differ in which they prefer).
    for (const auto& [direct_threads, direct_chunk] :
         {std::pair{threads, 8 * kMiB}, std::pair{8, 64 * kMiB}}) {
      auto direct = MeasureParallelRead(dir_.source(), paths_, direct_threads, direct_chunk, true);
      if (direct.ok()) {
        direct_gbps_ = std::max(direct_gbps_, direct->gbps());
      } else {
        notes_.push_back("direct read ceiling not measured: " + direct.status().message());
        break;
      }
    }
    const uint64_t total = std::clamp<uint64_t>(bytes_, 256 * kMiB, 8 * kGiB);
    HOIST_ASSIGN_OR_RETURN(Throughput h2d, MeasureHostToDevice(*device_, 64 * kMiB, total, true,
                                                               load_options_.stall_timeout_s));
    h2d_gbps_ = h2d.gbps();
    // The file must be back in the page cache for the warm runs.
    auto rewarm = MeasureParallelRead(dir_.source(), paths_, threads, 8 * kMiB, false);
    return rewarm.ok() ? Status::Ok() : rewarm.status();
  }

  double WarmCeiling() const { return std::min(h2d_gbps_, page_cache_gbps_); }
  double ColdCeiling() const {
    return direct_gbps_ > 0 ? std::min(h2d_gbps_, direct_gbps_) : WarmCeiling();
  }

  // hoist's own load, `runs` times.
  Status RunHoist(const std::string& mode, IoMode io, int runs, const std::string& label) {
    LoadOptions options = load_options_;
    options.io = io;
    return RunRow(label, mode, runs, true, [&] { return Load(dir_, device_, options); });
  }

  Status RunReference(const std::string& name, const std::string& mode, int runs) {
    std::optional<ReferenceStrategy> strategy;
    for (ReferenceStrategy s : AllReferenceStrategies()) {
      if (name == ReferenceStrategyName(s)) strategy = s;
    }
    if (!strategy) return Status::InvalidArgument("unknown strategy '" + name + "'");
    return RunRow(name, mode, runs, false, [&] {
      return LoadWithReferenceStrategy(dir_, device_, *strategy, load_options_.stall_timeout_s);
    });
  }

  void Print() const {
    std::printf("hoist bench: %s (%s in %zu tensors, %zu file%s) on %s\n", flags_.path.c_str(),
                FormatBytes(bytes_).c_str(), dir_.tensors.size(), dir_.files.size(),
                dir_.files.size() == 1 ? "" : "s", device_->Info().description.c_str());
    char direct[32] = "n/a";
    if (direct_gbps_ > 0) std::snprintf(direct, sizeof direct, "%.2f GB/s", direct_gbps_);
    std::printf(
        "ceilings: host-to-device pinned %.2f GB/s, page-cache read %.2f GB/s, direct read %s\n",
        h2d_gbps_, page_cache_gbps_, direct);
    std::printf("%-16s %-5s %9s %9s %9s %12s %9s\n", "strategy", "mode", "GB/s", "best", "ratio",
                "peak host", "verified");
    // ratio: median GB/s over the slowest ceiling on the path (warm: min(h2d, page cache);
    // cold: min(h2d, direct read)); peak host: resident memory above the run's start, less the
    // destination itself on host and sim.
    for (const Row& r : rows_) {
      std::printf("%-16s %-5s %9.2f %9.2f %8.0f%% %12s %9s\n", r.strategy.c_str(), r.mode.c_str(),
                  r.gbps, r.best_gbps, r.ceiling_gbps > 0 ? 100 * r.gbps / r.ceiling_gbps : 0.0,
                  FormatBytes(r.peak_host_bytes).c_str(), r.verified ? "yes" : "NO");
    }
    for (const Row& r : rows_) {
      if (r.time_to_first_byte_s && r.mode == "warm") {
        std::printf("time to first byte (%s, plan + allocate after open): %.1f ms\n",
                    r.strategy.c_str(), *r.time_to_first_byte_s * 1e3);
        break;
      }
    }
    const Row* hoist_warm = Find("hoist", "warm");
    if (hoist_warm != nullptr && flags_.repeat > 1 && gpu_) {
      std::printf(
          "hoist warm, first load in the process (pins its staging memory): %.2f GB/s; "
          "later loads reuse it\n",
          hoist_warm->first_gbps);
    }
    if (settle_s_ > 0 && loads_started_ > 1) {
      std::printf(
          "each load after the first began %.1f s after the previous one freed its device memory "
          "(--settle)\n",
          settle_s_);
    }
    for (const Row& r : rows_) {
      if (hoist_warm != nullptr && r.strategy != "hoist" && r.mode == "warm" && r.gbps > 0) {
        std::printf("hoist warm is %.1fx %s\n", hoist_warm->gbps / r.gbps, r.strategy.c_str());
      }
    }
    for (const std::string& n : notes_) std::printf("note: %s\n", n.c_str());
    for (const Row& r : rows_) {
      if (!r.note.empty())
        std::printf("note: %s %s: %s\n", r.strategy.c_str(), r.mode.c_str(), r.note.c_str());
    }
  }

  nlohmann::json Json() const {
    nlohmann::json j;
    j["model"] = {{"path", flags_.path},
                  {"bytes", bytes_},
                  {"tensors", dir_.tensors.size()},
                  {"files", dir_.files.size()},
                  {"format", dir_.format}};
    j["ceilings"] = {
        {"h2d_pinned_gbps", h2d_gbps_},
        {"page_cache_read_gbps", page_cache_gbps_},
        {"direct_read_gbps", direct_gbps_ > 0 ? nlohmann::json(direct_gbps_) : nlohmann::json()}};
    j["results"] = nlohmann::json::array();
    for (const Row& r : rows_) {
      nlohmann::json row = {
          {"strategy", r.strategy},
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
      row["runs"] = r.runs;
      j["results"].push_back(row);
    }
    const DeviceInfo info = device_->Info();
    j["machine"] = {{"cpus", CpuCount()},
                    {"memory_bytes", PhysicalMemoryBytes()},
                    {"device", info.name},
                    {"device_description", info.description},
                    {"device_memory_bytes", info.total_memory}};
    j["notes"] = notes_;
    j["repeat"] = flags_.repeat;
    j["settle_s"] = settle_s_;
    return j;
  }

  bool AllVerified() const {
    return std::all_of(rows_.begin(), rows_.end(),
                       [](const Row& r) { return r.verified || r.gbps == 0; });
  }

 private:
  // One row: `load` `runs` times, each timed from its start to the end of its teardown
  // (LoadReport::wall_s). The first run pins its staging memory afresh, later ones reuse it.
  // The last load is verified byte-exact after every timed run: reading 20 GiB back from the
  // device is not something a timed load should follow. A reference strategy this machine
  // cannot run (kUnavailable) gets a "not run" note; hoist's own load failing is an error.
  Status RunRow(const std::string& strategy, const std::string& mode, int runs, bool hoist,
                const std::function<Result<std::unique_ptr<LoadedModel>>()>& load) {
    Row row;
    row.strategy = strategy;
    row.mode = mode;
    std::vector<double> rates;
    ReleaseCachedMemory();
    for (int r = 0; r < runs; ++r) {
      if (mode == "cold") row.note = MakeCold(dir_);
      Settle();
      RssSampler rss;
      auto loaded = load();
      row.peak_host_bytes = std::max(row.peak_host_bytes, rss.Stop());
      if (!loaded.ok()) {
        if (hoist || loaded.status().code() != Code::kUnavailable) {
          return loaded.status().WithContext(strategy + " " + mode);
        }
        row.note = "not run: " + loaded.status().message();
        break;
      }
      const LoadReport& rep = (*loaded)->report;
      rates.push_back(static_cast<double>(bytes_) / rep.wall_s / 1e9);
      nlohmann::json run = {{"gbps", rates.back()}, {"wall_s", rep.wall_s}};
      if (hoist) {
        row.time_to_first_byte_s = rep.phases.plan + rep.phases.allocate;
        run.update({{"plan_s", rep.phases.plan},
                    {"allocate_s", rep.phases.allocate},
                    {"allocate_device_s", rep.phases.allocate_device},
                    {"allocate_staging_s", rep.phases.allocate_staging},
                    {"stream_s", rep.phases.stream},
                    {"teardown_s", rep.phases.teardown}});
        for (const std::string& fb : rep.fallbacks) notes_.push_back(strategy + ": " + fb);
      }
      row.runs.push_back(std::move(run));
      if (r == runs - 1) {
        HOIST_ASSIGN_OR_RETURN(row.verified, VerifyLoaded(**loaded));
      }
    }
    Finish(row, rates);
    return Status::Ok();
  }

  // Before each timed load but the bench's first: the previous one freed its device memory.
  void Settle() {
    if (loads_started_++ > 0 && settle_s_ > 0) {
      // In steps, so that Ctrl-C during the pause ends the bench at once (the load after it
      // sees the signal).
      const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(settle_s_);
      while (StopSignalReceived() == 0 && std::chrono::steady_clock::now() < end) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    }
  }

  Result<bool> VerifyLoaded(LoadedModel& model) {
    HOIST_ASSIGN_OR_RETURN(auto mismatches,
                           Verify(dir_, model, std::max(4, DefaultReaderThreads()), 1));
    if (!mismatches.empty()) {
      notes_.push_back("MISMATCH in " + mismatches[0].tensor + " at byte " +
                       std::to_string(mismatches[0].tensor_offset));
    }
    return mismatches.empty();
  }

  void Finish(Row& row, const std::vector<double>& rates) {
    // host and sim keep "device" memory in this process: it is the destination, not overhead.
    if (!gpu_) row.peak_host_bytes -= std::min(row.peak_host_bytes, bytes_);
    row.gbps = Median(rates);
    row.best_gbps = rates.empty() ? 0 : *std::max_element(rates.begin(), rates.end());
    row.first_gbps = rates.empty() ? 0 : rates.front();
    row.ceiling_gbps = row.mode == "warm" ? WarmCeiling() : ColdCeiling();
    rows_.push_back(row);
  }

  const Row* Find(const std::string& strategy, const std::string& mode) const {
    for (const Row& r : rows_) {
      if (r.strategy == strategy && r.mode == mode) return &r;
    }
    return nullptr;
  }

  const BenchFlags& flags_;
  const LoadOptions load_options_;
  TensorDirectory dir_;
  std::shared_ptr<CheckedDevice> device_;
  std::vector<std::string> paths_;
  uint64_t bytes_ = 0;
  bool gpu_ = false;  // cuda:N or hip:N
  double settle_s_ = 0;
  int loads_started_ = 0;
  double h2d_gbps_ = 0;
  double page_cache_gbps_ = 0;
  double direct_gbps_ = 0;
  std::vector<Row> rows_;
  std::vector<std::string> notes_;
};

int RunBench(BenchFlags f) {
  std::erase_if(f.strategies, [](const std::string& s) { return s.empty() || s == "none"; });
  InstallStopSignalHandlers();
  auto options = ToLoadOptions(f.settings);
  if (!options.ok()) return ReportFailure(options.status());
  auto dir = ReadModelDirectory(f.path);
  if (!dir.ok()) return ReportFailure(dir.status());
  auto device = OpenDevice(f.device);
  if (!device.ok()) return ReportFailure(device.status());
  Bench bench(f, std::move(options).value(), std::move(dir).value(), std::move(device).value());
  std::fprintf(stderr, "hoist bench: measuring ceilings\n");
  if (Status s = bench.Ceilings(); !s.ok()) return ReportOrExitNow(s);
  std::fprintf(stderr, "hoist bench: hoist, warm\n");
  if (Status s = bench.RunHoist("warm", IoMode::kBuffered, f.repeat, "hoist"); !s.ok())
    return ReportOrExitNow(s);
  for (const std::string& name : f.strategies) {
    std::fprintf(stderr, "hoist bench: %s, warm\n", name.c_str());
    if (Status s = bench.RunReference(name, "warm", f.repeat); !s.ok()) return ReportOrExitNow(s);
  }
  if (f.cold) {
    std::fprintf(stderr, "hoist bench: cold runs\n");
    if (Status s = bench.RunHoist("cold", IoMode::kDirect, 1, "hoist"); !s.ok())
      return ReportOrExitNow(s);
    if (Status s = bench.RunHoist("cold", IoMode::kBuffered, 1, "hoist-buffered"); !s.ok())
      return ReportOrExitNow(s);
    for (const std::string& name : f.strategies) {
      if (Status s = bench.RunReference(name, "cold", 1); !s.ok()) return ReportOrExitNow(s);
    }
  }
  bench.Print();
  if (!f.json_path.empty()) {
    std::ofstream out(f.json_path);
    out << bench.Json().dump(2) << "\n";
    out.close();  // a write error may only show when the buffer goes out
    if (!out) return ReportFailure(Status::IoError(f.json_path + ": cannot write the JSON report"));
  }
  if (!bench.AllVerified()) {
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
  cmd->add_option("PATH", f->path, "a model file, index, directory or first GGUF split")
      ->required();
  cmd->add_option("--device", f->device,
                  "auto, host, cuda:N, hip:N or sim[:options] (default auto)");
  cmd->add_flag("--cold", f->cold,
                "also run each load once from a cold page cache (drops it where allowed)");
  cmd->add_option("--repeat", f->repeat,
                  "warm runs of each load; the table shows the median (default 3)")
      ->check(CLI::Range(1, 100));
  cmd->add_option("--json", f->json_path, "write the results as JSON to this file");
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
  return [f] { return RunBench(*f); };
}

}  // namespace hoist::cli
