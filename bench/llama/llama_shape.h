// What a llama-shaped GGUF holds besides its tokenizer: the architecture's keys and its tensors
// (ggml's names, ggml's dimension order), for the models hoist_llama's tests and
// hoist_llama_load_bench write.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gguf.h"

struct LlamaShape {
  int64_t layers = 32;
  int64_t embed = 4096;
  int64_t feed_forward = 14336;
  int64_t heads = 32;
  int64_t kv_heads = 8;
  int64_t vocab = 32000;
  int64_t context = 4096;
};

struct LlamaTensor {
  std::string name;
  int64_t ne0, ne1;  // ne0 the row length; ne1 1: a norm, one row of F32
};

inline std::vector<LlamaTensor> LlamaTensors(const LlamaShape& s) {
  const int64_t kv = s.embed / s.heads * s.kv_heads;
  std::vector<LlamaTensor> t = {{"token_embd.weight", s.embed, s.vocab},
                                {"output_norm.weight", s.embed, 1},
                                {"output.weight", s.embed, s.vocab}};
  for (int64_t i = 0; i < s.layers; ++i) {
    const std::string b = "blk." + std::to_string(i) + ".";
    t.push_back({b + "attn_norm.weight", s.embed, 1});
    t.push_back({b + "attn_q.weight", s.embed, s.embed});
    t.push_back({b + "attn_k.weight", s.embed, kv});
    t.push_back({b + "attn_v.weight", s.embed, kv});
    t.push_back({b + "attn_output.weight", s.embed, s.embed});
    t.push_back({b + "ffn_norm.weight", s.embed, 1});
    t.push_back({b + "ffn_gate.weight", s.embed, s.feed_forward});
    t.push_back({b + "ffn_up.weight", s.embed, s.feed_forward});
    t.push_back({b + "ffn_down.weight", s.feed_forward, s.embed});
  }
  return t;
}

inline void SetLlamaKeys(gguf_context* g, const LlamaShape& s) {
  const auto u32 = [](int64_t v) { return static_cast<uint32_t>(v); };
  gguf_set_val_str(g, "general.architecture", "llama");
  gguf_set_val_u32(g, "llama.block_count", u32(s.layers));
  gguf_set_val_u32(g, "llama.context_length", u32(s.context));
  gguf_set_val_u32(g, "llama.embedding_length", u32(s.embed));
  gguf_set_val_u32(g, "llama.feed_forward_length", u32(s.feed_forward));
  gguf_set_val_u32(g, "llama.attention.head_count", u32(s.heads));
  gguf_set_val_u32(g, "llama.attention.head_count_kv", u32(s.kv_heads));
  gguf_set_val_u32(g, "llama.rope.dimension_count", u32(s.embed / s.heads));
  gguf_set_val_f32(g, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
  gguf_set_val_u32(g, "llama.vocab_size", u32(s.vocab));
}
