// One llama.cpp model load in this process, timed, then a fixed prompt evaluated: what
// bench/llama/device.sh runs in a fresh process per load to set hoist_llama_load beside
// llama.cpp's own loader (mmap on and off) on the same GGUF.
//   hoist_llama_load_bench load own-mmap|own-read|hoist MODEL [--ngl N] [--logits FILE]
//       one JSON line: mode, seconds (the load call alone), bytes (the model's tensors),
//       GB/s, and with --logits the prompt's last logits written to FILE (float32) and the
//       8 greedy tokens in the line
//   hoist_llama_load_bench write MODEL VOCAB --layers N [--embed E --ff F --heads H
//       --kv-heads K] [--type f16|q8_0|q4_k]
//       a llama-shaped GGUF with VOCAB's tokenizer (default: 8B's shape), its weights
//       seeded noise, written tensor by tensor (never the whole model in memory)
// Exits 1 when the load or the evaluation fails.
#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "ggml-backend.h"
#include "ggml.h"
#include "gguf.h"
#include "hoist/llama.h"
#include "llama_shape.h"

namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string Flag(int argc, char** argv, const char* name, const char* fallback) {
  for (int i = 0; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], name) == 0) return argv[i + 1];
  }
  return fallback;
}

int Load(const std::string& mode, const std::string& path, int ngl, const std::string& logits) {
  llama_model_params p = llama_model_default_params();
  p.n_gpu_layers = ngl;
  p.use_mmap = mode == "own-mmap";
  p.progress_callback = [](float, void*) { return true; };  // no dots on stderr
  const double start = Now();
  llama_model* model = mode == "hoist" ? hoist_llama_load(path.c_str(), p, nullptr)
                                       : llama_model_load_from_file(path.c_str(), p);
  const double seconds = Now() - start;
  if (model == nullptr) {
    std::fprintf(stderr, "load failed: %s\n", hoist_llama_last_error());
    return 1;
  }
  // The file's tensors (llama_model_size counts what its own loader read: 0 after hoist's).
  uint64_t bytes = 0;
  if (gguf_context* g = gguf_init_from_file(path.c_str(), {true, nullptr})) {
    for (int64_t i = 0; i < gguf_get_n_tensors(g); ++i) bytes += gguf_get_tensor_size(g, i);
    gguf_free(g);
  }
  std::string greedy;
  if (!logits.empty()) {
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 256;
    cp.n_batch = 256;
    llama_context* ctx = llama_init_from_model(model, cp);
    const llama_vocab* vocab = llama_model_get_vocab(model);
    const std::string prompt = "The quick brown fox jumps over the lazy dog because";
    std::vector<llama_token> tokens(64);
    const int n = llama_tokenize(vocab, prompt.c_str(), static_cast<int32_t>(prompt.size()),
                                 tokens.data(), 64, true, false);
    if (ctx == nullptr || n <= 0) return 1;
    llama_batch batch = llama_batch_get_one(tokens.data(), n);
    if (llama_decode(ctx, batch) != 0) return 1;
    const int n_vocab = llama_vocab_n_tokens(vocab);
    FILE* out = std::fopen(logits.c_str(), "wb");
    if (out == nullptr) return 1;
    std::fwrite(llama_get_logits_ith(ctx, -1), sizeof(float), static_cast<size_t>(n_vocab), out);
    std::fclose(out);
    for (int step = 0; step < 8; ++step) {
      const float* l = llama_get_logits_ith(ctx, -1);
      llama_token next = static_cast<llama_token>(std::max_element(l, l + n_vocab) - l);
      if (!greedy.empty()) greedy += ',';
      greedy += std::to_string(next);
      llama_batch one = llama_batch_get_one(&next, 1);
      if (llama_decode(ctx, one) != 0) return 1;
    }
    llama_free(ctx);
  }
  std::printf("{\"mode\":\"%s\",\"ngl\":%d,\"seconds\":%.4f,\"bytes\":%" PRIu64
              ",\"gb_per_s\":%.3f,\"greedy\":[%s]}\n",
              mode.c_str(), ngl, seconds, bytes, static_cast<double>(bytes) / seconds / 1e9,
              greedy.c_str());
  llama_model_free(model);
  return 0;
}

// The noise a weight gets: a cheap generator, values of about N(0, 0.02) as F32.
struct Noise {
  uint64_t state;
  float Next() {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    // Sum of four uniforms: close enough to normal for weights nobody trains.
    float sum = 0;
    for (int i = 0; i < 4; ++i) sum += static_cast<float>((state >> (i * 16)) & 0xFFFF) / 65536.0f;
    return (sum - 2.0f) * 0.035f;
  }
};

