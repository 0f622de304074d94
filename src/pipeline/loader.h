// The staged load engine: reads a model's tensors into bounded pinned staging buffers on many
// threads and copies them to one or more devices with many copies in flight, never handing
// file-backed or large pageable memory to a DMA engine, watched by a watchdog and cancellable
// at every wait. The steps live in load_session.cpp (prepare, stream, tear down), reader.cpp
// (the hot loop), watchdog.cpp, tensor_checksums.cpp and verify.cpp.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "device/checked_device.h"
#include "format/tensor_directory.h"
#include "io/file.h"
#include "io/storage.h"
#include "plan/load_plan.h"

namespace hoist {

enum class IoMode : uint8_t {
  kBuffered,  // pread through the page cache
  kDirect,    // O_DIRECT / unbuffered: bypasses the page cache (cold loads)
};

struct LoadProgress {
  uint64_t copied_bytes = 0;  // bytes whose device copy has completed
  uint64_t read_bytes = 0;    // bytes read from storage
  uint64_t total_bytes = 0;   // bytes to read
  double elapsed_s = 0;       // since streaming began
};

inline constexpr double kDefaultStallTimeoutSeconds = 60;

struct LoadOptions {
  int threads = 0;             // reader threads; 0: chosen from the machine
  uint64_t chunk_bytes = 0;    // bytes per read; 0: kDefaultChunkBytes
  uint64_t staging_bytes = 0;  // the staging pool's budget; 0: DefaultStagingBytes
  double stall_timeout_s = kDefaultStallTimeoutSeconds;  // no progress this long: kStalled
  bool checksum = false;  // XXH3-64 of every tensor, over its staged bytes
  // Column slices whose rows are all cached copy their columns out of the page cache
  // (File::GatherCachedRows); false: their rows are read whole, and no file is mapped.
  bool gather_cached_rows = true;
  IoMode io = IoMode::kBuffered;
  std::vector<std::string> names;  // tensors to load; empty: all
  // Called on the loading thread about every 100 ms and once at the end; false cancels.
  std::function<bool(const LoadProgress&)> progress;
  // Set from any thread to cancel. SIGINT/SIGTERM also cancel once handlers are installed.
  const std::atomic<bool>* cancel = nullptr;
  // Destinations chosen by the caller (an engine's own buffers): the pointer on the tensor's
  // device for directory tensor `index`, which must hold tensor.nbytes bytes. Unset: hoist
  // allocates one block per device and owns it.
  std::function<Result<void*>(size_t index, const TensorEntry& tensor)> destination;
  // With `destination`: ask for each tensor's destination on a reader thread just before its
  // first bytes are copied (about in file order on each device) instead of for all of them
  // before streaming, so that a caller can hand out memory as a stream is consumed: once per
  // tensor, for several tensors at once from different threads. The call may
  // block until the caller has room: before it is made, every copy the asking reader started has
  // completed and been reported to tensor_loaded, so a caller that hands out destinations in
  // file order and waits only for reported tensors to be consumed cannot deadlock the load. Time
  // spent in it is not a stall. It must return soon after the load is cancelled. Zero-byte
  // tensors are never asked for.
  bool destinations_when_needed = false;
  // With destinations_when_needed: asked first, before the reader settles its copies in
  // flight, for a destination the caller can give at once; nullptr when it cannot without
  // waiting (the reader then settles them and calls `destination`, which may wait). Settling
  // drains the reader's queue of copies, so a caller that mostly has room at once keeps the
  // link busy with it. Unset: every destination is asked for after settling.
  std::function<Result<void*>(size_t index, const TensorEntry& tensor)> destination_at_once;
  // Called on a reader thread (the loading thread for zero-byte tensors) once every byte of
  // directory tensor `index` is on its device; a reported tensor stays landed even if the load
  // fails later. Keep it short: the reader waits for it.
  std::function<void(size_t index)> tensor_loaded;
};

struct PhaseSeconds {
  double open_parse = 0;   // filled by the caller that opened the model
  double device_open = 0;  // filled by the caller that opened the device (GPU context)
  double plan = 0;
  double allocate = 0;          // opening the files, device allocation and the staging pool
  double allocate_device = 0;   // of which the device allocation
  double allocate_staging = 0;  // of which the staging pool's first buffers
  double stream = 0;            // reads and copies
  double teardown = 0;          // joining threads, freeing staging
};

// Where the reader threads' time went, in seconds summed over the readers (thread-seconds):
// what bound the stream. The rest of `total` is hashing and bookkeeping.
struct ReaderSeconds {
  double read = 0;         // reading chunks, into staging or straight into tensors
  double copy_start = 0;   // starting copies (the device's enqueue)
  double copy_wait = 0;    // waiting for their copies to complete: the link's side
  double buffer_wait = 0;  // waiting for a free staging buffer of the pool
  // Waiting for the caller's destinations (LoadOptions::destinations_when_needed): a packed
  // load's scratch for the next coded tensor, a framework's allocation.
  double destination_wait = 0;
  // Settling the reader's copies in flight before it asks for a destination (so that the
  // caller, which may wait for landed tensors to make room, sees every one that could land).
  double destination_settle = 0;
  double total = 0;  // the readers' lifetimes
};

// A packed load decoded on its devices (pipeline/device_decode.h).
struct DecodeSeconds {
  size_t tensors = 0;  // decodes run
  // Summed over the decodes: from each one's launch until it was seen done (its queue's
  // earlier work included).
  double busy = 0;
  double after_stream = 0;  // from the end of streaming until the last decode was seen done
};

// One device's part of a load.
struct DeviceShare {
  std::string device;
  size_t tensors = 0;
  uint64_t tensor_bytes = 0;
  int threads = 0;      // its readers
  double stream_s = 0;  // from the start of streaming until its last chunk was on it
};

struct LoadReport {
  std::string device;                // the devices' names, joined by ", "
  std::vector<DeviceShare> devices;  // per device, in the order Load was given them
  uint64_t tensor_bytes = 0;
  uint64_t read_bytes = 0;
  // Of read_bytes, the rows of column slices whose columns alone were copied out of the page
  // cache (File::GatherCachedRows) rather than their rows read whole.
  uint64_t gathered_bytes = 0;
  // Of read_bytes, the chunks read straight into their tensors in host memory (no staging, no
  // copy: DeviceCapabilities::memory_is_host).
  uint64_t read_into_destination_bytes = 0;
  // Of tensor_bytes, a packed model's coded tensors copied as stored and decoded on their
  // device (pipeline/device_decode.h); read_bytes counts their stored bytes.
  uint64_t decoded_on_device_bytes = 0;
  size_t tensors = 0;
  size_t chunks = 0;
  int threads = 0;
  uint64_t chunk_bytes = 0;
  uint64_t staging_buffer_bytes = 0;
  size_t staging_buffers = 0;
  bool pinned_staging = true;
  IoMode io = IoMode::kBuffered;
  PhaseSeconds phases;
  ReaderSeconds readers;
  DecodeSeconds decode;
  double wall_s = 0;  // plan + allocate + stream + teardown
  uint64_t peak_rss_bytes = 0;
  std::vector<std::string> fallbacks;
  std::string source;            // where the bytes came from: "local file system", "HTTP", ...
  SourceCounters source_counts;  // the source's requests during the load (none for files)
  std::vector<std::string> warnings;
};

// Tensors on one or more devices. Destroying it frees the device memory hoist allocated (its
// blocks, one per device at most), never memory the caller supplied through
// LoadOptions::destination, and never a block a copy or read-back might still touch
// (LeaveAllocated). Its state is built by the pipeline (LoadSession, LoadRank, the reference
// loaders) through the calls below and read by everyone else. Thread safety: const calls from
// any thread; building calls from one.
class LoadedModel {
 public:
  // Room for `tensors` tensors, none loaded, on `devices`.
  LoadedModel(std::vector<std::shared_ptr<CheckedDevice>> devices, size_t tensors);
  LoadedModel(const LoadedModel&) = delete;
  LoadedModel& operator=(const LoadedModel&) = delete;
  ~LoadedModel();

