// The device interface: where weights go. Backends (host, sim, cuda/hip) are thin; the
// bounds, state and leak checks that every backend needs live in CheckedDevice
// (checked_device.h), which is what the pipeline talks to.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"

namespace hoist {

struct GpuExponentTensor;  // pack/exponent_decode_gpu.h

// What a device is, for the policies that differ by kind (the bench's settle pause after a
// large free, doctor's traps), so that none of them reads it off the device's name.
enum class DeviceKind : uint8_t {
  kHost,  // host memory, memcpy workers
  kSim,   // the simulated DMA engine (host memory behind a modelled link)
  kGpu,   // a CUDA or HIP device
};

// "host", "sim", "gpu".
const char* DeviceKindName(DeviceKind kind);

// Which pinned memory a device's copies read from. Devices of one load in the same domain share
// its staging buffers; kNone copies from any host memory.
enum class StagingDomain : uint8_t {
  kNone,
  kGpuPinned,  // portable pinned memory, which every GPU of the process reads
  kSimPinned,  // the sims' modelled pinned memory
};

// What a device can do, for the policies that differ by device (none reads a device's name
// or kind).
struct DeviceCapabilities {
  bool async_copies = false;  // copies run on an engine or threads while the caller goes on
  // Copies from pageable memory are slow or, on some engines, may hang: staging is pinned, from
  // this domain.
  StagingDomain staging_domain = StagingDomain::kNone;
  bool needs_pinned_staging() const { return staging_domain != StagingDomain::kNone; }
  // A pageable or file-backed copy can stop the copy engine from ever signalling completion
  // (ROCm's SDMA path past ~30 GiB): hoist never hands it one above kPageableCopyBytes.
  bool pageable_copies_can_hang = false;
  // Abandon() is cheap and always succeeds, so a stopped load need not wait for copies.
  bool can_abandon = false;
  // Pinned host memory stays allocated after a load, for the next (ReleaseCachedMemory).
  bool caches_pinned_memory = false;
  // Its memory is the host's own: readers read file bytes straight into a destination, with
  // no staging buffer and no copy.
  bool memory_is_host = false;
  std::vector<std::string> peers;  // devices this one reads and writes directly (NVLink, P2P)
  // DecodeExponentsAsync works: a packed model's coded tensors are copied as stored and
  // decoded on the device (pipeline/device_decode.h).
  bool decodes_exponents = false;
  // AllocateShareable, ExportShareable and ImportShareable work.
  bool shares_memory = false;
};

struct DeviceInfo {
  std::string name;  // "host", "sim", "cuda:0"
  DeviceKind kind = DeviceKind::kHost;
  std::string description;    // "NVIDIA H200", "simulated DMA engine at 5.00 GB/s"
  uint64_t total_memory = 0;  // bytes; 0 when unknown
  uint64_t free_memory = 0;   // bytes; 0 when unknown
  DeviceCapabilities capabilities;
};

// Memory exported for another process: a descriptor and the bytes behind it.
struct ExportedMemory {
  int fd = -1;
  uint64_t bytes = 0;
};

// A host-to-device copy in flight.
class CopyHandle {
 public:
  virtual ~CopyHandle() = default;
  // True once the copy has completed; an error if the device reported one. Never blocks.
  virtual Result<bool> Poll() = 0;
};

// Thread safety: every method may be called from any thread, concurrently.
class Device {
 public:
  Device() = default;
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;
  virtual ~Device() = default;

  virtual DeviceInfo Info() = 0;
  // Independent copy queues (CUDA streams); copies on one queue complete in order.
  virtual int queues() const = 0;

  virtual Result<void*> AllocateDevice(uint64_t bytes) = 0;
  virtual Status FreeDevice(void* ptr) = 0;
  // Page-locked host memory that the device's DMA engine can read directly.
  virtual Result<void*> AllocatePinned(uint64_t bytes) = 0;
  // Gives pinned memory back: freed, or kept for the next AllocatePinned where the backend
  // caches it (DeviceCapabilities::caches_pinned_memory; ReleaseCachedMemory frees it).
  // bytes: as allocated (CheckedDevice keeps the sizes, so backends need not).
  virtual Status ReturnPinned(void* ptr, uint64_t bytes) = 0;

