#include "pipeline/device_decode.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "base/stall.h"
#include "base/units.h"
#include "format/packed_layout.h"
#include "pack/exponent_decode_gpu.h"
#include "pipeline/staging_pool.h"

namespace hoist {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint64_t kScratchAlign = 256;

// A reader that finds the scratch ring full waits this long for a decode to give room back,
// then takes scratch of its own: the ring never holds up a load whose readers all wait.
constexpr auto kRingWait = std::chrono::milliseconds(500);
constexpr auto kDecodePoll = std::chrono::microseconds(100);

// The file range a coded tensor streams: its coded stream, then its kept bytes.
struct StreamedParts {
  uint64_t begin = 0;
  uint64_t bytes = 0;
  uint64_t rest_offset = 0;  // where the kept bytes start, from `begin`
};

// As hoist pack writes them: the kept bytes right after the coded stream (the next 64-byte
// boundary), both 4-byte aligned for the kernel's word reads.
std::optional<StreamedParts> PartsOf(const PackedTensor& p) {
  if (!p.coded || p.coded_begin % 4 != 0 || p.rest_begin % 4 != 0 || p.rest_begin < p.coded_end ||
      p.rest_begin - p.coded_end >= 64) {
    return std::nullopt;
  }
  return StreamedParts{p.coded_begin, p.rest_end - p.coded_begin, p.rest_begin - p.coded_begin};
}

// One device memory range cut into ranges handed out and given back in any order, first fit.
// Thread safe.
class ScratchRing {
 public:
  ScratchRing(unsigned char* base, uint64_t bytes) : base_(base), bytes_(bytes) {}

  // n bytes, waiting up to `wait` for room; nullptr when none came (or n never fits, or stop).
  unsigned char* Take(uint64_t n, std::chrono::milliseconds wait, const std::atomic<bool>& stop) {
    if (n > bytes_) return nullptr;
    const Clock::time_point deadline = Clock::now() + wait;
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      if (const std::optional<uint64_t> at = Fit(n)) {
        used_[*at] = n;
        return base_ + *at;
      }
      if (stop.load() || Clock::now() >= deadline) return nullptr;
      freed_.wait_for(lock, std::chrono::milliseconds(10));
    }
  }
  void Give(const unsigned char* p) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      used_.erase(static_cast<uint64_t>(p - base_));
    }
    freed_.notify_all();
  }
  bool Holds(const unsigned char* p) const { return p >= base_ && p < base_ + bytes_; }

 private:
  std::optional<uint64_t> Fit(uint64_t n) const {
    uint64_t at = 0;
    for (const auto& [begin, size] : used_) {
      if (begin >= at + n) return at;
      at = begin + size;
    }
    if (at + n <= bytes_) return at;
    return std::nullopt;
  }

  unsigned char* base_;
  uint64_t bytes_;
  std::mutex mutex_;
  std::condition_variable freed_;
  std::map<uint64_t, uint64_t> used_;  // offset → bytes
};

// What one device holds for the load besides the tensors' bytes.
struct DeviceSide {
  std::shared_ptr<CheckedDevice> device;
  unsigned char* block = nullptr;  // the decoded tensors, when hoist allocates them
  // Each coded tensor's flag (pack/exponent_decode_gpu.h), then its decoding table, group
  // starts, group checksums and unit lengths.
  unsigned char* index = nullptr;
  uint64_t index_bytes = 0;
  size_t flags = 0;
  unsigned char* scratch = nullptr;
  uint64_t scratch_bytes = 0;
  std::unique_ptr<ScratchRing> ring;
  std::mutex own_mutex;
  std::vector<void*> own_scratch;  // taken when the ring was full
  bool stuck = false;              // a decode did not finish: its memory stays allocated
};

struct CodedTensor {
  const PackedTensor* packed = nullptr;
  StreamedParts parts;
  // Its decoding table, group starts, group checksums and unit lengths in its device's index,
  // each 8-byte aligned.
  uint64_t table_at = 0;
  uint64_t starts_at = 0;
  uint64_t checksums_at = 0;
  uint64_t unit_bits_at = 0;
  size_t flag = 0;
  unsigned char* scratch = nullptr;  // where its parts stream and are decoded from
};

