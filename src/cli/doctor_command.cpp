// `hoist doctor`: this machine's ceilings, the settings hoist will use and why, and the
// known traps (pageable copies on HIP, network file systems, memlock limits, tmpfs).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/build_info.h"
#include "base/json_schema.h"
#include "base/platform.h"
#include "base/units.h"
#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "cli/load_flags.h"
#include "device/backends.h"
#include "device/checked_device.h"
#include "device/host_memory.h"
#include "format/model.h"
#include "io/http_storage.h"
#include "io/hub.h"
#include "measure/ceilings.h"
#include "pipeline/loader.h"

namespace hoist::cli {
namespace {

struct DoctorFlags {
  std::string path;
  std::string device = "auto";
  bool json = false;
  double stall_timeout_s = kDefaultStallTimeoutSeconds;
};

struct Finding {
  std::string name;
  std::string value;
  std::string why;
};

// Why 4 MiB chunks, from this machine's own copies: a chunk is one copy, so it wants the large
// copies' rate without the buffers growing out of the CPU's cache.
std::string ChunkReason(const Result<Throughput>& small, const Result<Throughput>& large) {
  std::string why = "one read and one copy each; ";
  if (small.ok() && large.ok()) {
    char rates[160];
    std::snprintf(rates, sizeof rates,
                  "here pinned copies of 1 MiB ran at %.2f GB/s and of 64 MiB at %.2f: ",
                  small->gbps(), large->gbps());
    why += rates;
  }
  return why +
         "4 MiB is near the large copies' rate while two buffers per reader stay small (the "
         "sweep behind it: docs/PERFORMANCE.md, \"Why the defaults\")";
}

class Doctor {
 public:
  // key: the JSON's name (snake_case, in GB/s); label: the table's.
  void Measured(const std::string& key, const std::string& name, const Result<Throughput>& t) {
    // A stalled device or a stop signal ends the doctor; other failures are findings.
    if (!t.ok()) {
      const Code code = t.status().code();
      if (code == Code::kStalled || code == Code::kCancelled) ReportAndExitNow(t.status());
    }
    if (t.ok()) {
      char text[64];
      std::snprintf(text, sizeof text, "%.2f GB/s", t->gbps());
      ceilings_.push_back({name, text, ""});
      json_["ceilings"][key] = t->gbps();
    } else {
      ceilings_.push_back({name, "not measured", RedactSecrets(t.status().message())});
      json_["ceilings"][key] = nullptr;
      json_["not_measured"][key] = RedactSecrets(t.status().message());
    }
  }
  // key and value: the JSON's (numbers in bytes); name and shown: the table's.
  void Setting(const std::string& key, const nlohmann::json& value, const std::string& name,
               const std::string& shown, const std::string& why) {
    settings_.push_back({name, shown, why});
    json_["settings"][key] = {{"value", value}, {"why", why}};
  }
  void Trap(const std::string& what) {
    traps_.push_back(what);
    json_["traps"].push_back(what);
  }
  void Fact(const std::string& name, const nlohmann::json& value) {
    json_["machine"][name] = value;
  }
  // A backend compiled in with no usable device here, and why; or the device standing in for
  // the one asked for.
  void Unusable(const std::string& why) {
    unusable_.push_back(why);
    json_["unusable_backends"].push_back(why);
  }
  // A device this build can open here, with what it can do.
  void Device(const DeviceInfo& d) {
    const DeviceCapabilities& c = d.capabilities;
    std::string can;
    auto add = [&](bool has, const char* what) {
      if (has) can += (can.empty() ? "" : ", ") + std::string(what);
    };
    add(c.async_copies, "async copies");
    add(c.needs_pinned_staging(), "needs pinned staging");
    add(c.pageable_copies_can_hang, "pageable copies can hang");
    add(c.can_abandon, "can abandon copies");
    add(c.caches_pinned_memory, "keeps pinned memory for the next load");
    add(c.memory_is_host, "reads straight into its memory");
    std::string peers;
    for (const std::string& p : c.peers) peers += (peers.empty() ? "" : " ") + p;
    if (!peers.empty()) can += "; peers: " + peers;
    devices_.push_back({d.name, d.description, can});
    json_["devices"].push_back({{"name", d.name},
                                {"kind", DeviceKindName(d.kind)},
                                {"description", d.description},
                                {"total_memory_bytes", d.total_memory},
                                {"async_copies", c.async_copies},
                                {"needs_pinned_staging", c.needs_pinned_staging()},
                                {"pageable_copies_can_hang", c.pageable_copies_can_hang},
                                {"can_abandon", c.can_abandon},
                                {"caches_pinned_memory", c.caches_pinned_memory},
                                {"memory_is_host", c.memory_is_host},
                                {"peers", c.peers}});
  }