  // Starts copying n bytes from host memory src to device memory dst on queue
  // (0 <= queue < queues()). src must stay untouched until the handle reports completion.
  virtual Result<std::unique_ptr<CopyHandle>> CopyToDeviceAsync(void* dst, const void* src,
                                                                uint64_t n, int queue) = 0;
  // The same for `rows` rows of `width` bytes each: row r from src + r * src_pitch (>= width) to
  // dst + r * width, packed (a column range of a row-major tensor staged whole).
  virtual Result<std::unique_ptr<CopyHandle>> CopyRowsToDeviceAsync(void* dst, const void* src,
                                                                    uint64_t width, uint64_t rows,
                                                                    uint64_t src_pitch,
                                                                    int queue) = 0;
  // Starts copying n bytes of this device's memory at src to dst in peer's memory, over the
  // link between them (NVLink, P2P), on this device's queue. Not ordered after other copies.
  // kUnavailable where this device cannot reach peer directly (see CanReachPeer).
  virtual Result<std::unique_ptr<CopyHandle>> CopyToPeerAsync(void* dst, Device& peer,
                                                              const void* src, uint64_t n,
                                                              int queue);
  // Whether CopyToPeerAsync to peer works and runs over a direct link.
  virtual bool CanReachPeer(const Device& peer) const;
  // Starts decoding a packed tensor whose parts lie in this device's memory into t.out there
  // (pack/exponent_decode_gpu.h), after nothing else: the caller starts it once the parts'
  // copies have completed. The parts must stay as they are until the handle reports
  // completion. kUnavailable where the device has no decoder (capabilities'
  // decodes_exponents).
  virtual Result<std::unique_ptr<CopyHandle>> DecodeExponentsAsync(const GpuExponentTensor& t);
  // Copies device memory to host memory and waits for it (used by verify).
  virtual Status CopyToHost(void* dst, const void* src, uint64_t n) = 0;

  // Memory other processes of this machine can map (hoist serve, api/held_model.h): allocated
  // as AllocateDevice allocates, freed by FreeDevice; its physical memory lives while any
  // process maps it or holds a descriptor of it. kUnavailable where the backend cannot share
  // (capabilities' shares_memory).
  virtual Result<void*> AllocateShareable(uint64_t bytes);
  // A new file descriptor for the shareable allocation at ptr (the caller's to close) and the
  // allocation's size as the importer maps it (the backend may have rounded it up).
  virtual Result<ExportedMemory> ExportShareable(void* ptr);
  // Maps `bytes` of memory another process exported as fd into this device's address space
  // (read-only where the backend can say so); freed by FreeDevice. fd stays the caller's.
  virtual Result<void*> ImportShareable(int fd, uint64_t bytes);
  // Copies n bytes of this device's memory from src to dst and waits for it.
  virtual Status CopyWithinDevice(void* dst, const void* src, uint64_t n);

  // Stops copies in flight. Returns true when no copy can touch memory any more, so freeing
  // it is safe; false when the device cannot promise that (a GPU whose engine hung).
  virtual bool Abandon() { return false; }
};

// Polls a copy until it completes (yielding between polls): for measurements and reference
// strategies that copy one buffer at a time. The load engine never waits on one copy.
// kStalled when it has not completed within timeout_s seconds, kCancelled on a stop signal;
// the copy may then still be running: its memory is not the caller's to free.
Status WaitForCopy(CopyHandle& copy, double timeout_s);

// Opens a device by name: "host", "sim" or "sim:key=value,...", "cuda:N", or "auto" (the
// first GPU when one is usable, else host). Returns the device wrapped in CheckedDevice.
Result<std::shared_ptr<class CheckedDevice>> OpenDevice(const std::string& spec);
// Several devices named in one string, joined by commas ("cuda:0,cuda:1"; a sim's own options
// keep their commas: "sim:latency_us=5,engines=2,host"), opened in order. An empty name or the
// same GPU twice is an invalid argument whose message starts with `what` (where the list came
// from: "--device").
Result<std::vector<std::shared_ptr<class CheckedDevice>>> OpenDevices(const std::string& specs,
                                                                      const std::string& what);

// Every device this build can open on this machine, GPUs first (each GPU by ordinal, then
// host, then sim), with its kind and capabilities; nothing is opened or allocated.
std::vector<DeviceInfo> ListDevices();

// GPU backends keep the pinned staging memory of a finished load for the next load in the
// process; this unpins and frees it. Thread safe; a no-op where nothing is kept.
void ReleaseCachedMemory();

}  // namespace hoist