struct Decode {
  size_t tensor = 0;
  std::unique_ptr<CopyHandle> handle;
  int64_t started_ns = 0;
};

// The state the inner load's callbacks share: held by them through a shared_ptr, so that a
// reader left behind by a stuck read never calls into freed memory.
class DecodingLoad {
 public:
  DecodingLoad(const TensorDirectory& dir, std::vector<std::shared_ptr<CheckedDevice>> devices,
               const LoadOptions& options, std::vector<uint32_t> placement)
      : dir_(dir),
        layout_(*dir.packed),
        devices_(std::move(devices)),
        options_(options),
        placement_(std::move(placement)) {
    stall_.Start(options.stall_timeout_s);
  }

  static Result<std::unique_ptr<LoadedModel>> Run(const std::shared_ptr<DecodingLoad>& self);

 private:
  Status Prepare();
  Status UploadIndex(DeviceSide& side, const std::vector<size_t>& coded);
  TensorDirectory CarrierDirectory() const;
  Result<void*> CarrierDestination(size_t i);
  // The destination when it is to be had without waiting: a raw tensor's place, or room in
  // the ring for a coded one; nullptr otherwise (and whenever the caller gives destinations).
  Result<void*> CarrierDestinationAtOnce(size_t i);
  // Coded tensor i's room in its device's scratch ring: its stored bytes, aligned; nullptr
  // when the ring has none within `wait` or the load stopped.
  uint64_t ScratchBytes(size_t i) const;
  unsigned char* TakeScratch(size_t i, std::chrono::milliseconds wait);
  void CarrierLanded(size_t i);
  void Watch();
  // Gathers the decodes that finished into `finished` and marks the ones past the stall
  // timeout; whether none is in flight. Takes mutex_.
  bool PollDecodes(std::vector<size_t>& finished);
  // Called with mutex_ held.
  void MarkStalled(size_t tensor, const std::string& name);
  void GiveScratch(size_t i);
  void Fail(Status status);
  Status CheckFlags();
  void FreeAll();
  void FreeBlocks();

  const TensorDirectory& dir_;
  const PackedLayout& layout_;
  std::vector<std::shared_ptr<CheckedDevice>> devices_;
  const LoadOptions options_;
  const std::vector<uint32_t> placement_;
  TensorLayout tensor_layout_;
  std::vector<std::unique_ptr<DeviceSide>> sides_;
  std::vector<CodedTensor> coded_;                  // per directory tensor; packed null: raw
  std::vector<std::atomic<unsigned char*>> final_;  // per directory tensor: its decoded place
  uint64_t decoded_on_device_bytes_ = 0;

  std::atomic<bool> stop_{false};
  std::atomic<bool> streamed_{false};
  std::mutex mutex_;
  std::vector<Decode> decodes_;
  size_t decodes_done_ = 0;     // guarded by mutex_, as decodes_
  int64_t decode_busy_ns_ = 0;  // the finished decodes' time from launch to seen done
  StallClock stall_;            // the timeout each decode is held to
  Status error_;
  bool stalled_ = false;
};

void DecodingLoad::Fail(Status status) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (error_.ok()) error_ = std::move(status);
  }
  stop_.store(true);
}

