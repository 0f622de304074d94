#include "measure/bench_runner.h"

#include <algorithm>
#include <chrono>
#include <thread>
#include <utility>

#include "base/platform.h"
#include "base/units.h"
#include "measure/ceilings.h"
#include "measure/reference_strategies.h"
#include "measure/rss_sampler.h"

namespace hoist {
namespace {

// A load into device memory freed just before streams slower while the GPU driver is still
// busy with the freed memory (docs/PERFORMANCE.md, "repeated loads"). A process that loads
// once never sees it; the bench's repeated loads pause so that each one is measured as that
// load would be.
constexpr double kGpuSettleSeconds = 2;

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 == 1 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

// Drops the model's own pages from the page cache before a cold run (posix_fadvise DONTNEED),
// never the machine's whole cache: other programs' pages stay. Returns how, for the report.
// The model's files as stored: a packed model's coded file, not the decoding view of it that
// the load reads through the CPU.
Storage& StoredSource(const TensorDirectory& dir) {
  return dir.stored_storage ? *dir.stored_storage : dir.source();
}

std::string MakeCold(const TensorDirectory& dir) {
  std::vector<std::string> paths;
  for (const FileEntry& f : dir.files) paths.push_back(f.path);
  const Status dropped = DropFilesFromPageCache(StoredSource(dir), paths);
  return dropped.ok() ? "the model's pages dropped with DONTNEED"
                      : "not dropped: " + dropped.message();
}

class Bench {
 public:
  Bench(const BenchSpec& spec, const TensorDirectory& dir, std::shared_ptr<CheckedDevice> device,
        const LoadOptions& options)
      : dir_(dir), device_(std::move(device)), load_options_(options) {
    for (const FileEntry& f : dir_.files) paths_.push_back(f.path);
    for (const TensorEntry& t : dir_.tensors) result_.model_bytes += t.nbytes;
    gpu_ = device_->kind() == DeviceKind::kGpu;
    result_.device = device_->Info();
    result_.settle_s = spec.settle_s >= 0 ? spec.settle_s : (gpu_ ? kGpuSettleSeconds : 0.0);
  }

  Status Ceilings() {
    const int threads = std::max(8, DefaultReaderThreads());
    Storage& storage = StoredSource(dir_);
    HOIST_ASSIGN_OR_RETURN(Throughput warmup,
                           MeasureParallelRead(storage, paths_, threads, 8 * kMiB, false));
    (void)warmup;
    HOIST_ASSIGN_OR_RETURN(Throughput cached,
                           MeasureParallelRead(storage, paths_, threads, 8 * kMiB, false));
    result_.page_cache_read_gbps = cached.gbps();
    result_.ceiling_read_bytes = cached.bytes;
    if (dir_.stored_storage) {
      result_.notes.push_back(
          "a packed model: the read ceilings read its " + std::to_string(cached.bytes) +
          " stored bytes (" +
          std::to_string(cached.bytes * 100 / std::max<uint64_t>(1, result_.model_bytes)) +
          "% of the model's); a load beyond them is what decoding gains");
    }
    // The raw direct read: the better of many small reads and fewer large ones (NVMe and
    // virtual disks differ in which they prefer).
    for (const auto& [direct_threads, direct_chunk] :
         {std::pair{threads, 8 * kMiB}, std::pair{8, 64 * kMiB}}) {
      auto direct = MeasureParallelRead(storage, paths_, direct_threads, direct_chunk, true);
      if (direct.ok()) {
        result_.direct_read_gbps = std::max(result_.direct_read_gbps, direct->gbps());
      } else {
        result_.notes.push_back("direct read ceiling not measured: " + direct.status().message());
        break;
      }
    }
    // A GPU's link is timed over the model's size (at least 256 MiB, 5 ms at 50 GB/s); host
    // and sim copy with the CPU, whose rate 64 MiB times as well, and more only costs memory
    // and time (under a sanitizer, most of a bench's).
    const uint64_t total =
        gpu_ ? std::clamp<uint64_t>(result_.model_bytes, 256 * kMiB, 8 * kGiB) : 64 * kMiB;
    const uint64_t copy = gpu_ ? 64 * kMiB : 16 * kMiB;
    HOIST_ASSIGN_OR_RETURN(Throughput h2d, MeasureHostToDevice(*device_, copy, total, true,
                                                               load_options_.stall_timeout_s));
    result_.h2d_pinned_gbps = h2d.gbps();
    // The file must be back in the page cache for the warm runs.
    auto rewarm = MeasureParallelRead(storage, paths_, threads, 8 * kMiB, false);
    return rewarm.ok() ? Status::Ok() : rewarm.status();
  }

