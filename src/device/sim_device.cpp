#include "device/sim_device.h"
#include <algorithm>

#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include "base/units.h"
#include "device/copy_engine.h"
#include "device/host_memory.h"
#include "pack/exponent_decode_gpu.h"

namespace hoist {
namespace {

using Clock = std::chrono::steady_clock;

// The host side that sims given the same host_bandwidth share: when it is next free, by rate.
std::mutex& HostLinksMutex() {
  static std::mutex mutex;
  return mutex;
}
std::map<double, Clock::time_point>& HostLinks() {
  static std::map<double, Clock::time_point> links;
  return links;
}

// Pinned memory from any sim counts as pinned for every sim, as portable pinned memory does for
// every GPU (a staging buffer of one device's readers may feed another device's copies). Never
// destroyed: a reader left behind by a stuck read may give its staging back while the process
// exits.
std::mutex& PinnedMutex() {
  static auto* mutex = new std::mutex;
  return *mutex;
}
std::map<uintptr_t, uint64_t>& Pinned() {
  static auto* pinned = new std::map<uintptr_t, uint64_t>;
  return *pinned;
}

DeviceInfo SimDeviceInfo(const SimOptions& options) {
  DeviceInfo info{options.id < 0 ? std::string("sim") : "sim:" + std::to_string(options.id),
                  DeviceKind::kSim,
                  "simulated DMA engine at " + FormatRate(options.bandwidth) +
                      (options.host_bandwidth > 0
                           ? ", sharing a host side of " + FormatRate(options.host_bandwidth)
                           : ""),
                  options.mem == UINT64_MAX ? PhysicalMemoryBytes() : options.mem,
                  options.mem == UINT64_MAX ? AvailableMemoryBytes() : options.mem,
                  {}};
  info.capabilities.async_copies = true;
  info.capabilities.staging_domain = StagingDomain::kSimPinned;  // it models a DMA engine
  info.capabilities.pageable_copies_can_hang = options.reject_pageable;
  info.capabilities.can_abandon = options.abandon;
  info.capabilities.decodes_exponents = options.decode;
  info.capabilities.shares_memory = HostMemoryCanBeShared();
  return info;
}

class SimDevice final : public Device {
 public:
  explicit SimDevice(const SimOptions& o) : options_(o) {}
  Status Start() {
    HOIST_RETURN_IF_ERROR(engine_.Start(options_.engines));
    return options_.decode ? decoder_.Start(1) : Status::Ok();
  }

  DeviceInfo Info() override {
    DeviceInfo info = SimDeviceInfo(options_);
    if (options_.mem != UINT64_MAX) {
      std::lock_guard<std::mutex> lock(mutex_);
      info.free_memory = options_.mem - device_bytes_;
    }
    return info;
  }
  int queues() const override { return 4; }

  Result<void*> AllocateDevice(uint64_t bytes) override {
    return AllocateCounted(bytes, [](uint64_t n) { return AllocateHostMemory(n, "sim"); });
  }
  // The sim's device memory is host memory: shared as the host's is, at no modelled cost.
  Result<void*> AllocateShareable(uint64_t bytes) override {
    return AllocateCounted(bytes, [](uint64_t n) { return AllocateSharedHostMemory(n, "sim"); });
  }
  Result<ExportedMemory> ExportShareable(void* ptr) override { return ExportSharedHostMemory(ptr); }
  Result<void*> ImportShareable(int fd, uint64_t bytes) override {
    return MapSharedHostMemory(fd, bytes, "sim");
  }
  Status CopyWithinDevice(void* dst, const void* src, uint64_t n) override {
    std::memcpy(dst, src, n);
    return Status::Ok();
  }

  // Counts bytes against the modelled memory (mem=) before allocating them with `allocate`.
  template <typename Allocate>
  Result<void*> AllocateCounted(uint64_t bytes, Allocate allocate) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (options_.mem != UINT64_MAX && device_bytes_ + bytes > options_.mem) {
        return Status::DeviceError("sim: out of device memory: " + std::to_string(bytes) +
                                   " bytes asked, " + std::to_string(options_.mem - device_bytes_) +
                                   " free");
      }
      device_bytes_ += bytes;
    }
    auto p = allocate(bytes);
    if (!p.ok()) {
      std::lock_guard<std::mutex> lock(mutex_);
      device_bytes_ -= bytes;
      return p.status();
    }
    std::lock_guard<std::mutex> lock(mutex_);
    device_sizes_[p.value()] = bytes;
    return p.value();
  }