Status DecodingLoad::UploadIndex(DeviceSide& side, const std::vector<size_t>& coded) {
  std::vector<unsigned char> blob(side.index_bytes, 0);
  for (size_t f = 0; f < side.flags; ++f) std::memcpy(blob.data() + 8 * f, &kNoBadGroup, 8);
  for (size_t i : coded) {
    const CodedTensor& c = coded_[i];
    const PackedTensor& p = *c.packed;
    auto put = [&](uint64_t at, const auto& v) {
      std::memcpy(blob.data() + at, v.data(), v.size() * sizeof(v[0]));
    };
    put(c.table_at, p.table);
    put(c.starts_at, p.group_start_bits);
    put(c.checksums_at, p.group_checksums);
    put(c.unit_bits_at, p.unit_bits);
  }
  HOIST_ASSIGN_OR_RETURN(void* index, side.device->AllocateDevice(side.index_bytes));
  side.index = static_cast<unsigned char*>(index);
  // From pageable memory, in pieces no engine hangs on (kPageableCopyBytes), waited for in turn.
  std::vector<std::unique_ptr<CopyHandle>> copies;
  for (uint64_t at = 0; at < blob.size(); at += kPageableCopyBytes) {
    const uint64_t n = std::min<uint64_t>(kPageableCopyBytes, blob.size() - at);
    HOIST_ASSIGN_OR_RETURN(auto copy,
                           side.device->CopyToDeviceAsync(side.index + at, blob.data() + at, n, 0));
    copies.push_back(std::move(copy));
  }
  for (auto& copy : copies) {
    Status waited = WaitForCopy(*copy, options_.stall_timeout_s);
    if (!waited.ok()) {
      // The copy may still read the blob and write the index: both stay.
      side.stuck = true;
      new std::vector<unsigned char>(std::move(blob));  // NOLINT: leaked on purpose
      return waited.WithContext(side.device->name() + ": sending a packed model's indexes");
    }
  }
  return Status::Ok();
}

Status DecodingLoad::Prepare() {
  HOIST_ASSIGN_OR_RETURN(const std::vector<bool> selected, SelectTensors(dir_, options_.names));
  HOIST_ASSIGN_OR_RETURN(
      tensor_layout_,
      LayOutTensors(dir_, selected, Placement{static_cast<uint32_t>(devices_.size()), placement_}));
  coded_.resize(dir_.tensors.size());
  final_ = std::vector<std::atomic<unsigned char*>>(dir_.tensors.size());
  std::vector<std::vector<size_t>> coded_on(devices_.size());
  std::vector<uint64_t> streamed(devices_.size(), 0);
  std::vector<uint64_t> largest(devices_.size(), 0);
  for (uint32_t i : tensor_layout_.tensors) {
    const PackedTensor& p = layout_.tensors[i];
    if (!p.coded) continue;
    const uint32_t d = tensor_layout_.device_of[i];
    coded_[i].packed = &p;
    coded_[i].parts = *PartsOf(p);
    coded_on[d].push_back(i);
    streamed[d] += ScratchBytes(i);
    largest[d] = std::max(largest[d], ScratchBytes(i));
    decoded_on_device_bytes_ += p.nbytes;
  }
  const int threads = options_.threads > 0
                          ? options_.threads
                          : DefaultReaderThreads(static_cast<int>(devices_.size()));
  const uint64_t staging =
      options_.staging_bytes != 0
          ? options_.staging_bytes
          : DefaultStagingBytes(
                threads, options_.chunk_bytes != 0 ? options_.chunk_bytes : kDefaultChunkBytes);
  for (size_t d = 0; d < devices_.size(); ++d) {
    auto side = std::make_unique<DeviceSide>();
    side->device = devices_[d];
    side->flags = coded_on[d].size();
    uint64_t at = AlignUp(8 * side->flags, kScratchAlign);
    for (size_t k = 0; k < coded_on[d].size(); ++k) {
      CodedTensor& c = coded_[coded_on[d][k]];
      c.flag = k;
      const PackedTensor& p = *c.packed;
      auto place = [&](uint64_t bytes) {
        const uint64_t here = at;
        at += AlignUp(bytes, 8);
        return here;
      };
      c.table_at = place(p.table.size() * 2);
      c.starts_at = place(p.group_start_bits.size() * 8);
      c.checksums_at = place(p.group_checksums.size() * 8);
      c.unit_bits_at = place(p.unit_bits.size() * 2);
    }
    side->index_bytes = at;
    sides_.push_back(std::move(side));
    DeviceSide& s = *sides_.back();
    if (tensor_layout_.device_tensor_bytes[d] > 0 && !options_.destination) {
      HOIST_ASSIGN_OR_RETURN(void* block,
                             s.device->AllocateDevice(tensor_layout_.allocation_bytes[d]));
      s.block = static_cast<unsigned char*>(block);
    }
    if (coded_on[d].empty()) continue;
    HOIST_RETURN_IF_ERROR(UploadIndex(s, coded_on[d]));
    // Room for the tensors whose parts are in flight (about the staging pool's bytes) and the
    // two largest being decoded, or for all of them when that is less.
    s.scratch_bytes = std::min(streamed[d], AlignUp(staging, kScratchAlign) + 2 * largest[d]);
    HOIST_ASSIGN_OR_RETURN(void* scratch, s.device->AllocateDevice(s.scratch_bytes));
    s.scratch = static_cast<unsigned char*>(scratch);
    s.ring = std::make_unique<ScratchRing>(s.scratch, s.scratch_bytes);
  }
  for (uint32_t i : tensor_layout_.tensors) {
    const DeviceSide& s = *sides_[tensor_layout_.device_of[i]];
    if (s.block != nullptr) final_[i].store(s.block + tensor_layout_.device_offset[i]);
  }
  return Status::Ok();
}

