#include "plan/placement/layer.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace hoist {
namespace {

TEST(LayerSplitTest, FindsTheLayerInCommonNames) {
  EXPECT_EQ(LayerIndex("blk.0.attn_q.weight"), 0);
  EXPECT_EQ(LayerIndex("blk.31.ffn_down.weight"), 31);
  EXPECT_EQ(LayerIndex("model.layers.12.self_attn.q_proj.weight"), 12);
  EXPECT_EQ(LayerIndex("transformer.h.7.attn.c_attn.weight"), 7);
  EXPECT_EQ(LayerIndex("encoder.layer.3.output.dense.weight"), 3);
  EXPECT_EQ(LayerIndex("model.blocks.5.mlp.weight"), 5);
  EXPECT_EQ(LayerIndex("token_embd.weight"), -1);
  EXPECT_EQ(LayerIndex("output.weight"), -1);
  EXPECT_EQ(LayerIndex("model.layers.x.weight"), -1);
  EXPECT_EQ(LayerIndex("model.layers.3"), -1);  // no dot after the number
  EXPECT_EQ(LayerIndex("myblk.3.weight"), -1);  // "blk." inside another word
}

// embd, 4 layers of 100 bytes each (two tensors of 50), output.
TensorDirectory Llama() {
  TensorDirectory d;
  d.files.push_back({"f", 1 << 20});
  uint64_t at = 0;
  auto add = [&](const std::string& name, uint64_t n) {
    d.tensors.push_back({name, "U8", {n}, 0, at, n});
    at += n;
  };
  add("token_embd.weight", 40);
  for (int l = 0; l < 4; ++l) {
    add("blk." + std::to_string(l) + ".attn_q.weight", 50);
    add("blk." + std::to_string(l) + ".ffn_up.weight", 50);
  }
  add("output_norm.weight", 4);
  add("output.weight", 40);
  d.IndexNames();
  return d;
}

TEST(LayerSplitTest, ConsecutiveLayersInProportionEmbeddingsFirstOutputLast) {
  const TensorDirectory d = Llama();
  auto even = SplitByLayer(d, {1, 1});
  ASSERT_TRUE(even.ok()) << even.status().ToString();
  EXPECT_EQ(even->devices, 2u);
  EXPECT_EQ(even->device_of, (std::vector<uint32_t>{0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1}));
  auto skewed = SplitByLayer(d, {3, 1});
  ASSERT_TRUE(skewed.ok());
  EXPECT_EQ(skewed->device_of, (std::vector<uint32_t>{0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1}));
  auto one = SplitByLayer(d, {5});
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->device_of, std::vector<uint32_t>(d.tensors.size(), 0));
  // More devices than layers: each layer on one device, some devices get none.
  auto many = SplitByLayer(d, {1, 1, 1, 1, 1, 1, 1, 1});
  ASSERT_TRUE(many.ok());
  for (size_t i = 1; i + 2 < d.tensors.size(); i += 2) {
    EXPECT_EQ(many->device_of[i], many->device_of[i + 1]) << "a layer split in two";
  }
  EXPECT_EQ(many->device_of.back(), 7u);
}

TEST(LayerSplitTest, RefusesSharesThatAreNotPositive) {
  const TensorDirectory d = Llama();
  EXPECT_EQ(SplitByLayer(d, {}).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(SplitByLayer(d, {1, 0}).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(SplitByLayer(d, {1, -2}).status().code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace hoist