  size_t size() const { return pointers_.size(); }
  // Pointer of tensor i on its device, or nullptr when it was not loaded.
  void* data(size_t i) const { return pointers_[i]; }
  bool loaded(size_t i) const { return loaded_[i]; }
  // The index, in devices(), of the device that holds tensor i.
  uint32_t device_index(size_t i) const { return placement_.empty() ? 0 : placement_[i]; }
  CheckedDevice& device_of(size_t i) const { return *devices_[device_index(i)]; }
  const std::vector<std::shared_ptr<CheckedDevice>>& devices() const { return devices_; }
  // How tensor i's rows lie in the file (width 0: contiguous): what verify compares.
  RowStride stride(size_t i) const { return strides_.empty() ? RowStride{} : strides_[i]; }
  // XXH3-64 per tensor when LoadOptions::checksum; empty otherwise.
  const std::vector<uint64_t>& checksums() const { return checksums_; }
  // Whether its memory is the caller's (LoadOptions::destination).
  bool external_destinations() const { return external_; }
  // Device d's block (what AdoptBlock gave it), or nullptr.
  void* block(size_t d) const { return d < blocks_.size() ? blocks_[d] : nullptr; }

  // The load's report; front ends add the phases they timed themselves (opening the model).
  LoadReport report;

  // Building, by the pipeline.
  // Tensor i lives at p on device `device` (an index into devices()) and has landed.
  void SetLoaded(size_t i, void* p, uint32_t device);
  void SetPlacement(std::vector<uint32_t> placement);  // per tensor; empty: all on device 0
  void SetStrides(std::vector<RowStride> strides);     // per tensor; empty: all contiguous
  void SetChecksums(std::vector<uint64_t> checksums);
  void SetExternalDestinations() { external_ = true; }
  // Device d's block, which hoist allocated: freed with the model.
  void AdoptBlock(size_t d, void* block);
  // A copy or read-back may still touch device d's memory: it is never freed.
  void LeaveAllocated(size_t d);