// The packed file as it is stored: a coded tensor is its parts' one range, as bytes.
TensorDirectory DecodingLoad::CarrierDirectory() const {
  TensorDirectory carrier;
  carrier.format = dir_.format;
  carrier.files.push_back({layout_.path, layout_.file_size, dir_.files[0].identity});
  carrier.storage = dir_.stored_storage;
  for (size_t i = 0; i < dir_.tensors.size(); ++i) {
    TensorEntry e = dir_.tensors[i];
    const PackedTensor& p = layout_.tensors[i];
    e.stored_bytes = 0;
    if (p.coded) {
      const StreamedParts parts = PartsOf(p).value_or(StreamedParts{});
      e.dtype = "U8";
      e.shape = {parts.bytes};
      e.offset = parts.begin;
      e.nbytes = parts.bytes;
    } else {
      e.offset = p.data;
    }
    carrier.tensors.push_back(std::move(e));
  }
  carrier.IndexNames();
  return carrier;
}

Result<void*> DecodingLoad::CarrierDestination(size_t i) {
  if (options_.destination) {
    HOIST_ASSIGN_OR_RETURN(void* p, options_.destination(i, dir_.tensors[i]));
    if (p == nullptr) {
      return Status::InvalidArgument("no destination given for tensor '" + dir_.tensors[i].name +
                                     "'");
    }
    final_[i].store(static_cast<unsigned char*>(p));
  }
  CodedTensor& c = coded_[i];
  if (c.packed == nullptr) return static_cast<void*>(final_[i].load());
  DeviceSide& side = *sides_[tensor_layout_.device_of[i]];
  c.scratch = TakeScratch(i, kRingWait);
  if (c.scratch == nullptr) {
    if (stop_.load()) return Status::Cancelled("the load stopped");
    HOIST_ASSIGN_OR_RETURN(void* own, side.device->AllocateDevice(ScratchBytes(i)));
    std::lock_guard<std::mutex> lock(side.own_mutex);
    side.own_scratch.push_back(own);
    c.scratch = static_cast<unsigned char*>(own);
  }
  return static_cast<void*>(c.scratch);
}

Result<void*> DecodingLoad::CarrierDestinationAtOnce(size_t i) {
  if (options_.destination) return nullptr;
  CodedTensor& c = coded_[i];
  if (c.packed == nullptr) return static_cast<void*>(final_[i].load());
  c.scratch = TakeScratch(i, std::chrono::milliseconds(0));
  return static_cast<void*>(c.scratch);
}

uint64_t DecodingLoad::ScratchBytes(size_t i) const {
  return AlignUp(coded_[i].parts.bytes, kScratchAlign);
}

unsigned char* DecodingLoad::TakeScratch(size_t i, std::chrono::milliseconds wait) {
  return sides_[tensor_layout_.device_of[i]]->ring->Take(ScratchBytes(i), wait, stop_);
}

