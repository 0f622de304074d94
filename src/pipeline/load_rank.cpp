// Rank mode: in a job that runs one process per device, each rank loads its slices of a split
// and 1/N of the tensors every rank holds whole into one flat block, and the caller's
// all-gather (NCCL, MPI, torch.distributed: the job's own exchange) fills in the rest.
#include <algorithm>
#include <chrono>
#include <map>
#include <vector>

#include "base/stall.h"
#include "base/units.h"
#include "pipeline/loader.h"

namespace hoist {
namespace {

using Clock = std::chrono::steady_clock;

// Waits for a polled exchange to finish, under the load's stall timeout, its cancel flag, stop
// signals and its progress callback (told `landed` about every 100 ms: a caller's Ctrl-C check
// runs there).
Status WaitForExchange(const AllGather& all_gather, const LoadOptions& options,
                       const LoadProgress& landed, uint32_t rank, uint32_t world) {
  StallClock waited;
  waited.Start(options.stall_timeout_s);
  Clock::time_point last_report = Clock::now();
  auto check = [&]() -> Status {
    HOIST_RETURN_IF_ERROR(StopOrCancel(options).WithContext("the all-gather"));
    const Clock::time_point now = Clock::now();
    if (options.progress && now - last_report >= std::chrono::milliseconds(100)) {
      last_report = now;
      if (!options.progress(landed)) {
        return Status::Cancelled("cancelled by the progress callback in the all-gather");
      }
    }
    const int64_t now_ns = MonotonicNs();
    if (!waited.Stalled(now_ns)) return Status::Ok();
    return Status::Stalled("rank " + std::to_string(rank) + " of " + std::to_string(world) +
                           " waited " + StallSeconds(waited.IdleSeconds(now_ns)) +
                           " for the other ranks in the all-gather of the tensors every rank "
                           "holds whole (stall timeout " +
                           StallSeconds(options.stall_timeout_s) +
                           "): a rank failed, hangs or never started its load");
  };
  return PollUntil(all_gather.poll, std::chrono::milliseconds(2), check);
}

// Where a rank's parts live in its one block: its own slices first (each at a 256-byte
// boundary), then the flat block of `world` chunks into which the tensors every rank holds
// whole are gathered.
struct RankBlock {
  std::map<size_t, uint64_t> flat_offset;  // tensor -> its place in the flat block
  uint64_t flat_bytes = 0;                 // 0: no tensor is whole on every rank
  uint64_t chunk = 0;                      // each rank's share of the flat block
  uint64_t flat_start = 0;                 // where the flat block starts in the block
  std::vector<uint64_t> offset;            // per part of mine: its place, kInFlat if flat
  uint64_t world = 0;
  uint64_t bytes() const { return flat_start + chunk * world; }
};
constexpr uint64_t kInFlat = UINT64_MAX;

// The parts of `cut` whose device is `rank` (as *mine, device 0, no destination) laid out in
// one block.
Result<RankBlock> LayOutRank(const TensorDirectory& dir, const std::vector<TensorRegion>& cut,
                             uint32_t rank, uint32_t world, std::vector<TensorRegion>* mine) {
  std::map<size_t, std::vector<const TensorRegion*>> pieces;
  for (const TensorRegion& r : cut) {
    if (r.tensor >= dir.tensors.size() || r.device >= world) {
      return Status::InvalidArgument("a part of the cut names tensor " + std::to_string(r.tensor) +
                                     " on device " + std::to_string(r.device));
    }
    pieces[r.tensor].push_back(&r);
  }
  auto whole = [&](const TensorRegion* r) {
    return r->row_begin == 0 && r->column_begin == 0 && r->column_end == r->row_bytes &&
           r->row_end * r->row_bytes == dir.tensors[r->tensor].nbytes;
  };
  RankBlock block;
  block.world = world;
  for (const auto& [tensor, ps] : pieces) {
    if (ps.size() != world || !std::all_of(ps.begin(), ps.end(), whole)) continue;
    block.flat_offset[tensor] = block.flat_bytes;
    block.flat_bytes += AlignUp(dir.tensors[tensor].nbytes, kDeviceAlignment);
  }
  block.chunk = AlignUp((block.flat_bytes + world - 1) / world, kDeviceAlignment);
  mine->clear();
  uint64_t own_bytes = 0;
  for (const TensorRegion& r : cut) {
    if (r.device != rank) continue;
    mine->push_back(r);
    mine->back().device = 0;
    mine->back().destination = nullptr;
    if (block.flat_offset.count(r.tensor) != 0) {
      block.offset.push_back(kInFlat);
      continue;
    }
    own_bytes = AlignUp(own_bytes, kDeviceAlignment);
    block.offset.push_back(own_bytes);
    own_bytes += (r.row_end - r.row_begin) * (r.column_end - r.column_begin);
  }
  block.flat_start = AlignUp(own_bytes, kDeviceAlignment);
  return block;
}

// What rank `rank` reads into `base`: its slices, and its chunk of the flat block.
std::vector<TensorRegion> RankReads(const TensorDirectory& dir, const RankBlock& block,
                                    const std::vector<TensorRegion>& mine, uint32_t rank,
                                    unsigned char* base) {
  std::vector<TensorRegion> reads;
  for (size_t i = 0; i < mine.size(); ++i) {
    if (block.offset[i] == kInFlat) continue;
    reads.push_back(mine[i]);
    reads.back().destination = base + block.offset[i];
  }
  const uint64_t begin = static_cast<uint64_t>(rank) * block.chunk;
  const uint64_t end = begin + block.chunk;
  for (const auto& [tensor, at] : block.flat_offset) {
    const uint64_t n = dir.tensors[tensor].nbytes;
    const uint64_t from = std::max(at, begin);
    const uint64_t to = std::min(at + n, end);
    if (from >= to) continue;
    reads.push_back({tensor, n, 0, 1, from - at, to - at, base + block.flat_start + from, 0});
  }
  return reads;
}

// The loaded model: tensor i is part i of mine, in the block it adopts.
std::unique_ptr<LoadedModel> AdoptRankBlock(const std::shared_ptr<CheckedDevice>& device,
                                            const RankBlock& block,
                                            const std::vector<TensorRegion>& mine, void* memory,
                                            LoadReport report) {
  auto* base = static_cast<unsigned char*>(memory);
  auto model = std::make_unique<LoadedModel>(std::vector<std::shared_ptr<CheckedDevice>>{device},
                                             mine.size());
  model->report = std::move(report);
  std::vector<RowStride> strides(mine.size());
  for (size_t i = 0; i < mine.size(); ++i) {
    const TensorRegion& r = mine[i];
    model->SetLoaded(i,
                     block.offset[i] == kInFlat
                         ? base + block.flat_start + block.flat_offset.at(r.tensor)
                         : base + block.offset[i],
                     0);
    const uint64_t width = r.column_end - r.column_begin;
    if (width != r.row_bytes && r.row_end - r.row_begin > 1) strides[i] = {width, r.row_bytes};
  }
  model->SetStrides(std::move(strides));
  model->AdoptBlock(0, memory);
  return model;
}

}  // namespace

Result<std::unique_ptr<LoadedModel>> LoadRank(const TensorDirectory& dir,
                                              const std::shared_ptr<CheckedDevice>& device,
                                              const std::vector<TensorRegion>& cut, uint32_t rank,
                                              uint32_t world, const AllGather& all_gather,
                                              const LoadOptions& options,
                                              std::vector<TensorRegion>* mine) {
  if (world == 0 || rank >= world) {
    return Status::InvalidArgument("rank " + std::to_string(rank) + " of " + std::to_string(world) +
                                   " is not a rank of the job");
  }
  if (!all_gather.start) return Status::InvalidArgument("rank mode needs an all-gather");
  HOIST_ASSIGN_OR_RETURN(const RankBlock block, LayOutRank(dir, cut, rank, world, mine));
  HOIST_ASSIGN_OR_RETURN(void* memory, device->AllocateDevice(block.bytes()));
  auto fail = [&](Status s) {
    // A load that could not stop its copies into the block (a stalled GPU) left it to them:
    // freeing it could let them write into memory handed out again.
    if (device->free_on_destroy()) (void)device->FreeDevice(memory);
    return s;
  };
  unsigned char* flat = static_cast<unsigned char*>(memory) + block.flat_start;
  LoadReport report;
  report.device = device->name();
  const std::vector<TensorRegion> reads =
      RankReads(dir, block, *mine, rank, static_cast<unsigned char*>(memory));
  if (!reads.empty()) {
    auto regions = LoadRegions(dir, device, reads, options);
    if (!regions.ok()) return fail(regions.status());
    report = (*regions)->report;
  }
  if (block.flat_bytes > 0) {
    if (Status s = all_gather.start(flat, block.chunk); !s.ok()) {
      return fail(s.WithContext("the all-gather of the tensors every rank holds"));
    }
    const LoadProgress landed{report.tensor_bytes, report.read_bytes, report.tensor_bytes, 0};
    if (Status s = all_gather.poll ? WaitForExchange(all_gather, options, landed, rank, world)
                                   : Status::Ok();
        !s.ok()) {
      // Whether stalled, cancelled or failed, the exchange may still write into the block:
      // it stays allocated.
      device->set_free_on_destroy(false);
      return Status(s.code(), s.message() + "; this rank's block (" + FormatBytes(block.bytes()) +
                                  ") stays allocated until the process ends: the exchange may "
                                  "still write into it");
    }
  }
  return AdoptRankBlock(device, block, *mine, memory, std::move(report));
}

}  // namespace hoist
