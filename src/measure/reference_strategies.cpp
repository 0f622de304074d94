#include "measure/reference_strategies.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "base/platform.h"
#include "base/units.h"
#include "io/file.h"
#include "plan/load_plan.h"

namespace hoist {
namespace {

using Clock = std::chrono::steady_clock;
constexpr uint64_t kDirectAlignment = 4096;

// One allocation for every tensor, 256-byte aligned, as hoist's own loads place them.
Status Place(const TensorDirectory& dir, CheckedDevice& device, LoadedModel& model) {
  uint64_t total = 0;
  std::vector<uint64_t> offsets;
  for (const TensorEntry& t : dir.tensors) {
    offsets.push_back(total);
    total += AlignUp(t.nbytes, kDeviceAlignment);
  }
  HOIST_ASSIGN_OR_RETURN(void* block, device.AllocateDevice(std::max<uint64_t>(total, 1)));
  model.AdoptBlock(0, block);
  for (size_t i = 0; i < dir.tensors.size(); ++i) {
    model.SetLoaded(i, static_cast<char*>(block) + offsets[i], 0);
    model.report.tensor_bytes += dir.tensors[i].nbytes;
  }
  model.report.tensors = dir.tensors.size();
  return Status::Ok();
}

Status LoadFromMapping(const TensorDirectory& dir, CheckedDevice& device, LoadedModel& model,
                       double stall_timeout_s) {
  if (dir.stored_storage) {
    return Status::Unavailable(
        "a packed model's file holds its tensors coded: a mapping of it is not their bytes");
  }
  std::vector<std::unique_ptr<MappedFile>> maps;
  for (const FileEntry& f : dir.files) {
    HOIST_ASSIGN_OR_RETURN(auto map, MapFile(f.path));
    maps.push_back(std::move(map));
  }
  for (size_t i = 0; i < dir.tensors.size(); ++i) {
    const TensorEntry& t = dir.tensors[i];
    if (t.nbytes == 0) continue;
    HOIST_RETURN_IF_ERROR(StopRequested());
    HOIST_ASSIGN_OR_RETURN(
        auto copy,
        device.CopyToDeviceAsync(model.data(i), maps[t.file]->data() + t.offset, t.nbytes, 0));
    HOIST_RETURN_IF_ERROR(WaitForCopy(*copy, stall_timeout_s));
  }
  return Status::Ok();
}

// One thread, `count` pinned buffers of `bytes` used in turn; a buffer is refilled once its
// previous copy has completed.
// A staged reference load's buffers: `count` pinned buffers, each with the copy out of it in
// flight (if any). Returns them to the device when it goes.
class StagedBuffers {
 public:
  StagedBuffers(CheckedDevice& device, int count) : device_(device), copies_(count) {}
  ~StagedBuffers() {
    for (void* p : buffers_) (void)device_.ReturnPinned(p);
  }
  StagedBuffers(const StagedBuffers&) = delete;
  StagedBuffers& operator=(const StagedBuffers&) = delete;

  Status Allocate(uint64_t bytes) {
    for (size_t b = 0; b < copies_.size(); ++b) {
      HOIST_ASSIGN_OR_RETURN(void* p, device_.AllocatePinned(bytes));
      buffers_.push_back(p);
    }
    return Status::Ok();
  }
  // The next buffer in turn, once the copy out of it has completed.
  Result<size_t> Next(double stall_timeout_s) {
    const size_t b = next_++ % buffers_.size();
    if (copies_[b]) {
      const Status waited = WaitForCopy(*copies_[b], stall_timeout_s);
      copies_[b].reset();
      HOIST_RETURN_IF_ERROR(waited);
    }
    return b;
  }
  unsigned char* buffer(size_t b) const { return static_cast<unsigned char*>(buffers_[b]); }
  void Started(size_t b, std::unique_ptr<CopyHandle> copy) { copies_[b] = std::move(copy); }
  // Waits for every copy in flight; the first failure.
  Status Drain(double stall_timeout_s) {
    Status status;
    for (auto& copy : copies_) {
      if (!copy) continue;
      const Status waited = WaitForCopy(*copy, stall_timeout_s);
      if (status.ok()) status = waited;
      copy.reset();
    }
    return status;
  }