void DecodingLoad::GiveScratch(size_t i) {
  CodedTensor& c = coded_[i];
  DeviceSide& side = *sides_[tensor_layout_.device_of[i]];
  if (c.scratch != nullptr && side.ring->Holds(c.scratch)) side.ring->Give(c.scratch);
}

void DecodingLoad::CarrierLanded(size_t i) {
  const CodedTensor& c = coded_[i];
  if (c.packed == nullptr) {
    if (options_.tensor_loaded) options_.tensor_loaded(i);
    return;
  }
  const PackedTensor& p = *c.packed;
  DeviceSide& side = *sides_[tensor_layout_.device_of[i]];
  GpuExponentTensor t;
  t.table = reinterpret_cast<const uint16_t*>(side.index + c.table_at);
  t.group_start_bits = reinterpret_cast<const uint64_t*>(side.index + c.starts_at);
  t.group_checksums = reinterpret_cast<const uint64_t*>(side.index + c.checksums_at);
  t.unit_bits = reinterpret_cast<const uint16_t*>(side.index + c.unit_bits_at);
  t.coded = c.scratch;
  t.coded_bytes = p.coded_end - p.coded_begin;
  t.rest = c.scratch + c.parts.rest_offset;
  t.values = p.values;
  t.value_bytes = p.split.value_bytes;
  t.shift = p.split.shift;
  t.out = final_[i].load();
  t.first_bad_group = reinterpret_cast<uint64_t*>(side.index + 8 * c.flag);
  auto handle = side.device->DecodeExponentsAsync(t, static_cast<bool>(options_.destination));
  if (!handle.ok()) {
    GiveScratch(i);
    Fail(handle.status().WithContext("decoding tensor " + p.name));
    return;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  decodes_.push_back({i, std::move(handle).value(), MonotonicNs()});
}

// Polls the decodes in flight: gives their scratch back and reports their tensors as they
// finish; a decode past the stall timeout stops the load. Returns once streaming has ended and
// no decode is in flight, or at a stall.
void DecodingLoad::Watch() {
  for (;;) {
    if (options_.cancel != nullptr && options_.cancel->load()) stop_.store(true);
    std::vector<size_t> finished;
    // Read before looking at the decodes: every decode started before streaming ended is then
    // in the list PollDecodes reads (reading it after let the last tensor's decode go unwatched
    // and unreported).
    const bool streamed = streamed_.load();
    const bool idle = PollDecodes(finished);
    for (size_t i : finished) {
      GiveScratch(i);
      if (options_.tensor_loaded && !stop_.load()) options_.tensor_loaded(i);
    }
    if (stalled_) {
      stop_.store(true);
      return;
    }
    if (idle && streamed) return;
    std::this_thread::sleep_for(kDecodePoll);
  }
}

bool DecodingLoad::PollDecodes(std::vector<size_t>& finished) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto it = decodes_.begin(); it != decodes_.end();) {
    auto done = it->handle->Poll();
    const std::string name = dir_.tensors[it->tensor].name;
    if (!done.ok() || done.value()) {  // a failed decode no longer touches memory either
      ++decodes_done_;
      decode_busy_ns_ += MonotonicNs() - it->started_ns;
      if (!done.ok() && error_.ok()) {
        error_ = done.status().WithContext("decoding tensor " + name);
        stop_.store(true);
      }
      finished.push_back(it->tensor);
      it = decodes_.erase(it);
      continue;
    }
    if (stall_.Over(it->started_ns, MonotonicNs())) MarkStalled(it->tensor, name);
    ++it;
  }
  return decodes_.empty();
}

void DecodingLoad::MarkStalled(size_t tensor, const std::string& name) {
  DeviceSide& side = *sides_[tensor_layout_.device_of[tensor]];
  side.stuck = true;
  stalled_ = true;
  if (!error_.ok()) return;
  error_ = Status(Code::kStalled, "decode stage: decoding tensor " + name + " on " +
                                      side.device->name() + " did not finish within " +
                                      StallSeconds(stall_.timeout_s()) +
                                      "; the device memory it reads and writes is left "
                                      "allocated until the process exits");
}