  Status FreeDevice(void* ptr) override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = device_sizes_.find(ptr);  // none for memory mapped from another process
      if (it != device_sizes_.end()) {
        device_bytes_ -= it->second;
        device_sizes_.erase(it);
      }
    }
    FreeHostMemory(ptr);
    return Status::Ok();
  }

  Result<void*> AllocatePinned(uint64_t bytes) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (pinned_bytes_ + bytes > options_.pinned_limit) {
      return Status::DeviceError("sim: pinned allocation of " + std::to_string(bytes) +
                                 " bytes refused (pinned_limit)");
    }
    HOIST_ASSIGN_OR_RETURN(void* p, AllocateHostMemory(bytes, "sim"));
    {
      std::lock_guard<std::mutex> pinned_lock(PinnedMutex());
      Pinned()[reinterpret_cast<uintptr_t>(p)] = bytes;
    }
    pinned_bytes_ += bytes;
    return p;
  }

  Status ReturnPinned(void* ptr, uint64_t bytes) override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      pinned_bytes_ -= bytes;
    }
    {
      std::lock_guard<std::mutex> pinned_lock(PinnedMutex());
      Pinned().erase(reinterpret_cast<uintptr_t>(ptr));  // what reject_pageable checks against
    }
    FreeHostMemory(ptr);
    return Status::Ok();
  }

  Result<std::unique_ptr<CopyHandle>> CopyToDeviceAsync(void* dst, const void* src, uint64_t n,
                                                        int /*queue*/) override {
    const bool pinned = IsPinned(src, n);
    return engine_.Submit(
        [this, dst, src, n, pinned]() -> JobResult { return Transfer(dst, src, n, 1, n, pinned); });
  }

  Result<std::unique_ptr<CopyHandle>> CopyRowsToDeviceAsync(void* dst, const void* src,
                                                            uint64_t width, uint64_t rows,
                                                            uint64_t src_pitch,
                                                            int /*queue*/) override {
    const bool pinned = IsPinned(src, (rows - 1) * src_pitch + width);
    return engine_.Submit([this, dst, src, width, rows, src_pitch, pinned]() -> JobResult {
      return Transfer(dst, src, width, rows, src_pitch, pinned);
    });
  }

  bool CanReachPeer(const Device& peer) const override {
    const auto* other = dynamic_cast<const SimDevice*>(&peer);
    return other != nullptr && other != this && options_.peers && other->options_.peers;
  }

  Result<std::unique_ptr<CopyHandle>> CopyToPeerAsync(void* dst, Device& peer, const void* src,
                                                      uint64_t n, int /*queue*/) override {
    if (!CanReachPeer(peer)) return Device::CopyToPeerAsync(dst, peer, src, n, 0);
    return engine_.Submit([this, dst, src, n]() -> JobResult {
      Clock::time_point done;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        const Clock::time_point start = std::max(Clock::now(), peer_link_free_);
        peer_link_free_ = start + std::chrono::nanoseconds(static_cast<int64_t>(
                                      static_cast<double>(n) / options_.peer_bandwidth * 1e9));
        done = peer_link_free_;
      }
      std::memcpy(dst, src, n);
      engine_.WaitUntil(done);
      return {};
    });
  }

  // The GPU kernel's own steps, run on the host (pack/exponent_decode_block.h), on the sim's
  // decoder thread: the suite checks what the GPU checks, and reports as it reports.
  Result<std::unique_ptr<CopyHandle>> DecodeExponentsAsync(const GpuExponentTensor& t) override {
    if (!options_.decode) return Device::DecodeExponentsAsync(t);
    return decoder_.Submit([t, hang = options_.hang_decode]() -> JobResult {
      if (hang) return {JobOutcome::kHang, {}};
      RunExponentDecodeOnHost(t);
      return {};
    });
  }

  Status CopyToHost(void* dst, const void* src, uint64_t n) override {
    const Clock::time_point start = Clock::now();
    std::memcpy(dst, src, n);
    if (options_.readback_bandwidth > 0) {  // the modelled time; an abandon cuts it short
      engine_.WaitUntil(start + std::chrono::nanoseconds(static_cast<int64_t>(
                                    static_cast<double>(n) / options_.readback_bandwidth * 1e9)));
    }
    return Status::Ok();
  }

  bool Abandon() override {
    if (!options_.abandon) return false;  // as a GPU whose copy engine hung
    engine_.Abandon();
    decoder_.Abandon();
    return true;
  }

 private:
  static bool IsPinned(const void* src, uint64_t n) {
    const auto p = reinterpret_cast<uintptr_t>(src);
    std::lock_guard<std::mutex> lock(PinnedMutex());
    auto it = Pinned().upper_bound(p);
    if (it == Pinned().begin()) return false;
    --it;
    return p >= it->first && p + n <= it->first + it->second;
  }

  // rows rows of width bytes, src_pitch apart in src, packed in dst; the link carries
  // n = width * rows bytes.
  JobResult Transfer(void* dst, const void* src, uint64_t width, uint64_t rows, uint64_t src_pitch,
                     bool pinned) {
    const uint64_t n = width * rows;
    uint64_t before = 0;
    Clock::time_point done;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      before = copied_;
      if (before + n > options_.stall_after) return {JobOutcome::kHang, {}};
      if (options_.reject_pageable && !pinned && n >= kSimPageableLimit) {
        return {JobOutcome::kHang, {}};
      }
      if (before + n > options_.fail_copy_after) {
        return {JobOutcome::kFailed,
                Status::DeviceError("sim: copy of " + std::to_string(n) + " bytes failed after " +
                                    std::to_string(before) + " bytes (fail_copy_after)")};
      }
      copied_ += n;
      const auto duration = std::chrono::microseconds(options_.latency_us) +
                            std::chrono::nanoseconds(static_cast<int64_t>(
                                static_cast<double>(n) / options_.bandwidth * 1e9));
      Clock::time_point start = std::max(Clock::now(), link_free_);
      if (options_.host_bandwidth > 0) {
        // The bytes cross the shared host side too, at its rate, one copy after another.
        std::lock_guard<std::mutex> host_lock(HostLinksMutex());
        Clock::time_point& host_free = HostLinks()[options_.host_bandwidth];
        start = std::max(start, host_free);
        host_free = start + std::chrono::nanoseconds(static_cast<int64_t>(
                                static_cast<double>(n) / options_.host_bandwidth * 1e9));
      }
      link_free_ = start + std::chrono::duration_cast<Clock::duration>(duration);
      done = link_free_;
    }
    for (uint64_t r = 0; r < rows; ++r) {
      std::memcpy(static_cast<unsigned char*>(dst) + r * width,
                  static_cast<const unsigned char*>(src) + r * src_pitch, width);
    }
    if (options_.corrupt_at >= before && options_.corrupt_at < before + n) {
      static_cast<unsigned char*>(dst)[options_.corrupt_at - before] ^= 0xFF;
    }
    engine_.WaitUntil(done);  // the bytes have moved: an abandon may cut the modelled time short
    return {};
  }

  SimOptions options_;
  std::mutex mutex_;
  std::map<void*, uint64_t> device_sizes_;
  uint64_t pinned_bytes_ = 0;
  uint64_t device_bytes_ = 0;
  uint64_t copied_ = 0;
  Clock::time_point link_free_{};
  Clock::time_point peer_link_free_{};
  CopyEngine engine_;   // last: its threads stop before the state above goes away
  CopyEngine decoder_;  // the device's decoder, apart from its DMA engine
};

}  // namespace