  double WarmCeiling() const {
    return std::min(result_.h2d_pinned_gbps, result_.page_cache_read_gbps);
  }
  double ColdCeiling() const {
    return result_.direct_read_gbps > 0
               ? std::min(result_.h2d_pinned_gbps, result_.direct_read_gbps)
               : WarmCeiling();
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

  BenchResult Take() { return std::move(result_); }

 private:
  // One row: `load` `runs` times, each timed from its start to the end of its teardown
  // (LoadReport::wall_s). The first run pins its staging memory afresh, later ones reuse it.
  // The last load is verified byte-exact after every timed run: reading 20 GiB back from the
  // device is not something a timed load should follow. A reference strategy this machine
  // cannot run (kUnavailable) gets a "not run" note; hoist's own load failing is an error.
  Status RunRow(const std::string& strategy, const std::string& mode, int runs, bool hoist,
                const std::function<Result<std::unique_ptr<LoadedModel>>()>& load) {
    BenchRow row;
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
      rates.push_back(static_cast<double>(result_.model_bytes) / rep.wall_s / 1e9);
      BenchRun run{rates.back(), rep.wall_s, std::nullopt};
      if (hoist) {
        row.time_to_first_byte_s = rep.phases.plan + rep.phases.allocate;
        run.phases = rep.phases;
        for (const std::string& fb : rep.fallbacks) result_.notes.push_back(strategy + ": " + fb);
      }
      row.runs.push_back(run);
      if (r == runs - 1) {
        HOIST_ASSIGN_OR_RETURN(row.verified, VerifyLoaded(**loaded));
      }
    }
    Finish(row, rates);
    return Status::Ok();
  }

  // Before each timed load but the bench's first: the previous one freed its device memory.
  void Settle() {
    if (result_.loads++ > 0 && result_.settle_s > 0) {
      // In steps, so that Ctrl-C during the pause ends the bench at once (the load after it
      // sees the signal).
      const auto end =
          std::chrono::steady_clock::now() + std::chrono::duration<double>(result_.settle_s);
      while (StopSignalReceived() == 0 && std::chrono::steady_clock::now() < end) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    }
  }

  Result<bool> VerifyLoaded(LoadedModel& model) {
    HOIST_ASSIGN_OR_RETURN(auto mismatches,
                           Verify(dir_, model, std::max(4, DefaultReaderThreads()), 1));
    if (!mismatches.empty()) {
      result_.notes.push_back("MISMATCH in " + mismatches[0].tensor + " at byte " +
                              std::to_string(mismatches[0].tensor_offset));
    }
    return mismatches.empty();
  }

  void Finish(BenchRow& row, const std::vector<double>& rates) {
    // host and sim keep "device" memory in this process: it is the destination, not overhead.
    if (!gpu_) row.peak_host_bytes -= std::min(row.peak_host_bytes, result_.model_bytes);
    row.gbps = Median(rates);
    row.best_gbps = rates.empty() ? 0 : *std::max_element(rates.begin(), rates.end());
    row.first_gbps = rates.empty() ? 0 : rates.front();
    row.ceiling_gbps = row.mode == "warm" ? WarmCeiling() : ColdCeiling();
    result_.rows.push_back(row);
  }

  const TensorDirectory& dir_;
  std::shared_ptr<CheckedDevice> device_;
  const LoadOptions& load_options_;
  std::vector<std::string> paths_;
  bool gpu_ = false;
  BenchResult result_;
};

}  // namespace

const BenchRow* BenchResult::Find(const std::string& strategy, const std::string& mode) const {
  for (const BenchRow& r : rows) {
    if (r.strategy == strategy && r.mode == mode) return &r;
  }
  return nullptr;
}

bool BenchResult::AllVerified() const {
  return std::all_of(rows.begin(), rows.end(),
                     [](const BenchRow& r) { return r.verified || r.gbps == 0; });
}

Result<BenchResult> RunBench(const BenchSpec& spec, const TensorDirectory& dir,
                             const std::shared_ptr<CheckedDevice>& device,
                             const LoadOptions& options) {
  Bench bench(spec, dir, device, options);
  auto stage = [&](const std::string& what) {
    if (spec.on_stage) spec.on_stage(what);
  };
  stage("measuring ceilings");
  HOIST_RETURN_IF_ERROR(bench.Ceilings());
  stage("hoist, warm");
  HOIST_RETURN_IF_ERROR(bench.RunHoist("warm", IoMode::kBuffered, spec.repeat, "hoist"));
  for (const std::string& name : spec.strategies) {
    stage(name + ", warm");
    HOIST_RETURN_IF_ERROR(bench.RunReference(name, "warm", spec.repeat));
  }
  if (spec.cold) {
    stage("cold runs");
    HOIST_RETURN_IF_ERROR(bench.RunHoist("cold", IoMode::kDirect, 1, "hoist"));
    HOIST_RETURN_IF_ERROR(bench.RunHoist("cold", IoMode::kBuffered, 1, "hoist-buffered"));
    for (const std::string& name : spec.strategies) {
      HOIST_RETURN_IF_ERROR(bench.RunReference(name, "cold", 1));
    }
  }
  return bench.Take();
}

}  // namespace hoist