 private:
  CheckedDevice& device_;
  std::vector<void*> buffers_;
  std::vector<std::unique_ptr<CopyHandle>> copies_;
  size_t next_ = 0;
};

// Tensor i read piece by piece into the staging buffers and copied out of them.
Status StageTensor(const TensorDirectory& dir, size_t i, File& file, uint64_t piece,
                   CheckedDevice& device, LoadedModel& model, StagedBuffers& staged,
                   double stall_timeout_s) {
  const TensorEntry& t = dir.tensors[i];
  for (uint64_t done = 0; done < t.nbytes; done += piece) {
    HOIST_RETURN_IF_ERROR(StopRequested());
    const uint64_t n = std::min(piece, t.nbytes - done);
    HOIST_ASSIGN_OR_RETURN(const size_t b, staged.Next(stall_timeout_s));
    HOIST_ASSIGN_OR_RETURN(const unsigned char* read,
                           file.ReadCovering(t.offset + done, staged.buffer(b), n));
    HOIST_ASSIGN_OR_RETURN(
        auto copy, device.CopyToDeviceAsync(static_cast<char*>(model.data(i)) + done, read, n, 0));
    staged.Started(b, std::move(copy));
  }
  return Status::Ok();
}

Status LoadStaged(const TensorDirectory& dir, CheckedDevice& device, LoadedModel& model, int count,
                  uint64_t bytes, bool direct, double stall_timeout_s) {
  std::vector<std::unique_ptr<File>> files;
  OpenOptions options;
  options.direct = direct;
  for (uint32_t f = 0; f < dir.files.size(); ++f) {
    HOIST_ASSIGN_OR_RETURN(auto file, dir.OpenAsParsed(f, options));
    files.push_back(std::move(file));
  }
  StagedBuffers staged(device, count);
  Status status = staged.Allocate(bytes);
  // With direct I/O a piece may start up to one block into its buffer.
  const uint64_t piece = direct ? bytes - kDirectAlignment : bytes;
  for (size_t i = 0; status.ok() && i < dir.tensors.size(); ++i) {
    status = StageTensor(dir, i, *files[dir.tensors[i].file], piece, device, model, staged,
                         stall_timeout_s);
  }
  const Status drained = staged.Drain(stall_timeout_s);
  return status.ok() ? drained : status;
}

}  // namespace

const char* ReferenceStrategyName(ReferenceStrategy strategy) {
  switch (strategy) {
    case ReferenceStrategy::kMmapPageable:
      return "mmap-pageable";
    case ReferenceStrategy::kPinned4x1MiB:
      return "pinned-4x1MiB";
    case ReferenceStrategy::kDirect4x64MiB:
      return "direct-4x64MiB";
  }
  return "unknown";
}

std::vector<ReferenceStrategy> AllReferenceStrategies() {
  return {ReferenceStrategy::kMmapPageable, ReferenceStrategy::kPinned4x1MiB,
          ReferenceStrategy::kDirect4x64MiB};
}

Result<std::unique_ptr<LoadedModel>> LoadWithReferenceStrategy(
    const TensorDirectory& dir, const std::shared_ptr<CheckedDevice>& device,
    ReferenceStrategy strategy, double stall_timeout_s) {
  auto model = std::make_unique<LoadedModel>(std::vector<std::shared_ptr<CheckedDevice>>{device},
                                             dir.tensors.size());
  model->report.device = device->name();
  const Clock::time_point start = Clock::now();
  HOIST_RETURN_IF_ERROR(Place(dir, *device, *model));
  Status status;
  switch (strategy) {
    case ReferenceStrategy::kMmapPageable:
      status = LoadFromMapping(dir, *device, *model, stall_timeout_s);
      break;
    case ReferenceStrategy::kPinned4x1MiB:
      status = LoadStaged(dir, *device, *model, 4, 1ull << 20, false, stall_timeout_s);
      break;
    case ReferenceStrategy::kDirect4x64MiB: {
      status = LoadStaged(dir, *device, *model, 4, 64ull << 20, true, stall_timeout_s);
      break;
    }
  }
  if (!status.ok()) return status.WithContext(ReferenceStrategyName(strategy));
  model->report.wall_s = std::chrono::duration<double>(Clock::now() - start).count();
  return model;
}

}  // namespace hoist
