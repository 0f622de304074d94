// The simulated device: memory in host RAM behind a modelled DMA engine with the faults real
// ones have. Spec: "sim" or "sim:key=value,..." with keys
//   bandwidth=5GB/s   link rate of the engine      latency_us=N   per-copy latency
//   mem=SIZE          device memory capacity       pinned_limit=SIZE  pinned allocations beyond
//                                                                     this total fail
//   stall_after=SIZE  after this many bytes, copies never complete (the ROCm SDMA hang)
//   fail_copy_after=SIZE  after this many bytes, a copy reports an error
//   reject_pageable=1 a copy of 1 MiB or more from memory that is not pinned never completes
//   corrupt_at=N      flips the byte at this position of the copied stream (tests verify)
//   engines=N         DMA engines working in parallel (default 1)
//   readback_bandwidth=RATE  device-to-host rate (verify's read-back); default: unlimited
//   host_bandwidth=RATE  a host-side limit that every sim in the process given the same rate
//                     shares (the host's memory or root complex feeding several GPU links)
//   decode=0          decodes no packed tensors (a GPU without the decoder): they are decoded
//                     on the host as they are read. decode=1 (default): copied as stored and
//                     decoded by the CPU decoder as the device's (DecodeExponentsAsync)
//   hang_decode=1     decodes never complete (a hung kernel)
//   peer_bandwidth=RATE  rate of copies to another sim (the NVLink between GPUs); default
//                     300GB/s. peers=0: it reaches no other sim directly
// Sizes take KiB, MiB, GiB, KB, MB, GB.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "device/device.h"

namespace hoist {

struct SimOptions {
  double bandwidth = 20e9;  // bytes per second
  uint64_t latency_us = 2;
  uint64_t mem = UINT64_MAX;
  uint64_t pinned_limit = UINT64_MAX;
  uint64_t stall_after = UINT64_MAX;
  uint64_t fail_copy_after = UINT64_MAX;
  bool reject_pageable = false;
  uint64_t corrupt_at = UINT64_MAX;
  int engines = 1;
  double readback_bandwidth = 0;  // bytes per second; 0: unlimited
  double host_bandwidth = 0;      // bytes per second, shared; 0: unlimited
  double peer_bandwidth = 300e9;  // bytes per second, to another sim
  bool peers = true;              // copies to other sims directly
  bool abandon = true;            // Abandon() stops its copies (false: a GPU whose engine hung)
  bool decode = true;             // decodes packed tensors itself
  bool hang_decode = false;
  // Its number, when several sims stand for several GPUs that must be told apart by name
  // ("sim:1", as "cuda:1"; a bare number among the options); -1: the one named "sim".
  int id = -1;
};

inline constexpr uint64_t kSimPageableLimit = 1 << 20;

// Parses the part after "sim:" (may be empty).
Result<SimOptions> ParseSimOptions(const std::string& text);
Result<std::unique_ptr<Device>> MakeSimDevice(const SimOptions& options);
// What MakeSimDevice(options) would open, without opening it.
DeviceInfo DescribeSimDevice(const SimOptions& options);

}  // namespace hoist
