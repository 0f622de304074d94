#include "plan/placement/tensor.h"
#include "plan/placement/replicate.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

namespace hoist {
namespace {

TEST(TensorSplitTest, TheBuiltInRulesCutLlamaStyleNames) {
  for (const char* name :
       {"model.layers.0.self_attn.q_proj.weight", "model.layers.3.self_attn.k_proj.weight",
        "model.layers.3.self_attn.v_proj.bias", "model.layers.1.mlp.gate_proj.weight",
        "model.layers.1.mlp.up_proj.weight", "model.embed_tokens.weight", "lm_head.weight",
        "blk.0.attn_q.weight", "blk.0.attn_k.weight", "blk.0.attn_v.weight",
        "blk.2.ffn_gate.weight", "blk.2.ffn_up.weight", "token_embd.weight", "output.weight",
        "layers.0.attention.wq.weight", "layers.0.feed_forward.w1.weight",
        "tok_embeddings.weight"}) {
    EXPECT_EQ(DefaultCut(name), Cut::kRows) << name;
  }
  for (const char* name :
       {"model.layers.0.self_attn.o_proj.weight", "model.layers.0.mlp.down_proj.weight",
        "blk.0.attn_output.weight", "blk.0.ffn_down.weight", "layers.0.attention.wo.weight",
        "layers.0.feed_forward.w2.weight"}) {
    EXPECT_EQ(DefaultCut(name), Cut::kColumns) << name;
  }
  for (const char* name :
       {"model.layers.0.input_layernorm.weight", "model.norm.weight", "blk.0.attn_norm.weight",
        "output_norm.weight", "model.layers.0.self_attn.o_proj.bias",  // adds after the sum
        "blk.0.attn_qkv.weight",  // fused: a plain row cut would mix q, k and v
        "blk.0.ffn_gate_inp.weight", "model.layers.0.self_attn.rotary_emb.inv_freq"}) {
    EXPECT_EQ(DefaultCut(name), Cut::kReplicate) << name;
  }
}

TensorDirectory Two(const std::string& dtype, std::vector<uint64_t> shape, uint64_t nbytes) {
  TensorDirectory d;
  d.files.push_back({"f", 1 << 30});
  d.tensors.push_back({"blk.0.attn_q.weight", dtype, shape, 0, 0, nbytes});
  d.tensors.push_back({"blk.0.ffn_down.weight", dtype, shape, 0, nbytes, nbytes});
  d.tensors.push_back(
      {"blk.0.attn_norm.weight", "F32", {shape.back()}, 0, 2 * nbytes, 4 * shape.back()});
  d.IndexNames();
  return d;
}

TEST(TensorSplitTest, RowsAndColumnsAreCutInProportionInWholeElements) {
  // 8 rows of 6 BF16 elements (12 bytes).
  const TensorDirectory d = Two("BF16", {8, 6}, 96);
  auto regions = CutTensors(d, ChooseCuts(d, {}), {1, 1});
  ASSERT_TRUE(regions.ok()) << regions.status().ToString();
  ASSERT_EQ(regions->size(), 6u);
  const std::vector<TensorRegion>& r = *regions;
  // q by rows: [0, 4) and [4, 8), whole rows.
  EXPECT_EQ(r[0].row_begin, 0u);
  EXPECT_EQ(r[0].row_end, 4u);
  EXPECT_EQ(r[1].row_begin, 4u);
  EXPECT_EQ(r[1].row_end, 8u);
  EXPECT_EQ(r[1].column_end - r[1].column_begin, 12u);
  EXPECT_EQ(r[1].device, 1u);
  // down by columns: bytes [0, 6) and [6, 12) of all 8 rows.
  EXPECT_EQ(r[2].row_end - r[2].row_begin, 8u);
  EXPECT_EQ(r[2].column_begin, 0u);
  EXPECT_EQ(r[2].column_end, 6u);
  EXPECT_EQ(r[3].column_begin, 6u);
  EXPECT_EQ(r[3].column_end, 12u);
  // The norm whole on both.
  EXPECT_EQ(r[4].device, 0u);
  EXPECT_EQ(r[5].device, 1u);
  EXPECT_EQ(r[5].column_end, 24u);

  // 3 to 1: rows [0, 6) and [6, 8); 6 columns as 4.5 -> 5 and 1 elements, never half of one.
  regions = CutTensors(d, ChooseCuts(d, {}), {3, 1});
  ASSERT_TRUE(regions.ok());
  EXPECT_EQ((*regions)[0].row_end, 6u);
  EXPECT_EQ((*regions)[2].column_end % 2, 0u);
  EXPECT_EQ((*regions)[3].column_end, 12u);
}

TEST(TensorSplitTest, QuantizedColumnsAreCutInWholeBlocks) {
  // Q4_K: 256 elements in 144-byte blocks; rows of 1024 elements are 4 blocks.
  const TensorDirectory d = Two("Q4_K", {4, 1024}, 4 * 576);
  auto regions = CutTensors(d, ChooseCuts(d, {}), {1, 1, 1});
  ASSERT_TRUE(regions.ok());
  uint64_t covered = 0;
  for (const TensorRegion& r : *regions) {
    if (r.tensor != 1) continue;
    EXPECT_EQ(r.column_begin % 144, 0u);
    EXPECT_EQ(r.column_end % 144, 0u);
    covered += r.column_end - r.column_begin;
  }
  EXPECT_EQ(covered, 576u);
  // Four blocks among three devices: 1, 2 and 1 (no device without one).
  EXPECT_EQ(std::count_if(regions->begin(), regions->end(),
                          [](const TensorRegion& r) { return r.tensor == 1; }),
            3);
}

TEST(TensorSplitTest, TooFewRowsOrAVectorFallBackAsDocumented) {
  // 2 rows among 4 devices: whole on each. The norm (a vector of 6) is whole on each too.
  TensorDirectory d = Two("F32", {2, 6}, 48);
  auto regions = CutTensors(d, ChooseCuts(d, {}), {1, 1, 1, 1});
  ASSERT_TRUE(regions.ok());
  for (const TensorRegion& r : *regions) {
    if (r.tensor == 0) {
      EXPECT_EQ(r.row_end - r.row_begin, 2u);
      EXPECT_EQ(r.column_end - r.column_begin, 24u);
    }
  }
  EXPECT_EQ(regions->size(), 12u);
  // A bias cut by rows is a vector cut along its one dimension.
  d.tensors[0].shape = {12};
  regions = CutTensors(d, ChooseCuts(d, {}), {1, 1});
  ASSERT_TRUE(regions.ok());
  EXPECT_EQ((*regions)[0].column_end, 24u);
  EXPECT_EQ((*regions)[1].column_begin, 24u);
}

TEST(TensorSplitTest, APlanFileOverridesTheRulesInItsOrder) {
  const TensorDirectory d = Two("F32", {8, 6}, 192);
  auto rules =
      ParseCutRules(R"({"blk.0.attn_q.*": 1, "*.weight": "columns", "*": "rows"})", "plan.json", 2);
  ASSERT_TRUE(rules.ok()) << rules.status().ToString();
  const std::vector<CutRule> cuts = ChooseCuts(d, *rules);
  EXPECT_EQ(cuts[0].cut, Cut::kOneDevice);
  EXPECT_EQ(cuts[0].device, 1u);
  EXPECT_EQ(cuts[1].cut, Cut::kColumns);
  EXPECT_EQ(cuts[2].cut, Cut::kColumns);
  auto regions = CutTensors(d, cuts, {1, 1});
  ASSERT_TRUE(regions.ok());
  EXPECT_EQ((*regions)[0].device, 1u);
  EXPECT_EQ((*regions)[0].row_end, 8u);
  EXPECT_EQ((*regions)[1].tensor, 1u);

  EXPECT_EQ(ParseCutRules(R"({"x": "sideways"})", "plan.json", 2).status().message(),
            "plan.json: \"x\": \"sideways\" is not \"rows\", \"columns\", \"replicate\" or a "
            "device index below 2");
  EXPECT_EQ(ParseCutRules(R"({"x": 2})", "plan.json", 2).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(ParseCutRules(R"(["x"])", "plan.json", 2).status().message(),
            "plan.json: a plan is one JSON object of pattern: cut");
  EXPECT_EQ(ParseCutRules("{", "plan.json", 2).status().code(), Code::kInvalidArgument);
  // Globs: '?' is one character, '*' any run, and the pattern covers the whole name.
  auto exact = ParseCutRules(R"({"blk.?.attn_q": 0, "blk.0.ffn_down.weigh": 0})", "p", 2);
  ASSERT_TRUE(exact.ok());
  for (const CutRule& c : ChooseCuts(d, *exact)) EXPECT_NE(c.cut, Cut::kOneDevice);
}

TEST(TensorSplitTest, APlanRefusesARepeatedPatternAndTooManyAndKeepsFileOrder) {
  auto twice = ParseCutRules(R"({"*.weight": "rows", "x": 0, "*.weight": "columns"})", "p.json", 2);
  EXPECT_EQ(twice.status().message(),
            "p.json: pattern \"*.weight\" is given twice (patterns are tried in file order)");
  // Every value that is no cut names its entry, whatever its JSON type.
  for (const char* value : {"null", "true", "-1", "1.5", "[1]", "{\"a\": 1}", "2"}) {
    auto bad = ParseCutRules(std::string(R"({"k": )") + value + "}", "p.json", 2);
    EXPECT_EQ(bad.status().message(), std::string("p.json: \"k\": ") +
                                          (std::string(value) == "{\"a\": 1}" ? "{...}"
                                           : std::string(value) == "[1]"      ? "[...]"
                                                                              : value) +
                                          " is not \"rows\", \"columns\", \"replicate\" or a "
                                          "device index below 2");
  }
  EXPECT_EQ(ParseCutRules(R"({"a": "rows"} {"b": 1})", "p.json", 2).status().code(),
            Code::kInvalidArgument);
  EXPECT_EQ(ParseCutRules("", "p.json", 2).status().code(), Code::kInvalidArgument);
  EXPECT_TRUE(ParseCutRules("{}", "p.json", 2).ok());
  // The most patterns a plan holds, in file order, read in one pass; one more is refused.
  std::string text = "{";
  for (size_t i = 0; i < kMaxCutRules; ++i) {
    text += (i ? ",\"p" : "\"p") + std::to_string(kMaxCutRules - i) + "\":" + std::to_string(i % 2);
  }
  auto most = ParseCutRules(text + "}", "big.json", 2);
  ASSERT_TRUE(most.ok()) << most.status().ToString();
  ASSERT_EQ(most->size(), kMaxCutRules);
  const std::string first = std::to_string(kMaxCutRules);
  EXPECT_EQ(most->front().pattern.substr(1), first);
  EXPECT_EQ(most->front().pattern[0], 'p');
  EXPECT_EQ(most->back().pattern, "p1");
  EXPECT_EQ(most->back().device, (kMaxCutRules - 1) % 2);
  auto over = ParseCutRules(text + R"(,"one more":0})", "big.json", 2);
  EXPECT_EQ(over.status().message(),
            "big.json: a plan holds at most " + std::to_string(kMaxCutRules) + " patterns");
}

TEST(TensorSplitTest, ReplicationPutsEveryTensorOnEveryDevice) {
  const TensorDirectory d = Two("F32", {8, 6}, 192);
  const std::vector<TensorRegion> regions = ReplicateTensors(d, 3);
  ASSERT_EQ(regions.size(), 9u);
  for (size_t k = 0; k < regions.size(); ++k) {
    EXPECT_EQ(regions[k].device, k % 3);
    EXPECT_EQ(regions[k].column_end, d.tensors[regions[k].tensor].nbytes);
  }
  EXPECT_EQ(CutTensors(d, ChooseCuts(d, {}), {}).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(CutTensors(d, ChooseCuts(d, {}), {1, 0}).status().code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace hoist