 private:
  std::vector<std::shared_ptr<CheckedDevice>> devices_;
  std::vector<void*> pointers_;
  std::vector<bool> loaded_;
  std::vector<uint32_t> placement_;
  std::vector<RowStride> strides_;
  std::vector<uint64_t> checksums_;
  std::vector<void*> blocks_;  // per device: hoist's block, owned when non-null
  bool external_ = false;
};

// Loads the selected tensors onto devices: where they go apart from how they are read.
// placement: per directory tensor, an index into devices; empty: every tensor to the first.
// read: tensors read by rows (strides: column slices, not with checksum) and tensors read once
// for several devices (read_groups: members that are one file range on devices that reach each
// other are each sent 1/N over their own host link and the rest over the peer link; not with
// checksum or destinations_when_needed), per directory tensor; LoadRegions sets them. Its
// forward_replicas and staging_domain are the session's to fill.
Result<std::unique_ptr<LoadedModel>> Load(
    const TensorDirectory& dir, const std::vector<std::shared_ptr<CheckedDevice>>& devices,
    const LoadOptions& options, const std::vector<uint32_t>& placement = {},
    const ReadSpec& read = {});
// Everything onto one device.
Result<std::unique_ptr<LoadedModel>> Load(const TensorDirectory& dir,
                                          const std::shared_ptr<CheckedDevice>& device,
                                          const LoadOptions& options);

// The directory a load of regions reads: its tensor i is region i, named
// "NAME rows [a, b) bytes [c, d)", starting at the file byte of its first row's first column.
// kInvalidArgument naming the region when one is not a region of its tensor.
Result<TensorDirectory> RegionDirectory(const TensorDirectory& dir,
                                        const std::vector<TensorRegion>& regions);

// Loads regions of tensors onto devices; the result's tensor i is region i, on
// devices[regions[i].device]. Regions of one tensor that cover the same rows (its columns cut
// among devices, or the whole tensor on each) are read once for all of them. Either every
// region has a destination or none has (hoist then allocates). options.names, destination
// and checksum must be unset.
Result<std::unique_ptr<LoadedModel>> LoadRegions(
    const TensorDirectory& dir, const std::vector<std::shared_ptr<CheckedDevice>>& devices,
    const std::vector<TensorRegion>& regions, const LoadOptions& options);
// All onto one device.
Result<std::unique_ptr<LoadedModel>> LoadRegions(const TensorDirectory& dir,
                                                 const std::shared_ptr<CheckedDevice>& device,
                                                 const std::vector<TensorRegion>& regions,
                                                 const LoadOptions& options);

// Rank mode's exchange: an in-place all-gather (ncclAllGather, MPI_Allgather,
// torch.distributed) that fills block (world * chunk_bytes bytes on this rank's device) with
// every rank's chunk r at r * chunk_bytes, this rank's own already in place. `start` is called
// on the loading thread, once per exchange: with more than one rank, a small check before the
// all-gather, the all-gather, a check after it, each on its own block. With `poll`, start only
// begins the exchange and poll, called on the loading thread every few milliseconds until it
// answers true, says when it has finished: the wait then keeps the stall timeout and ends on
// cancel, a stop signal or the progress callback. A wait that ends otherwise (stalled,
// cancelled, poll failed) leaves that exchange's block allocated, since the exchange may still
// write into it. Without poll, start returns once the exchange has finished (no deadline can
// hold).
struct AllGather {
  std::function<Status(void* block, uint64_t chunk_bytes)> start;
  std::function<Result<bool>()> poll;
};

// Rank `rank` of a job of `world` processes, one device each: loads this rank's parts of `cut`
// (the parts with device == rank of a split for `world` devices, or why this rank could not cut)
// onto device. Its slices are read; the tensors every rank holds whole are read 1/world by each
// rank into one flat block and all-gathered. Every rank, having failed or not, tells the others
// its verdict before the all-gather and after it: a model is returned only when every rank
// succeeded with the same layout, and otherwise every rank fails naming the rank that failed and
// why. *mine: this rank's parts, in cut order (device 0, no destination); the result's tensor i
// is mine[i], in one block hoist owns (verify it against RegionDirectory(dir, *mine)).
Result<std::unique_ptr<LoadedModel>> LoadRank(
    const TensorDirectory& dir, const std::shared_ptr<CheckedDevice>& device,
    const Result<std::vector<TensorRegion>>& cut, uint32_t rank, uint32_t world,
    const AllGather& all_gather, const LoadOptions& options, std::vector<TensorRegion>* mine);

struct Mismatch {
  std::string tensor;
  uint64_t tensor_offset = 0;  // first differing byte inside the tensor
  uint64_t file_offset = 0;
};

// Reads every loaded tensor back from the device and compares it with the file's bytes (for a
// tensor read by rows, model.strides says where its rows lie in the file).
// Returns the mismatches (at most max_reported, all tensors checked), or an error: kCancelled
// on SIGINT/SIGTERM, kFileChanged when a file is no longer the one the model was opened from,
// kStalled when no piece was read back for stall_timeout_s (naming the tensor and device).
// Both end it within a second or two: devices that can cut a read-back short do, and a
// read-back that cannot be stopped is left behind with its device's memory (the model's block
// is then never freed).
Result<std::vector<Mismatch>> Verify(const TensorDirectory& dir, LoadedModel& model, int threads,
                                     size_t max_reported,
                                     double stall_timeout_s = kDefaultStallTimeoutSeconds);

// The bounds every entry point's options are checked against before anything is opened.
inline constexpr int kMaxReaderThreads = 1024;
inline constexpr uint64_t kMinChunkBytes = 4096;  // a page: smaller chunks only multiply work
inline constexpr uint64_t kMaxChunkBytes = 1ull << 30;
inline constexpr double kMaxStallTimeoutSeconds = 1e7;
// The largest staging budget: half of this machine's memory (pinned memory cannot be paged
// out, so more would starve everything else).
uint64_t MaxStagingBytes();
// OK, or an invalid-argument error naming the option and its bounds.
Status CheckLoadOptions(const LoadOptions& options);
// kCancelled once a stop signal arrived or the caller's cancel flag is set, else OK: what every
// wait of a load (streaming, verify, the rank exchange) checks, alike.
Status StopOrCancel(const LoadOptions& options);

// Defaults chosen from the machine: for loads onto `devices` devices at once, each device's
// readers up to the one-device figure, as far as the machine's cores go.
int DefaultReaderThreads(int devices = 1);
// Chosen by the threads x chunk sweep on the H200 (docs/PERFORMANCE.md, "Why the defaults"):
// smaller chunks cost more requests per byte, larger ones leave the link idle between them.
inline constexpr uint64_t kDefaultChunkBytes = 4ull << 20;
// Two buffers per reader: one being read into while the other's copy runs.
uint64_t DefaultStagingBytes(int threads, uint64_t chunk_bytes);

}  // namespace hoist
