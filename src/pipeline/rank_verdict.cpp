#include "pipeline/rank_verdict.h"

#include <cstring>
#include <string_view>

#include "base/units.h"

namespace hoist {
namespace {

// A record: magic, rank, world, step, status code, the layout, then the message (NUL-ended).
constexpr char kMagic[8] = {'h', 'o', 'i', 's', 't', 'R', 'V', '\1'};
constexpr size_t kRankAt = 8;
constexpr size_t kWorldAt = 12;
constexpr size_t kStepAt = 16;
constexpr size_t kCodeAt = 20;
constexpr size_t kDigestAt = 24;
constexpr size_t kChunkAt = 32;
constexpr size_t kFlatAt = 40;
constexpr size_t kMessageAt = 48;
constexpr size_t kMessageBytes = kRankVerdictBytes - kMessageAt;

template <typename T>
void Put(unsigned char* out, size_t at, T value) {
  std::memcpy(out + at, &value, sizeof value);
}
template <typename T>
T Get(const unsigned char* in, size_t at) {
  T value;
  std::memcpy(&value, in + at, sizeof value);
  return value;
}

std::string RankOf(uint32_t rank, uint32_t world) {
  return "rank " + std::to_string(rank) + " of " + std::to_string(world);
}

// One peer's record, read as a stranger's bytes: OK, or why it cannot be taken.
Status ReadOne(const unsigned char* record, uint32_t r, uint32_t world, RankStep step,
               const RankLayout& mine) {
  const std::string who = RankOf(r, world);
  if (std::memcmp(record, kMagic, sizeof kMagic) != 0 || Get<uint32_t>(record, kRankAt) != r ||
      Get<uint32_t>(record, kWorldAt) != world ||
      Get<uint32_t>(record, kStepAt) != static_cast<uint32_t>(step)) {
    return Status::DeviceError(who + " sent no record of " + RankStepName(step) +
                               " (its bytes are not this load's): the exchange did not carry it, "
                               "or that rank runs another load");
  }
  const auto* text = reinterpret_cast<const char*>(record + kMessageAt);
  const size_t length = strnlen(text, kMessageBytes);
  const uint32_t code = Get<uint32_t>(record, kCodeAt);
  if (code > static_cast<uint32_t>(Code::kInternal)) {
    return Status::DeviceError(who + "'s record of " + std::string(RankStepName(step)) +
                               " breaks its format: status " + std::to_string(code) +
                               " is none of hoist's");
  }
  if (length == kMessageBytes) {
    return Status::DeviceError(who + "'s record of " + std::string(RankStepName(step)) +
                               " breaks its format: its message has no end");
  }
  if (code != 0) {
    // A peer's words, shown as printable ASCII whatever it sent.
    std::string why(text, length);
    for (char& c : why) {
      if (c < 0x20 || c > 0x7e) c = '?';
    }
    return {static_cast<Code>(code), who + " failed its load: " + why};
  }
  const RankLayout theirs{Get<uint64_t>(record, kDigestAt), Get<uint64_t>(record, kChunkAt),
                          Get<uint64_t>(record, kFlatAt)};
  if (step == RankStep::kBeforeGather &&
      (theirs.digest != mine.digest || theirs.chunk != mine.chunk ||
       theirs.flat_bytes != mine.flat_bytes)) {
    return Status::InvalidArgument(
        who + " laid out the tensors every rank holds whole otherwise (" +
        FormatBytes(theirs.flat_bytes) + " in chunks of " + std::to_string(theirs.chunk) +
        " bytes, against " + FormatBytes(mine.flat_bytes) + " in chunks of " +
        std::to_string(mine.chunk) + " here" +
        (theirs.digest != mine.digest ? ", another model or other tensors" : "") +
        "): every rank loads the same model with the same split, shares and names");
  }
  return Status::Ok();
}

}  // namespace

const char* RankStepName(RankStep step) {
  return step == RankStep::kBeforeGather ? "the check before the all-gather"
                                         : "the check after the all-gather";
}

void WriteRankVerdict(unsigned char* out, uint32_t rank, uint32_t world, RankStep step,
                      const Status& status, const RankLayout& layout) {
  std::memset(out, 0, kRankVerdictBytes);
  std::memcpy(out, kMagic, sizeof kMagic);
  Put<uint32_t>(out, kRankAt, rank);
  Put<uint32_t>(out, kWorldAt, world);
  Put<uint32_t>(out, kStepAt, static_cast<uint32_t>(step));
  Put<uint32_t>(out, kCodeAt, static_cast<uint32_t>(status.code()));
  Put<uint64_t>(out, kDigestAt, layout.digest);
  Put<uint64_t>(out, kChunkAt, layout.chunk);
  Put<uint64_t>(out, kFlatAt, layout.flat_bytes);
  std::string_view why = status.message();
  if (why.size() > kMessageBytes - 1) why = why.substr(0, kMessageBytes - 1);
  std::memcpy(out + kMessageAt, why.data(), why.size());
}

Status ReadRankVerdicts(const unsigned char* records, uint32_t rank, uint32_t world, RankStep step,
                        const RankLayout& mine) {
  Status first;
  uint32_t more = 0;
  for (uint32_t r = 0; r < world; ++r) {
    if (r == rank) continue;
    Status s = ReadOne(records + r * kRankVerdictBytes, r, world, step, mine);
    if (s.ok()) continue;
    if (first.ok()) {
      first = std::move(s);
    } else {
      ++more;
    }
  }
  if (first.ok() || more == 0) return first;
  return {first.code(), first.message() + " (and " + std::to_string(more) + " other rank" +
                            (more == 1 ? "" : "s") + " failed as well)"};
}

Result<std::unique_ptr<RankVerdictBlock>> RankVerdictBlock::Make(
    std::shared_ptr<CheckedDevice> device, uint32_t world) {
  std::unique_ptr<RankVerdictBlock> made(new RankVerdictBlock(std::move(device), world));
  HOIST_ASSIGN_OR_RETURN(made->block_, made->device_->AllocateDevice(made->bytes_));
  HOIST_ASSIGN_OR_RETURN(void* mirror, made->device_->AllocatePinned(made->bytes_));
  made->mirror_ = static_cast<unsigned char*>(mirror);
  return made;
}

RankVerdictBlock::~RankVerdictBlock() {
  if (mirror_ != nullptr) (void)device_->ReturnPinned(mirror_, bytes_);
  if (block_ != nullptr && !keep_) (void)device_->FreeDevice(block_);
}

Status RankVerdictBlock::Fill(uint32_t rank, RankStep step, const Status& status,
                              const RankLayout& layout, double timeout_s) {
  // Every other rank's record zeroed: one the exchange did not carry reads as none.
  std::memset(mirror_, 0, bytes_);
  WriteRankVerdict(mirror_ + rank * kRankVerdictBytes, rank, world_, step, status, layout);
  HOIST_ASSIGN_OR_RETURN(auto copy, device_->CopyToDeviceAsync(block_, mirror_, bytes_, 0));
  return WaitForCopy(*copy, timeout_s);
}

Result<const unsigned char*> RankVerdictBlock::Read() {
  HOIST_RETURN_IF_ERROR(device_->CopyToHost(mirror_, block_, bytes_));
  return static_cast<const unsigned char*>(mirror_);
}

}  // namespace hoist
