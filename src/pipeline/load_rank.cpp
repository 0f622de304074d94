// Rank mode: in a job that runs one process per device, each rank loads its slices of a split
// and 1/N of the tensors every rank holds whole into one flat block, and the caller's
// all-gather (NCCL, MPI, torch.distributed: the job's own exchange) fills in the rest.
#include <algorithm>
#include <chrono>
#include <map>
#include <vector>

#include "base/checksum.h"
#include "base/stall.h"
#include "base/units.h"
#include "pipeline/loader.h"
#include "pipeline/rank_verdict.h"

namespace hoist {
namespace {

using Clock = std::chrono::steady_clock;

// Waits for a polled exchange to finish, under the load's stall timeout, its cancel flag, stop
// signals and its progress callback (told `landed` about every 100 ms: a caller's Ctrl-C check
// runs there). `what`: the exchange, as a stall names it.
Status WaitForExchange(const AllGather& all_gather, const LoadOptions& options,
                       const LoadProgress& landed, uint32_t rank, uint32_t world,
                       const std::string& what) {
  StallClock waited;
  waited.Start(options.stall_timeout_s);
  Clock::time_point last_report = Clock::now();
  auto check = [&]() -> Status {
    HOIST_RETURN_IF_ERROR(StopOrCancel(options).WithContext(what));
    const Clock::time_point now = Clock::now();
    if (options.progress && now - last_report >= std::chrono::milliseconds(100)) {
      last_report = now;
      if (!options.progress(landed)) {
        return Status::Cancelled("cancelled by the progress callback in " + what);
      }
    }
    const int64_t now_ns = MonotonicNs();
    if (!waited.Stalled(now_ns)) return Status::Ok();
    return Status::Stalled("rank " + std::to_string(rank) + " of " + std::to_string(world) +
                           " waited " + StallSeconds(waited.IdleSeconds(now_ns)) +
                           " for the other ranks in " + what + " (stall timeout " +
                           StallSeconds(options.stall_timeout_s) +
                           "): a rank failed, hangs or never started its load");
  };
  auto finished = [&]() -> Result<bool> {
    Result<bool> polled = all_gather.poll();
    if (!polled.ok()) return polled.status().WithContext(what);
    return polled;
  };
  return PollUntil(finished, std::chrono::milliseconds(2), check);
}

// Runs the exchange once over `block` (world chunks of `chunk` bytes) and waits for it.
// *in_flight: whether it ended started but unfinished (it may still write into the block).
Status Exchange(const AllGather& all_gather, const LoadOptions& options, const LoadProgress& landed,
                uint32_t rank, uint32_t world, void* block, uint64_t chunk, const std::string& what,
                bool* in_flight) {
  *in_flight = false;
  HOIST_RETURN_IF_ERROR(all_gather.start(block, chunk).WithContext(what));
  if (!all_gather.poll) return Status::Ok();
  Status waited = WaitForExchange(all_gather, options, landed, rank, world, what);
  *in_flight = !waited.ok();
  return waited;
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

// What every rank must agree on before gathering: which tensors the flat block holds, where,
// from which model (names, types, shapes, sizes and places in their files), in what chunks.
RankLayout LayoutOf(const TensorDirectory& dir, const RankBlock& block) {
  Xxh3Stream digest;
  auto add = [&](uint64_t value) { digest.Update(&value, sizeof value); };
  auto add_text = [&](const std::string& text) {
    add(text.size());
    digest.Update(text.data(), text.size());
  };
  for (const auto& [tensor, at] : block.flat_offset) {
    const TensorEntry& t = dir.tensors[tensor];
    add(tensor);
    add(at);
    add_text(t.name);
    add_text(t.dtype);
    add(t.shape.size());
    for (const uint64_t d : t.shape) add(d);
    add(t.nbytes);
    add(t.offset);
    add(dir.files[t.file].size);
  }
  return {digest.Digest(), block.chunk, block.flat_bytes};
}

// This rank's own share, read: its slices and its chunk of the flat block, in one block.
struct RankShare {
  RankBlock block;
  void* memory = nullptr;
  LoadReport report;
};

Result<RankShare> LoadShare(const TensorDirectory& dir,
                            const std::shared_ptr<CheckedDevice>& device,
                            const std::vector<TensorRegion>& cut, uint32_t rank, uint32_t world,
                            const LoadOptions& options, std::vector<TensorRegion>* mine) {
  RankShare share;
  HOIST_ASSIGN_OR_RETURN(share.block, LayOutRank(dir, cut, rank, world, mine));
  HOIST_ASSIGN_OR_RETURN(share.memory, device->AllocateDevice(share.block.bytes()));
  share.report.device = device->name();
  const std::vector<TensorRegion> reads =
      RankReads(dir, share.block, *mine, rank, static_cast<unsigned char*>(share.memory));
  if (reads.empty()) return share;
  auto regions = LoadRegions(dir, device, reads, options);
  if (!regions.ok()) {
    // A load that could not stop its copies into the block (a stalled GPU) left it to them:
    // freeing it could let them write into memory handed out again.
    if (device->free_on_destroy()) (void)device->FreeDevice(share.memory);
    return regions.status();
  }
  share.report = (*regions)->report;
  return share;
}

Status KeptForTheExchange(const Status& s, uint64_t bytes) {
  return {s.code(), s.message() + "; this rank's block (" + FormatBytes(bytes) +
                        ") stays allocated until the process ends: the exchange may still "
                        "write into it"};
}

// Tells every other rank this rank's verdict for `step` and reads theirs: OK when every rank
// succeeded alike. *in_flight: the exchange ended unfinished (stalled, cancelled, failed) and
// may still write into the verdicts' block.
Status Agree(RankVerdictBlock& verdicts, RankStep step, const Status& mine,
             const RankLayout& layout, const AllGather& all_gather, const LoadOptions& options,
             const LoadProgress& landed, uint32_t rank, uint32_t world, bool* in_flight) {
  *in_flight = false;
  const std::string what = RankStepName(step);
  HOIST_RETURN_IF_ERROR(verdicts.Fill(rank, step, mine, layout, options.stall_timeout_s));
  HOIST_RETURN_IF_ERROR(Exchange(all_gather, options, landed, rank, world, verdicts.device_block(),
                                 kRankVerdictBytes, what, in_flight));
  HOIST_ASSIGN_OR_RETURN(const unsigned char* records, verdicts.Read());
  return ReadRankVerdicts(records, rank, world, step, layout);
}

// A rank's exchanges with its peers once its own share was read or refused: the check before
// the all-gather, the all-gather, the check after it. An exchange that ends unfinished keeps its
// block (and, the device's free_on_destroy off, nothing this load allocated is freed behind it);
// one that failed otherwise frees the share, which nothing writes into then.
class RankExchanges {
 public:
  RankExchanges(std::shared_ptr<CheckedDevice> device, RankVerdictBlock* verdicts,
                Result<RankShare>& share, RankLayout layout, const AllGather& all_gather,
                const LoadOptions& options, uint32_t rank, uint32_t world)
      : device_(std::move(device)),
        verdicts_(verdicts),
        share_(share),
        layout_(layout),
        all_gather_(all_gather),
        options_(options),
        rank_(rank),
        world_(world) {
    if (share_.ok()) {
      const LoadReport& r = share_->report;
      landed_ = {r.tensor_bytes, r.read_bytes, r.tensor_bytes, 0};
    }
  }

  // OK when every rank, this one included, read its share with the same layout.
  Status Before() {
    Status agreed = Check(RankStep::kBeforeGather, share_.ok() ? Status::Ok() : share_.status());
    if (kept_ || share_.ok()) return agreed;
    return share_.status();  // this rank's own failure before its peers'
  }

  // The all-gather, then every rank's word that its gather finished.
  Status GatherAndAfter() {
    const RankBlock& block = share_->block;
    if (block.flat_bytes == 0) return Status::Ok();
    unsigned char* flat = static_cast<unsigned char*>(share_->memory) + block.flat_start;
    bool in_flight = false;
    Status s = Exchange(all_gather_, options_, landed_, rank_, world_, flat, block.chunk,
                        "the all-gather of the tensors every rank holds whole", &in_flight);
    if (!s.ok()) {
      if (in_flight) return Keep(s, block.bytes());
      FreeShare();
      return s;
    }
    return Check(RankStep::kAfterGather, Status::Ok());
  }

 private:
  Status Check(RankStep step, const Status& mine) {
    if (verdicts_ == nullptr) return Status::Ok();  // a rank alone
    bool in_flight = false;
    Status agreed = Agree(*verdicts_, step, mine, layout_, all_gather_, options_, landed_, rank_,
                          world_, &in_flight);
    if (!agreed.ok()) FreeShare();
    if (!in_flight) return agreed;
    verdicts_->Keep();
    return Keep(agreed, verdicts_->bytes());
  }
  void FreeShare() {
    if (!share_.ok() || share_->memory == nullptr) return;
    (void)device_->FreeDevice(share_->memory);
    share_->memory = nullptr;
  }
  Status Keep(const Status& s, uint64_t bytes) {
    kept_ = true;
    device_->set_free_on_destroy(false);
    return KeptForTheExchange(s, bytes);
  }

  std::shared_ptr<CheckedDevice> device_;
  RankVerdictBlock* verdicts_;  // null: a rank alone
  Result<RankShare>& share_;
  RankLayout layout_;
  const AllGather& all_gather_;
  const LoadOptions& options_;
  uint32_t rank_;
  uint32_t world_;
  LoadProgress landed_{};
  bool kept_ = false;
};

}  // namespace

Result<std::unique_ptr<LoadedModel>> LoadRank(
    const TensorDirectory& dir, const std::shared_ptr<CheckedDevice>& device,
    const Result<std::vector<TensorRegion>>& cut, uint32_t rank, uint32_t world,
    const AllGather& all_gather, const LoadOptions& options, std::vector<TensorRegion>* mine) {
  if (world == 0 || rank >= world) {
    return Status::InvalidArgument("rank " + std::to_string(rank) + " of " + std::to_string(world) +
                                   " is not a rank of the job");
  }
  if (!all_gather.start) return Status::InvalidArgument("rank mode needs an all-gather");
  // A rank alone has no one to agree with; every other rank takes part in the checks even
  // when its own share failed, so that its peers learn why instead of gathering its silence.
  std::unique_ptr<RankVerdictBlock> verdicts;
  if (world > 1) {
    HOIST_ASSIGN_OR_RETURN(verdicts, RankVerdictBlock::Make(device, world));
  }
  Result<RankShare> share =
      cut.ok() ? LoadShare(dir, device, cut.value(), rank, world, options, mine) : cut.status();
  // A device whose copies could not stop carries no more: the peers find this rank silent.
  if (!share.ok() && (verdicts == nullptr || !device->free_on_destroy())) return share.status();
  RankExchanges exchanges(device, verdicts.get(), share,
                          share.ok() ? LayoutOf(dir, share->block) : RankLayout{}, all_gather,
                          options, rank, world);
  HOIST_RETURN_IF_ERROR(exchanges.Before());
  HOIST_RETURN_IF_ERROR(exchanges.GatherAndAfter());
  return AdoptRankBlock(device, share->block, *mine, share->memory, std::move(share->report));
}

}  // namespace hoist
