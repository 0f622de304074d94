#include <memory>

#include "pack/exponent_decode_block.h"
#include "pack/exponent_decode_gpu.h"

namespace hoist {
namespace {

constexpr uint8_t kSecret[xxh3::kSecretBytes] = HOIST_XXH3_SECRET;

// One group, as one thread block of exponent_decode.cu runs it: each step for every lane in
// turn, where the kernel has a barrier.
template <int kValueBytes>
void DecodeGroup(const GpuExponentTensor& t, block_decode::Shared& s, uint64_t group) {
  namespace bd = block_decode;
  for (int lane = 0; lane < bd::kLanes; ++lane) bd::LoadTables(t, s, group, lane, kSecret);
  bd::ScanUnitOffsets(s);
  for (int lane = 0; lane < bd::kLanes; ++lane) {
    if (!bd::DecodeUnit(t, s, group, lane)) bd::ReportBadGroup(t.first_bad_group, group);
  }
  for (int lane = 0; lane < bd::kLanes; ++lane) bd::JoinValues<kValueBytes>(t, s, group, lane);
  if (t.group_checksums == nullptr) return;
  for (int lane = 0; lane < bd::kLanes; ++lane) bd::SumStripes<kValueBytes>(t, s, group, lane);
  if (!bd::GroupMatchesChecksum<kValueBytes>(t, s, group, kSecret)) {
    bd::ReportBadGroup(t.first_bad_group, group);
  }
}

}  // namespace

void RunExponentDecodeOnHost(const GpuExponentTensor& t) {
  auto shared = std::make_unique<block_decode::Shared>();
  const uint64_t groups = block_decode::Groups(t);
  for (uint64_t g = 0; g < groups; ++g) {
    if (t.value_bytes == 2) {
      DecodeGroup<2>(t, *shared, g);
    } else {
      DecodeGroup<4>(t, *shared, g);
    }
  }
}

}  // namespace hoist
