// Opening a device by name through the backend table (device/backends.h).
#include <algorithm>
#include <cctype>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "base/nearest_name.h"
#include "device/backends.h"
#include "device/checked_device.h"
#include "device/device.h"
#include "device/sim_device.h"

namespace hoist {

Result<std::unique_ptr<Device>> MakeHostDevice(int workers);
DeviceInfo HostDeviceInfo(int workers);
#if defined(HOIST_HAVE_GPU)
Result<std::unique_ptr<Device>> MakeGpuDevice(int ordinal, int streams);
DeviceInfo DescribeGpu(int ordinal);
int GpuDeviceCount();
std::string GpuUnusableReason();
void ReleaseCachedGpuMemory();
#endif

namespace {

#if defined(HOIST_HAVE_GPU)
// One per reader thread up to 16: a reader's copies never queue behind another reader's.
constexpr int kGpuStreams = 16;
#if defined(HOIST_GPU_HIP)
constexpr const char* kGpuPrefix = "hip";
#else
constexpr const char* kGpuPrefix = "cuda";
#endif
#endif

int HostWorkers() {
  return static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 2u, 8u));
}

// "cuda:N", "hip:N" or the vendor-neutral "gpu:N": the GPU backend this build has.
Result<std::unique_ptr<Device>> OpenGpu(const std::string& prefix, const std::string& rest) {
  const std::string spec = rest.empty() ? prefix : prefix + ":" + rest;
#if defined(HOIST_HAVE_GPU)
  if (prefix != "gpu" && prefix != kGpuPrefix) {
    return Status::Unavailable(spec + ": this build has the " + kGpuPrefix + " backend, not " +
                               prefix);
  }
  int ordinal = 0;
  if (!rest.empty()) {
    try {
      size_t used = 0;
      ordinal = std::stoi(rest, &used);
      if (used != rest.size()) throw std::invalid_argument("trailing");
    } catch (...) {
      return Status::InvalidArgument("bad device '" + spec + "': expected " + prefix + ":N");
    }
  }
  return MakeGpuDevice(ordinal, kGpuStreams);
#else
  return Status::Unavailable(spec + ": this build of hoist has no " + prefix +
                             " backend (rebuild with -DHOIST_CUDA=ON or -DHOIST_HIP=ON)");
#endif
}

std::vector<DeviceInfo> ListGpus() {
  std::vector<DeviceInfo> devices;
#if defined(HOIST_HAVE_GPU)
  const int gpus = GpuDeviceCount();
  devices.reserve(static_cast<size_t>(std::max(gpus, 0)));
  for (int ordinal = 0; ordinal < gpus; ++ordinal) devices.push_back(DescribeGpu(ordinal));
#endif
  return devices;
}

// The built-in kinds, GPUs first (what "auto" prefers).
std::vector<DeviceBackend> BuiltInBackends() {
  std::vector<DeviceBackend> rows;
  rows.push_back({{"cuda", "hip", "gpu"},
                  OpenGpu,
                  ListGpus,
                  [] {
#if defined(HOIST_HAVE_GPU)
                    if (GpuDeviceCount() > 0) return std::string(kGpuPrefix) + ":0";
#endif
                    return std::string();
                  },
                  [] {
#if defined(HOIST_HAVE_GPU)
                    return GpuUnusableReason();
#else
                    return std::string(
                        "gpu: this build has no GPU backend (rebuild with -DHOIST_CUDA=ON or "
                        "-DHOIST_HIP=ON)");
#endif
                  }});
  rows.push_back({{"host"},
                  [](const std::string&, const std::string& rest) {
                    if (!rest.empty()) {
                      return Result<std::unique_ptr<Device>>(
                          Status::InvalidArgument("bad device 'host:" + rest +
                                                  "': host takes no "
                                                  "options"));
                    }
                    return MakeHostDevice(HostWorkers());
                  },
                  [] { return std::vector<DeviceInfo>{HostDeviceInfo(HostWorkers())}; },
                  [] { return std::string(); }});
  rows.push_back(
      {{"sim"},
       [](const std::string&, const std::string& rest) -> Result<std::unique_ptr<Device>> {
         HOIST_ASSIGN_OR_RETURN(SimOptions options, ParseSimOptions(rest));
         return MakeSimDevice(options);
       },
       [] { return std::vector<DeviceInfo>{DescribeSimDevice(SimOptions{})}; },
       [] { return std::string(); }});
  return rows;
}

std::mutex g_backends_mutex;
std::vector<DeviceBackend>& RegisteredBackends() {
  static std::vector<DeviceBackend> rows;
  return rows;
}

Result<std::unique_ptr<Device>> OpenBackend(const std::string& spec) {
  const size_t colon = spec.find(':');
  const std::string prefix = spec.substr(0, colon);
  const std::string rest = colon == std::string::npos ? std::string() : spec.substr(colon + 1);
  std::vector<std::string> known = {"auto", "cpu"};
  for (const DeviceBackend& backend : DeviceBackends()) {
    for (const std::string& p : backend.prefixes) {
      if (p == prefix) return backend.open(prefix, rest);
      known.push_back(p);
    }
  }
  std::string lower = prefix;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  const std::string near = NearestName(lower, known);
  return Status::InvalidArgument(
      "unknown device '" + spec +
      "': expected auto, host (or cpu), sim[:options], gpu[:N] or cuda[:N]" +
      (near.empty()
           ? ""
           : "; did you mean '" + near + (colon == std::string::npos ? "" : ":" + rest) + "'?"));
}

