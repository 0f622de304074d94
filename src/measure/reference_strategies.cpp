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
Status LoadStaged(const TensorDirectory& dir, CheckedDevice& device, LoadedModel& model, int count,
                  uint64_t bytes, bool direct, double stall_timeout_s) {
  std::vector<std::unique_ptr<File>> files;
  OpenOptions options;
  options.direct = direct;
  for (const FileEntry& f : dir.files) {
    HOIST_ASSIGN_OR_RETURN(auto file, dir.source().Open(f.path, options));
    files.push_back(std::move(file));
  }
  std::vector<void*> buffers;
  std::vector<std::unique_ptr<CopyHandle>> copies(static_cast<size_t>(count));
  Status status;
  for (int b = 0; b < count && status.ok(); ++b) {
    auto p = device.AllocatePinned(bytes);
    if (p.ok()) {
      buffers.push_back(*p);
    } else {
      status = p.status();
    }
  }
  // With direct I/O a piece may start up to one block into its buffer.
  const uint64_t piece = direct ? bytes - kDirectAlignment : bytes;
  size_t next = 0;
  for (size_t i = 0; status.ok() && i < dir.tensors.size(); ++i) {
    const TensorEntry& t = dir.tensors[i];
    for (uint64_t done = 0; status.ok() && done < t.nbytes; done += piece) {
      status = StopRequested();
      if (!status.ok()) break;
      const uint64_t n = std::min(piece, t.nbytes - done);
      const size_t b = next++ % buffers.size();
      if (copies[b]) {
        status = WaitForCopy(*copies[b], stall_timeout_s);
        copies[b].reset();
        if (!status.ok()) break;
      }
      auto read =
          files[t.file]->ReadCovering(t.offset + done, static_cast<unsigned char*>(buffers[b]), n);
      if (!read.ok()) {
        status = read.status();
        break;
      }
      auto copy = device.CopyToDeviceAsync(static_cast<char*>(model.data(i)) + done, *read, n, 0);
      if (!copy.ok()) {
        status = copy.status();
        break;
      }
      copies[b] = std::move(copy).value();
    }
  }
  for (auto& copy : copies) {
    if (copy) {
      const Status waited = WaitForCopy(*copy, stall_timeout_s);
      if (status.ok()) status = waited;
    }
  }
  for (void* p : buffers) (void)device.ReturnPinned(p);
  return status;
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