int Write(int argc, char** argv) {
  if (argc < 4) return 2;
  const std::string path = argv[2];
  LlamaShape shape;  // 8B's unless told
  shape.layers = std::atoll(Flag(argc, argv, "--layers", "32").c_str());
  shape.embed = std::atoll(Flag(argc, argv, "--embed", "4096").c_str());
  shape.feed_forward = std::atoll(Flag(argc, argv, "--ff", "14336").c_str());
  shape.heads = std::atoll(Flag(argc, argv, "--heads", "32").c_str());
  shape.kv_heads = std::atoll(Flag(argc, argv, "--kv-heads", "8").c_str());
  const std::string type_name = Flag(argc, argv, "--type", "f16");
  const ggml_type type = type_name == "q8_0"   ? GGML_TYPE_Q8_0
                         : type_name == "q4_k" ? GGML_TYPE_Q4_K
                                               : GGML_TYPE_F16;
  gguf_context* vocab = gguf_init_from_file(argv[3], {true, nullptr});
  if (vocab == nullptr) return 1;
  shape.vocab =
      static_cast<int64_t>(gguf_get_arr_n(vocab, gguf_find_key(vocab, "tokenizer.ggml.tokens")));
  gguf_context* g = gguf_init_empty();
  gguf_set_kv(g, vocab);
  SetLlamaKeys(g, shape);
  gguf_set_val_u32(g, "general.file_type", static_cast<uint32_t>(type));
  const std::vector<LlamaTensor> specs = LlamaTensors(shape);
  ggml_context* meta = ggml_init({specs.size() * ggml_tensor_overhead(), nullptr, true});
  std::vector<ggml_tensor*> tensors;
  for (const LlamaTensor& s : specs) {
    ggml_tensor* t = s.ne1 == 1 ? ggml_new_tensor_1d(meta, GGML_TYPE_F32, s.ne0)
                                : ggml_new_tensor_2d(meta, type, s.ne0, s.ne1);
    ggml_set_name(t, s.name.c_str());
    gguf_add_tensor(g, t);
    tensors.push_back(t);
  }
  if (!gguf_write_to_file(g, path.c_str(), /*only_meta=*/true)) return 1;
  FILE* out = std::fopen(path.c_str(), "ab");
  if (out == nullptr) return 1;
  const size_t data_start = gguf_get_meta_size(g);
  std::vector<float> values;
  std::vector<uint8_t> bytes;
  for (size_t i = 0; i < tensors.size(); ++i) {
    ggml_tensor* t = tensors[i];
    const size_t at = data_start + gguf_get_tensor_offset(g, static_cast<int64_t>(i));
    const long here = std::ftell(out);
    if (here < 0 || static_cast<size_t>(here) > at) return 1;
    bytes.assign(at - static_cast<size_t>(here), 0);
    std::fwrite(bytes.data(), 1, bytes.size(), out);
    values.resize(static_cast<size_t>(ggml_nelements(t)));
    bytes.resize(ggml_nbytes(t));
    // Rows in blocks over the machine's cores: an 8B model is 8e9 values to draw and quantize.
    const int64_t rows = t->ne[1];
    const int64_t workers =
        std::max<int64_t>(1, std::min<int64_t>(rows, std::thread::hardware_concurrency()));
    std::vector<std::thread> threads;
    for (int64_t w = 0; w < workers; ++w) {
      threads.emplace_back([&, w] {
        const int64_t begin = rows * w / workers;
        const int64_t end = rows * (w + 1) / workers;
        Noise noise{0x9E3779B97F4A7C15ull ^ (i * 1000003u + static_cast<uint64_t>(w) + 1)};
        const bool norm = t->type == GGML_TYPE_F32;
        float* v = values.data() + begin * t->ne[0];
        for (int64_t k = 0; k < (end - begin) * t->ne[0]; ++k) {
          v[k] = norm ? 1.0f + noise.Next() : noise.Next();
        }
        if (norm) {
          std::memcpy(bytes.data() + begin * t->ne[0] * 4, v,
                      static_cast<size_t>((end - begin) * t->ne[0]) * 4);
        } else {
          ggml_quantize_chunk(t->type, values.data(), bytes.data(), begin * t->ne[0], end - begin,
                              t->ne[0], nullptr);
        }
      });
    }
    for (std::thread& th : threads) th.join();
    std::fwrite(bytes.data(), 1, bytes.size(), out);
  }
  const bool ok = std::fclose(out) == 0;
  std::printf("{\"written\":\"%s\",\"tensors\":%zu}\n", path.c_str(), tensors.size());
  ggml_free(meta);
  gguf_free(g);
  gguf_free(vocab);
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 4 && std::strcmp(argv[1], "load") == 0) {
    llama_backend_init();
    ggml_backend_load_all();
    llama_log_set(
        [](ggml_log_level level, const char* text, void*) {
          if (level >= GGML_LOG_LEVEL_WARN || std::strncmp(text, "hoist_llama_load:", 17) == 0) {
            std::fputs(text, stderr);
          }
        },
        nullptr);
    const int rc = Load(argv[2], argv[3], std::atoi(Flag(argc, argv, "--ngl", "999").c_str()),
                        Flag(argc, argv, "--logits", ""));
    llama_backend_free();
    return rc;
  }
  if (argc >= 4 && std::strcmp(argv[1], "write") == 0) return Write(argc, argv);
  std::fputs(
      "usage: hoist_llama_load_bench load own-mmap|own-read|hoist MODEL [--ngl N] "
      "[--logits FILE]\n       hoist_llama_load_bench write MODEL VOCAB [--layers N] "
      "[--type f16|q8_0|q4_k]\n",
      stderr);
  return 2;
}
