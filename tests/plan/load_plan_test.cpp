#include "plan/load_plan.h"

#include <gtest/gtest.h>

namespace hoist {
namespace {

TensorDirectory Dir(std::vector<std::pair<uint64_t, uint64_t>> ranges, uint32_t file = 0) {
  TensorDirectory d;
  d.files.push_back({"f", 1 << 30});
  for (size_t i = 0; i < ranges.size(); ++i) {
    // Appended, not "t" + to_string(i): GCC 12 at -O3 warns falsely (-Wrestrict) on the latter.
    std::string name = "t";
    name += std::to_string(i);
    d.tensors.push_back({name, "U8", {ranges[i].second}, file, ranges[i].first, ranges[i].second});
  }
  d.IndexNames();
  return d;
}

// Every byte of every tensor is covered exactly once by the plan's segments.
void ExpectExactCover(const TensorDirectory& d, const LoadPlan& plan) {
  std::vector<uint64_t> covered(d.tensors.size(), 0);
  for (const Chunk& c : plan.chunks) {
    for (const Segment& s : c.segments) {
      const TensorEntry& t = d.tensors[s.tensor];
      EXPECT_EQ(s.tensor_offset, covered[s.tensor]) << "segments out of order";
      EXPECT_EQ(c.offset + s.chunk_offset, t.offset + s.tensor_offset);
      EXPECT_LE(s.chunk_offset + s.length, c.length);
      covered[s.tensor] += s.length;
    }
  }
  for (size_t i = 0; i < d.tensors.size(); ++i) EXPECT_EQ(covered[i], d.tensors[i].nbytes);
}

TEST(LoadPlanTest, CoalescesAdjacentTensorsAndCutsChunks) {
  TensorDirectory d = Dir({{100, 1000}, {1100, 5000}, {6100, 10}, {1 << 20, 300}});
  auto plan = PlanLoad(d, {}, 4096);
  ASSERT_TRUE(plan.ok());
  // First extent [100, 6110) in two chunks, then the far tensor alone.
  ASSERT_EQ(plan->chunks.size(), 3u);
  EXPECT_EQ(plan->chunks[0].offset, 100u);
  EXPECT_EQ(plan->chunks[0].length, 4096u);
  EXPECT_EQ(plan->chunks[1].length, 6110u - 100 - 4096);
  EXPECT_EQ(plan->chunks[2].offset, 1u << 20);
  ExpectExactCover(d, *plan);
  EXPECT_EQ(plan->tensor_bytes, 6310u);
}

TEST(LoadPlanTest, DestinationsAre256ByteAligned) {
  TensorDirectory d = Dir({{0, 1}, {1, 3}, {4, 700}});
  auto plan = PlanLoad(d, {}, 1 << 20);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->device_offset, (std::vector<uint64_t>{0, 256, 512}));
  EXPECT_EQ(plan->allocation_bytes, (std::vector<uint64_t>{512u + 700}));
}

TEST(LoadPlanTest, TinyChunksAndSelection) {
  TensorDirectory d = Dir({{0, 100}, {100, 100}, {200, 100}});
  auto plan = PlanLoad(d, {true, false, true}, 7);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->tensors, (std::vector<uint32_t>{0, 2}));
  uint64_t seen = 0;
  for (const Chunk& c : plan->chunks) {
    EXPECT_LE(c.length, 7u);
    for (const Segment& s : c.segments) {
      EXPECT_NE(s.tensor, 1u);
      seen += s.length;
    }
  }
  EXPECT_EQ(seen, 200u);
}

TEST(LoadPlanTest, OverlappingTensorsEachGetTheirBytes) {
  TensorDirectory d = Dir({{0, 64}, {32, 64}});
  auto plan = PlanLoad(d, {}, 16);
  ASSERT_TRUE(plan.ok());
  ExpectExactCover(d, *plan);
}

TEST(LoadPlanTest, PlacementGivesEachDeviceItsBlockAndItsOwnChunks) {
  // Adjacent in the file, alternating devices: no chunk may carry two devices' tensors.
  TensorDirectory d = Dir({{0, 100}, {100, 300}, {400, 50}, {450, 1000}, {1450, 8}});
  Placement placement{3, {1, 0, 1, 0, 1}};  // device 2 gets nothing
  auto plan = PlanLoad(d, {}, 512, placement);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  ExpectExactCover(d, *plan);
  EXPECT_EQ(plan->device_of, (std::vector<uint32_t>{1, 0, 1, 0, 1}));
  EXPECT_EQ(plan->device_offset, (std::vector<uint64_t>{0, 0, 256, 512, 512}));
  EXPECT_EQ(plan->allocation_bytes, (std::vector<uint64_t>{512 + 1000, 512 + 8, 0}));
  EXPECT_EQ(plan->device_tensor_bytes, (std::vector<uint64_t>{1300, 158, 0}));
  ASSERT_EQ(plan->first_chunk.size(), 4u);
  EXPECT_EQ(plan->first_chunk[0], 0u);
  EXPECT_EQ(plan->first_chunk[3], plan->chunks.size());
  EXPECT_EQ(plan->first_chunk[2], plan->first_chunk[3]);  // nothing for device 2
  for (uint32_t dev = 0; dev < 3; ++dev) {
    for (size_t c = plan->first_chunk[dev]; c < plan->first_chunk[dev + 1]; ++c) {
      EXPECT_EQ(plan->chunks[c].device, dev);
      for (const Segment& s : plan->chunks[c].segments) EXPECT_EQ(plan->device_of[s.tensor], dev);
    }
  }
}

TEST(LoadPlanTest, RejectsPlacementsThatDoNotFit) {
  TensorDirectory d = Dir({{0, 100}, {100, 300}});
  EXPECT_EQ(PlanLoad(d, {}, 512, {2, {0, 2}}).status().message(),
            "the placement puts tensor 't1' on device 2; there are 2");
  EXPECT_EQ(PlanLoad(d, {}, 512, {2, {0}}).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(PlanLoad(d, {}, 512, {0, {}}).status().code(), Code::kInvalidArgument);
}

TEST(LoadPlanTest, RejectsZeroChunk) { EXPECT_FALSE(PlanLoad(Dir({{0, 1}}), {}, 0).ok()); }

}  // namespace
}  // namespace hoist