Status DecodingLoad::CheckFlags() {
  for (const auto& side : sides_) {
    if (side->flags == 0) continue;
    std::vector<uint64_t> flags(side->flags);
    HOIST_RETURN_IF_ERROR(side->device->CopyToHost(flags.data(), side->index, 8 * flags.size()));
    for (uint32_t i : tensor_layout_.tensors) {
      const CodedTensor& c = coded_[i];
      if (c.packed == nullptr || sides_[tensor_layout_.device_of[i]] != side ||
          flags[c.flag] == kNoBadGroup) {
        continue;
      }
      const uint64_t group = flags[c.flag];
      const uint64_t a = group * kGroupValues;
      const uint64_t b = std::min(c.packed->values, a + kGroupValues);
      return Status(Code::kInvalidModel, layout_.path + ": tensor " + c.packed->name + ", block " +
                                             std::to_string(group) + " (values " +
                                             std::to_string(a) + "-" + std::to_string(b - 1) +
                                             "): it does not decode to what its index and " +
                                             "checksum say, on " + side->device->name() +
                                             " (the packed file is corrupt)");
    }
  }
  return Status::Ok();
}

// Frees what this load allocated, except on a device whose copies or decodes may still run.
void DecodingLoad::FreeAll() {
  for (const auto& side : sides_) {
    if (side->stuck || !side->device->free_on_destroy()) {
      side->device->set_free_on_destroy(false);
      continue;
    }
    for (void* p : {static_cast<void*>(side->index), static_cast<void*>(side->scratch)}) {
      if (p != nullptr) (void)side->device->FreeDevice(p);
    }
    for (void* p : side->own_scratch) (void)side->device->FreeDevice(p);
    side->index = nullptr;
    side->scratch = nullptr;
    side->own_scratch.clear();
  }
}

// The tensors' blocks of a failed load, except on a device whose copies or decodes may still run.
void DecodingLoad::FreeBlocks() {
  for (const auto& side : sides_) {
    if (side->block != nullptr && !side->stuck && side->device->free_on_destroy()) {
      (void)side->device->FreeDevice(side->block);
    }
  }
}

Result<std::unique_ptr<LoadedModel>> DecodingLoad::Run(const std::shared_ptr<DecodingLoad>& self) {
  DecodingLoad& me = *self;
  const Clock::time_point start = Clock::now();
  Status prepared = me.Prepare();
  if (!prepared.ok()) {
    me.FreeAll();
    me.FreeBlocks();
    return prepared;
  }
  const double prepare_s = std::chrono::duration<double>(Clock::now() - start).count();
  const TensorDirectory carrier = me.CarrierDirectory();
  LoadOptions inner = me.options_;
  inner.checksum = false;
  inner.cancel = &me.stop_;
  inner.destinations_when_needed = true;
  inner.destination = [self](size_t i, const TensorEntry&) { return self->CarrierDestination(i); };
  inner.destination_at_once = [self](size_t i, const TensorEntry&) {
    return self->CarrierDestinationAtOnce(i);
  };
  inner.tensor_loaded = [self](size_t i) { self->CarrierLanded(i); };
  std::thread watcher([self] { self->Watch(); });
  auto loaded = Load(carrier, me.devices_, inner, me.placement_);
  const int64_t streamed_ns = MonotonicNs();
  me.streamed_.store(true);
  watcher.join();
  const double after_stream_s = static_cast<double>(MonotonicNs() - streamed_ns) / 1e9;

  Status status;
  {
    std::lock_guard<std::mutex> lock(me.mutex_);
    status = me.error_;
  }
  if (status.ok() && !loaded.ok()) status = loaded.status();
  if (status.ok()) status = me.CheckFlags();
  me.FreeAll();
  if (!status.ok()) {
    me.FreeBlocks();
    return status;
  }
  auto model = std::make_unique<LoadedModel>(me.devices_, me.dir_.tensors.size());
  if (me.devices_.size() > 1 || !me.placement_.empty()) model->SetPlacement(me.placement_);
  if (me.options_.destination) model->SetExternalDestinations();
  for (size_t d = 0; d < me.sides_.size(); ++d) {
    if (me.sides_[d]->block != nullptr) model->AdoptBlock(d, me.sides_[d]->block);
  }
  for (uint32_t i : me.tensor_layout_.tensors) {
    model->SetLoaded(i, me.final_[i].load(), me.tensor_layout_.device_of[i]);
  }
  // The carrier's report, in the tensors' own bytes: what a caller asked to load.
  model->report = (*loaded)->report;
  LoadReport& report = model->report;
  report.tensor_bytes = me.tensor_layout_.tensor_bytes;
  for (size_t d = 0; d < report.devices.size() && d < me.devices_.size(); ++d) {
    report.devices[d].tensor_bytes = me.tensor_layout_.device_tensor_bytes[d];
  }
  report.decoded_on_device_bytes = me.decoded_on_device_bytes_;
  {
    std::lock_guard<std::mutex> lock(me.mutex_);
    report.decode = {me.decodes_done_, static_cast<double>(me.decode_busy_ns_) / 1e9,
                     after_stream_s};
  }
  report.phases.allocate += prepare_s;
  report.wall_s = std::chrono::duration<double>(Clock::now() - start).count();
  return model;
}

}  // namespace

