// Rank mode's agreement: before the all-gather and after it, every rank tells every other, through
// the job's own exchange, whether its part of the load succeeded and how it laid out the tensors
// every rank holds whole. No rank returns a model unless every rank said so; a rank that failed
// is named, with its reason, in every other rank's error.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"
#include "device/checked_device.h"

namespace hoist {

// What every rank must agree on before the all-gather: the same whole tensors, the same model
// (a digest of the directory), the same chunk. All zero for a rank that failed before laying out.
struct RankLayout {
  uint64_t digest = 0;
  uint64_t chunk = 0;
  uint64_t flat_bytes = 0;
};

enum class RankStep : uint32_t { kBeforeGather = 1, kAfterGather = 2 };

// "the check before the all-gather" / "... after ...": what messages call each step.
const char* RankStepName(RankStep step);

// One rank's verdict record, as it travels in the exchange: kRankVerdictBytes each.
inline constexpr uint64_t kRankVerdictBytes = 256;

// The bytes of rank `rank`'s record (`status` OK or its failure).
void WriteRankVerdict(unsigned char* out, uint32_t rank, uint32_t world, RankStep step,
                      const Status& status, const RankLayout& layout);

// What the records of every rank (world records at `records`) say, as seen by rank `rank`
// whose own layout is `mine`: OK when every rank succeeded with the same layout; otherwise the
// first rank that failed, sent no record of this step (garbage, zeros, another load's) or laid
// out differently, named with its reason.
Status ReadRankVerdicts(const unsigned char* records, uint32_t rank, uint32_t world, RankStep step,
                        const RankLayout& mine);

// The small block on the rank's device that the records are exchanged in, and a pinned mirror
// to fill and read it. Freed when destroyed unless Keep() was called (an exchange that did not
// finish may still write into it).
class RankVerdictBlock {
 public:
  static Result<std::unique_ptr<RankVerdictBlock>> Make(std::shared_ptr<CheckedDevice> device,
                                                        uint32_t world);
  ~RankVerdictBlock();
  RankVerdictBlock(const RankVerdictBlock&) = delete;
  RankVerdictBlock& operator=(const RankVerdictBlock&) = delete;

  void* device_block() const { return block_; }
  uint64_t bytes() const { return bytes_; }
  // Puts rank's record in place and zeroes every other rank's, on the device.
  Status Fill(uint32_t rank, RankStep step, const Status& status, const RankLayout& layout,
              double timeout_s);
  // The records as the exchange left them.
  Result<const unsigned char*> Read();
  void Keep() { keep_ = true; }

 private:
  RankVerdictBlock(std::shared_ptr<CheckedDevice> device, uint32_t world)
      : device_(std::move(device)), world_(world), bytes_(kRankVerdictBytes * world) {}

  std::shared_ptr<CheckedDevice> device_;
  uint32_t world_;
  uint64_t bytes_;
  void* block_ = nullptr;
  unsigned char* mirror_ = nullptr;  // pinned
  bool keep_ = false;
};

}  // namespace hoist