// The names torch, transformers and accelerate users write, as hoist's: "cpu" is the host,
// and a GPU kind without an index ("cuda") its first device.
std::string CanonicalDeviceName(const std::string& spec) {
  if (spec == "cpu") return "host";
  if (spec == "cuda" || spec == "hip" || spec == "gpu") return spec + ":0";
  return spec;
}

}  // namespace

void RegisterDeviceBackend(DeviceBackend backend) {
  std::lock_guard<std::mutex> lock(g_backends_mutex);
  RegisteredBackends().push_back(std::move(backend));
}

std::vector<DeviceBackend> DeviceBackends() {
  std::vector<DeviceBackend> rows = BuiltInBackends();
  std::lock_guard<std::mutex> lock(g_backends_mutex);
  rows.insert(rows.end(), RegisteredBackends().begin(), RegisteredBackends().end());
  return rows;
}

Result<std::shared_ptr<CheckedDevice>> OpenDevice(const std::string& spec_as_given) {
  const std::string spec = CanonicalDeviceName(spec_as_given);
  std::string chosen = spec;
  std::string fallback;
  if (spec == "auto") {
    chosen = "host";
    std::vector<std::string> reasons;
    for (const DeviceBackend& backend : DeviceBackends()) {
      const std::string preferred = backend.preferred ? backend.preferred() : std::string();
      if (!preferred.empty()) {
        chosen = preferred;
        break;
      }
      const std::string why = backend.unusable ? backend.unusable() : std::string();
      if (!why.empty()) reasons.push_back(why);
    }
    if (chosen == "host") {
      fallback = "--device auto found no usable GPU; loading to host memory";
      for (const std::string& why : reasons) fallback += (&why == &reasons[0] ? ": " : "; ") + why;
    }
  }
  HOIST_ASSIGN_OR_RETURN(std::unique_ptr<Device> backend, OpenBackend(chosen));
  auto device = std::make_shared<CheckedDevice>(std::move(backend));
  device->set_fallback(std::move(fallback));
  return device;
}

Result<std::vector<std::shared_ptr<CheckedDevice>>> OpenDevices(const std::string& specs,
                                                                const std::string& what) {
  std::vector<std::string> pieces;
  for (size_t start = 0;;) {
    const size_t comma = specs.find(',', start);
    pieces.push_back(specs.substr(start, comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  // A sim's options hold commas too ("sim:latency_us=5,engines=2"): a piece with '=' and no
  // ':' continues the sim before it.
  std::vector<std::string> names;
  for (const std::string& s : pieces) {
    if (!names.empty() && s.find('=') != std::string::npos && s.find(':') == std::string::npos &&
        names.back().rfind("sim:", 0) == 0) {
      names.back() += "," + s;
    } else {
      names.push_back(s);
    }
  }
  std::vector<std::shared_ptr<CheckedDevice>> devices;
  std::set<std::string> gpus;
  for (const std::string& name : names) {
    if (name.empty()) return Status::InvalidArgument(what + " names an empty device");
    HOIST_ASSIGN_OR_RETURN(auto device, OpenDevice(name));
    if (device->kind() == DeviceKind::kGpu && !gpus.insert(device->name()).second) {
      return Status::InvalidArgument(what + " names " + device->name() + " twice");
    }
    devices.push_back(std::move(device));
  }
  return devices;
}

Result<std::unique_ptr<CopyHandle>> Device::CopyToPeerAsync(void* /*dst*/, Device& /*peer*/,
                                                            const void* /*src*/, uint64_t /*n*/,
                                                            int /*queue*/) {
  return Status::Unavailable(Info().name + " copies to no peer device directly");
}

bool Device::CanReachPeer(const Device& /*peer*/) const { return false; }

Result<std::unique_ptr<CopyHandle>> Device::DecodeExponentsAsync(const GpuExponentTensor& /*t*/) {
  return Status::Unavailable(Info().name + " has no decoder of packed tensors");
}

Result<void*> Device::AllocateShareable(uint64_t /*bytes*/) {
  return Status::Unavailable(Info().name + " cannot share its memory with other processes");
}

Result<ExportedMemory> Device::ExportShareable(void* /*ptr*/) {
  return Status::Unavailable(Info().name + " cannot share its memory with other processes");
}

Result<void*> Device::ImportShareable(int /*fd*/, uint64_t /*bytes*/) {
  return Status::Unavailable(Info().name + " cannot map memory of other processes");
}

Status Device::CopyWithinDevice(void* /*dst*/, const void* /*src*/, uint64_t /*n*/) {
  return Status::Unavailable(Info().name + " has no copy within its memory");
}

const char* DeviceKindName(DeviceKind kind) {
  switch (kind) {
    case DeviceKind::kHost:
      return "host";
    case DeviceKind::kSim:
      return "sim";
    case DeviceKind::kGpu:
      return "gpu";
  }
  return "unknown";
}

std::vector<DeviceInfo> ListDevices() {
  std::vector<DeviceInfo> devices;
  for (const DeviceBackend& backend : DeviceBackends()) {
    if (!backend.list) continue;
    for (DeviceInfo& info : backend.list()) devices.push_back(std::move(info));
  }
  return devices;
}

void ReleaseCachedMemory() {
#if defined(HOIST_HAVE_GPU)
  ReleaseCachedGpuMemory();
#endif
}

}  // namespace hoist
