// `hoist bench`'s runs: the machine's ceilings, hoist's load and the loaders other engines use,
// on one model and device in one process, each load verified. Returns the figures; the CLI
// renders them as the table and the JSON.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "device/checked_device.h"
#include "format/tensor_directory.h"
#include "pipeline/loader.h"

namespace hoist {

struct BenchSpec {
  bool cold = false;                    // also each load once from a cold page cache
  int repeat = 3;                       // warm runs of each load
  std::vector<std::string> strategies;  // reference strategies by name
  double settle_s = -1;  // pause before each load after the first; < 0: the device's default
  // Told each stage as it starts ("hoist, warm"), for a progress line.
  std::function<void(const std::string&)> on_stage;
};

struct BenchRun {
  double gbps = 0;
  double wall_s = 0;
  std::optional<PhaseSeconds> phases;  // hoist's own loads
};

struct BenchRow {
  std::string strategy;  // "hoist", "hoist-buffered" or a reference strategy's name
  std::string mode;      // "warm" or "cold"
  double gbps = 0;       // median of the runs
  double best_gbps = 0;
  double first_gbps = 0;  // the row's first run: it pinned its staging memory afresh
  double ceiling_gbps = 0;
  uint64_t peak_host_bytes = 0;  // resident memory above the run's start (less the destination
                                 // itself on host and sim)
  bool verified = false;
  std::string note;
  std::optional<double> time_to_first_byte_s;  // plan + allocate, hoist's rows
  std::vector<BenchRun> runs;                  // in order
};

struct BenchResult {
  DeviceInfo device;
  uint64_t model_bytes = 0;
  double h2d_pinned_gbps = 0;
  double page_cache_read_gbps = 0;
  double direct_read_gbps = 0;  // 0: not measured (see notes)
  // The bytes each read ceiling reads: the model's files as stored (a packed model's coded
  // bytes, fewer than model_bytes).
  uint64_t ceiling_read_bytes = 0;
  std::vector<BenchRow> rows;
  std::vector<std::string> notes;
  double settle_s = 0;
  int loads = 0;  // loads started

  const BenchRow* Find(const std::string& strategy, const std::string& mode) const;
  bool AllVerified() const;
};

// A stalled device or a stop signal ends it with that status; a reference strategy this machine
// cannot run is a row with a "not run" note; hoist's own load failing is an error.
Result<BenchResult> RunBench(const BenchSpec& spec, const TensorDirectory& dir,
                             const std::shared_ptr<CheckedDevice>& device,
                             const LoadOptions& options);

}  // namespace hoist