bool DecodesOnDevice(const TensorDirectory& dir,
                     const std::vector<std::shared_ptr<CheckedDevice>>& devices,
                     const LoadOptions& options, const ReadSpec& read) {
  if (!dir.packed || !dir.stored_storage || dir.files.size() != 1 || options.checksum ||
      !read.strides.empty() || !read.read_groups.empty() || devices.empty()) {
    return false;
  }
  for (const auto& d : devices) {
    if (!d || !d->capabilities().decodes_exponents) return false;
  }
  // The directory is the packed file's own (a directory made from it, of regions say, is not).
  const std::vector<PackedTensor>& packed = dir.packed->tensors;
  if (packed.size() != dir.tensors.size()) return false;
  for (size_t i = 0; i < packed.size(); ++i) {
    const PackedTensor& p = packed[i];
    if (p.virtual_offset != dir.tensors[i].offset || p.nbytes != dir.tensors[i].nbytes ||
        (p.coded && !PartsOf(p).has_value())) {
      return false;
    }
  }
  return true;
}

std::string HostDecodeFor(const TensorDirectory& dir,
                          const std::vector<std::shared_ptr<CheckedDevice>>& devices,
                          const LoadOptions& options) {
  if (!dir.packed) return {};
  const bool coded = std::any_of(dir.packed->tensors.begin(), dir.packed->tensors.end(),
                                 [](const PackedTensor& t) { return t.coded; });
  if (!coded) return {};
  for (const auto& d : devices) {
    if (d->kind() == DeviceKind::kHost) continue;
    const std::string why = !d->capabilities().decodes_exponents
                                ? "it has no decoder (a build without the GPU kernels, "
                                  "HOIST_GPU_KERNELS; or sim:decode=0)"
                            : options.checksum ? "checksums are of the staged bytes"
                                               : "this load's shape (regions, parts or several "
                                                 "files) decodes as it reads";
    return "packed tensors decoded on the CPU for " + d->name() + ": " + why +
           "; such a load runs at the CPU's decode rate, not the link's";
  }
  return {};
}

Result<std::unique_ptr<LoadedModel>> LoadDecodingOnDevice(
    const TensorDirectory& dir, const std::vector<std::shared_ptr<CheckedDevice>>& devices,
    const LoadOptions& options, const std::vector<uint32_t>& placement) {
  auto load = std::make_shared<DecodingLoad>(dir, devices, options, placement);
  return DecodingLoad::Run(load);
}

}  // namespace hoist