namespace {

// One sim option: how its value is read into SimOptions.
using SimOptionSetter = Status (*)(SimOptions& o, const std::string& key, const std::string& value);

template <double SimOptions::*Field>
Status SetRate(SimOptions& o, const std::string& /*key*/, const std::string& value) {
  HOIST_ASSIGN_OR_RETURN(o.*Field, ParseByteRate(value));
  return Status::Ok();
}

template <uint64_t SimOptions::*Field>
Status SetSize(SimOptions& o, const std::string& /*key*/, const std::string& value) {
  HOIST_ASSIGN_OR_RETURN(o.*Field, ParseByteSize(value));
  return Status::Ok();
}

template <bool SimOptions::*Field>
Status SetFlag(SimOptions& o, const std::string& key, const std::string& value) {
  if (value != "0" && value != "1")
    return Status::InvalidArgument("sim option " + key + " takes 0 or 1");
  o.*Field = value == "1";
  return Status::Ok();
}

Status SetLatency(SimOptions& o, const std::string& key, const std::string& value) {
  HOIST_RETURN_IF_ERROR((SetSize<&SimOptions::latency_us>(o, key, value)));
  // A million seconds: far past any stall timeout, still exact in 64-bit nanoseconds.
  if (o.latency_us > 1'000'000'000'000) {
    return Status::InvalidArgument("sim option latency_us takes at most 1000000000000");
  }
  return Status::Ok();
}

Status SetEngines(SimOptions& o, const std::string& /*key*/, const std::string& value) {
  HOIST_ASSIGN_OR_RETURN(const uint64_t n, ParseByteSize(value));
  if (n < 1 || n > 64) return Status::InvalidArgument("sim option engines takes 1 to 64");
  o.engines = static_cast<int>(n);
  return Status::Ok();
}

struct SimOptionRow {
  const char* key;
  SimOptionSetter set;
};

constexpr SimOptionRow kSimOptions[] = {
    {"bandwidth", SetRate<&SimOptions::bandwidth>},
    {"host_bandwidth", SetRate<&SimOptions::host_bandwidth>},
    {"peer_bandwidth", SetRate<&SimOptions::peer_bandwidth>},
    {"readback_bandwidth", SetRate<&SimOptions::readback_bandwidth>},
    {"peers", SetFlag<&SimOptions::peers>},
    {"abandon", SetFlag<&SimOptions::abandon>},
    {"decode", SetFlag<&SimOptions::decode>},
    {"hang_decode", SetFlag<&SimOptions::hang_decode>},
    {"reject_pageable", SetFlag<&SimOptions::reject_pageable>},
    {"latency_us", SetLatency},
    {"mem", SetSize<&SimOptions::mem>},
    {"pinned_limit", SetSize<&SimOptions::pinned_limit>},
    {"stall_after", SetSize<&SimOptions::stall_after>},
    {"fail_copy_after", SetSize<&SimOptions::fail_copy_after>},
    {"corrupt_at", SetSize<&SimOptions::corrupt_at>},
    {"engines", SetEngines},
};

Status SetSimOption(SimOptions& o, const std::string& item) {
  const size_t eq = item.find('=');
  if (eq == std::string::npos) {
    return Status::InvalidArgument("sim option '" + item + "' has no '=value'");
  }
  const std::string key = item.substr(0, eq);
  for (const SimOptionRow& row : kSimOptions) {
    if (key == row.key) return row.set(o, key, item.substr(eq + 1));
  }
  return Status::InvalidArgument("unknown sim option '" + key + "'");
}

}  // namespace

Result<SimOptions> ParseSimOptions(const std::string& text) {
  SimOptions o;
  size_t start = 0;
  while (start < text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    const std::string item = text.substr(start, comma - start);
    start = comma + 1;
    if (!item.empty() && item.size() <= 4 &&
        std::all_of(item.begin(), item.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      o.id = std::stoi(item);  // "sim:1": the second of several sims, named so
      continue;
    }
    if (!item.empty()) HOIST_RETURN_IF_ERROR(SetSimOption(o, item));
  }
  return o;
}

DeviceInfo DescribeSimDevice(const SimOptions& options) { return SimDeviceInfo(options); }

Result<std::unique_ptr<Device>> MakeSimDevice(const SimOptions& options) {
  auto device = std::make_unique<SimDevice>(options);
  HOIST_RETURN_IF_ERROR(device->Start());
  return std::unique_ptr<Device>(std::move(device));
}

}  // namespace hoist