  void Print(const std::string& header) const {
    std::printf("%s\n\ndevices\n", header.c_str());
    for (const Finding& d : devices_) {
      std::printf("  %-8s %s: %s\n", d.name.c_str(), d.value.c_str(), d.why.c_str());
    }
    for (const std::string& why : unusable_) std::printf("  unusable: %s\n", why.c_str());
    std::printf("\nceilings\n");
    for (const Finding& f : ceilings_) {
      std::printf("  %-34s %s%s%s\n", f.name.c_str(), f.value.c_str(), f.why.empty() ? "" : ": ",
                  f.why.c_str());
    }
    std::printf("\nsettings hoist will use\n");
    for (const Finding& f : settings_)
      std::printf("  %-14s %-12s %s\n", f.name.c_str(), f.value.c_str(), f.why.c_str());
    std::printf("\ntraps\n");
    if (traps_.empty()) std::printf("  none found\n");
    for (const std::string& t : traps_) std::printf("  ! %s\n", t.c_str());
  }
  nlohmann::json& json() { return json_; }

 private:
  std::vector<Finding> devices_;  // name, description, capabilities
  std::vector<std::string> unusable_;
  std::vector<Finding> ceilings_;
  std::vector<Finding> settings_;
  std::vector<std::string> traps_;
  nlohmann::json json_ = {{"schema_version", kJsonSchemaVersion},
                          {"traps", nlohmann::json::array()}};
};

// The storage that holds a local model: cold (its pages dropped), direct, and page-cache reads.
void MeasureLocalStorage(Doctor& doctor, Storage& storage, const std::vector<std::string>& paths,
                         const std::string& model, std::string* header) {
  const std::string fs = FileSystemKind(paths[0]);
  *header += "\nmodel: " + model + " on " + fs;
  doctor.Fact("file_system", fs);
  const int threads = std::max(8, DefaultReaderThreads());
  // Only the model's own pages leave the cache: emptying the machine's whole cache would
  // slow every other program on it.
  const Status dropped = DropFilesFromPageCache(storage, paths);
  if (dropped.ok()) {
    doctor.Measured("storage_read_buffered_cold_gbps", "storage read, buffered (cold)",
                    MeasureParallelRead(storage, paths, threads, 8 * kMiB, false));
  } else {
    doctor.Measured(
        "storage_read_buffered_gbps", "storage read, buffered",
        Status::Unavailable("the model's pages cannot be dropped from the cache "
                            "here (" +
                            RedactSecrets(dropped.message()) + "); see the direct read"));
  }
  auto direct = MeasureParallelRead(storage, paths, threads, 8 * kMiB, true);
  doctor.Measured("storage_read_direct_gbps", "storage read, direct (O_DIRECT)", direct);
  (void)MeasureParallelRead(storage, paths, threads, 8 * kMiB, false);
  doctor.Measured("page_cache_read_gbps", "page-cache read",
                  MeasureParallelRead(storage, paths, threads, 8 * kMiB, false));
  if (fs == "nfs" || fs == "cifs" || fs == "smb" || fs == "smb2" || fs == "fuse" || fs == "9p") {
    doctor.Trap("the model is on a network or user-space file system (" + fs +
                "): cold loads run at the network's rate, and direct I/O may be refused; copy "
                "the model to local storage for the fastest loads");
  }
  if (fs == "tmpfs" || (!direct.ok() && direct.status().code() == Code::kUnavailable)) {
    doctor.Trap("direct I/O is refused on " + fs +
                " (tmpfs has no O_DIRECT): `--io direct` falls back to buffered reads, which is "
                "right there, since the file already lives in memory");
  }
}

// A model behind a URL: the time to its first byte, one stream and as many as a load's readers,
// each over at most its first 256 MiB or 1 GiB (a doctor does not download a whole model).
void MeasureRemoteSource(Doctor& doctor, Storage& storage, const std::vector<std::string>& paths,
                         const std::string& model, std::string* header) {
  const auto start = std::chrono::steady_clock::now();
  Result<double> first_byte = [&]() -> Result<double> {
    HOIST_ASSIGN_OR_RETURN(std::unique_ptr<File> file, storage.Open(paths[0], {}));
    unsigned char byte = 0;
    if (file->size() > 0) HOIST_RETURN_IF_ERROR(file->ReadExact(0, &byte, 1));
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }();
  char ttfb[64] = "not measured";
  if (first_byte.ok()) std::snprintf(ttfb, sizeof ttfb, "%.1f ms", *first_byte * 1e3);
  *header += "\nmodel: " + model + " over " + storage.description() + "; first byte after " + ttfb +
             " (open and one ranged GET)";
  doctor.Fact("source", storage.description());
  doctor.Fact("time_to_first_byte_s",
              first_byte.ok() ? nlohmann::json(*first_byte) : nlohmann::json(nullptr));
  const int threads = DefaultReaderThreads();
  doctor.Measured("source_one_stream_gbps", "source, one stream (4 MiB ranged GETs)",
                  MeasureParallelRead(storage, paths, 1, 4 * kMiB, false, 256 * kMiB));
  doctor.Measured("source_streams_gbps",
                  "source, " + std::to_string(threads) + " streams (a load's readers)",
                  MeasureParallelRead(storage, paths, threads, 4 * kMiB, false, kGiB));
}

// The build, the machine and its devices, and the backends that cannot run here.
std::string DescribeMachine(Doctor& doctor, CheckedDevice& dev) {
  const DeviceInfo info = dev.Info();
  doctor.Fact("hoist_version", Version());
  doctor.Fact("build_type", BuildType());
  doctor.Fact("gpu_backend", GpuBackend());
  doctor.Fact("cpus", CpuCount());
  doctor.Fact("memory_bytes", PhysicalMemoryBytes());
  doctor.Fact("device", info.name);
  doctor.Fact("device_description", info.description);
  for (const DeviceInfo& d : ListDevices()) doctor.Device(d);
  for (const DeviceBackend& backend : DeviceBackends()) {
    const std::string why = backend.unusable ? backend.unusable() : std::string();
    if (!why.empty()) doctor.Unusable(why);
  }
  if (!dev.fallback().empty()) doctor.Trap(dev.fallback());
  return BuildDescription() + "\nmachine: " + std::to_string(CpuCount()) + " CPUs, " +
         FormatBytes(PhysicalMemoryBytes()) + " memory (" + FormatBytes(AvailableMemoryBytes()) +
         " available); device " + info.name + ": " + info.description;
}

// The device's copy engine (host and sim copy with the CPU: smaller totals do); returns the
// pinned copy rates of 64 MiB and 1 MiB copies, which the chunk size's reason cites.
std::pair<Result<Throughput>, Result<Throughput>> MeasureCopies(Doctor& doctor, CheckedDevice& dev,
                                                                bool gpu, double stall_timeout_s) {
  const uint64_t total = gpu ? 4 * kGiB : 64 * kMiB;
  // Only memory the device pins is worth timing: the host's "pinned" buffers are plain
  // allocations, whose untouched pages cost nothing (it once printed 1394 GB/s).
  doctor.Measured("pinned_allocation_gbps", "pinned allocation (64 MiB buffers)",
                  dev.capabilities().needs_pinned_staging()
                      ? MeasurePinnedAllocation(dev, 64 * kMiB, 8)
                      : Result<Throughput>(Status::Unavailable(
                            dev.name() + " stages in ordinary memory: nothing is pinned")));
  Result<Throughput> h2d_large = MeasureHostToDevice(dev, 64 * kMiB, total, true, stall_timeout_s);
  Result<Throughput> h2d_small =
      MeasureHostToDevice(dev, 1 * kMiB, total / 4, true, stall_timeout_s);
  doctor.Measured("h2d_pinned_64mib_gbps", "host-to-device, pinned 64 MiB copies", h2d_large);
  doctor.Measured("h2d_pinned_1mib_gbps", "host-to-device, pinned 1 MiB copies", h2d_small);
  doctor.Measured("h2d_pageable_64mib_gbps", "host-to-device, pageable 64 MiB",
                  MeasureHostToDevice(dev, 64 * kMiB, total / 4, false, stall_timeout_s));
  doctor.Measured("d2h_pinned_64mib_gbps", "device-to-host, pinned 64 MiB copies",
                  MeasureDeviceToHost(dev, 64 * kMiB, total / 4, true));
  doctor.Measured("d2h_pageable_64mib_gbps", "device-to-host, pageable 64 MiB",
                  MeasureDeviceToHost(dev, 64 * kMiB, total / 4, false));
  return {std::move(h2d_large), std::move(h2d_small)};
}

// The traps of this machine's limits and backend.
void FindTraps(Doctor& doctor, const DeviceInfo& info, bool gpu, std::string* header) {
  const uint64_t staging = DefaultStagingBytes(DefaultReaderThreads(), kDefaultChunkBytes);
  const uint64_t memlock = MemlockLimitBytes();
  doctor.Fact("memlock_limit_bytes",
              memlock == UINT64_MAX ? nlohmann::json("unlimited") : nlohmann::json(memlock));
  *header += "\nmemlock limit: " +
             (memlock == UINT64_MAX ? std::string("unlimited") : FormatBytes(memlock));
  if (gpu && memlock != UINT64_MAX && memlock < staging) {
    doctor.Trap(
        "the memlock limit (" + FormatBytes(memlock) + ") is below the " + FormatBytes(staging) +
        " staging budget: "
        "pinned allocations may fail, and hoist then falls back to smaller buffers and at last "
        "to small pageable copies (slower); raise it with `ulimit -l unlimited` or limits.conf");
  }
  if (info.capabilities.pageable_copies_can_hang) {
    doctor.Trap(
        "ROCm: pageable or file-backed memory handed to hipMemcpy can stop the SDMA engine "
        "from signalling completion (the ~30 GiB mmap hang); hoist only ever copies from its "
        "pinned staging buffers, or, with no pinned memory, in pieces of at most 512 KiB");
  }
}

// The defaults a load takes here, each with its reason.
void ExplainSettings(Doctor& doctor, CheckedDevice& dev, bool gpu,
                     const std::pair<Result<Throughput>, Result<Throughput>>& h2d) {
  const int threads = DefaultReaderThreads();
  const uint64_t staging = DefaultStagingBytes(threads, kDefaultChunkBytes);
  doctor.Setting(
      "threads", threads, "threads", std::to_string(threads),
      "3/4 of the " + std::to_string(CpuCount()) +
          " CPUs, between 2 and 12: enough reads in "
          "flight to fill the page cache's and NVMe's parallelism, leaving cores for the copies");
  doctor.Setting("chunk_bytes", kDefaultChunkBytes, "chunk", FormatBytes(kDefaultChunkBytes),
                 ChunkReason(h2d.second, h2d.first));
  doctor.Setting("staging_bytes", staging, "staging", FormatBytes(staging),
                 "two pinned buffers per reader, one being read into while the other is copied; "
                 "4 allocated before streaming and the rest in the background; peak host "
                 "memory stays near it (more buffers fall out of the CPU's cache before the "
                 "copy engine reads them: docs/PERFORMANCE.md, \"Why the defaults\")");
  doctor.Setting(
      "copy_queues", dev.queues(), "copy queues", std::to_string(dev.queues()),
      gpu ? "copy streams, completion polled with events" : "copy workers of this backend");
  doctor.Setting("io", "buffered", "io", "buffered",
                 "page cache; `--io direct` for cold loads where the file system allows");
}

int RunDoctor(const DoctorFlags& f) {
  InstallStopSignalHandlers();
  Doctor doctor;
  auto device = OpenDevice(f.device);
  if (!device.ok()) {
    return ReportFailure(device.status());
  }
  CheckedDevice& dev = **device;
  const DeviceInfo info = dev.Info();
  const bool gpu = info.kind == DeviceKind::kGpu;
  std::string header = DescribeMachine(doctor, dev);
  // Storage, from the model's own files.
  if (!f.path.empty()) {
    auto dir = ReadModelDirectory(f.path);
    if (!dir.ok()) {
      return ReportFailure(dir.status());
    }
    std::vector<std::string> paths;
    for (const FileEntry& file : dir->files) paths.push_back(file.path);
    if (IsRemoteName(paths[0])) {
      MeasureRemoteSource(doctor, dir->source(), paths, RedactUrl(f.path), &header);
    } else {
      MeasureLocalStorage(doctor, dir->source(), paths, RedactUrl(f.path), &header);
    }
  } else {
    header += "\nmodel: none given (hoist doctor PATH also measures the storage that holds it)";
  }
  const auto h2d = MeasureCopies(doctor, dev, gpu, f.stall_timeout_s);
  FindTraps(doctor, info, gpu, &header);
  ExplainSettings(doctor, dev, gpu, h2d);
  // stdout holds one document: the table, or (--json) the JSON alone.
  if (f.json) {
    std::cout << doctor.json().dump(2) << "\n";
  } else {
    doctor.Print(header);
  }
  return kExitOk;
}

}  // namespace

Runner RegisterDoctor(CLI::App& app) {
  auto f = std::make_shared<DoctorFlags>();
  CLI::App* cmd = app.add_subcommand(
      "doctor",
      "Measure this machine's ceilings, show the settings hoist will use and flag known traps");
  cmd->add_option("PATH", f->path, "a model whose storage to measure (optional)");
  cmd->add_option("--device", f->device,
                  "auto, host, cuda:N, hip:N or sim[:options] (default auto)");
  cmd->add_flag("--json", f->json, "print the findings as one JSON object instead of the table");
  AddStallTimeoutFlag(cmd, f->stall_timeout_s);
  return [f] { return RunDoctor(*f); };
}

}  // namespace hoist::cli
