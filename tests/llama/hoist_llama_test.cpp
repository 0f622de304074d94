// hoist_llama_load against llama.cpp's own loader on llama-shaped models with a real 32000-token
// vocabulary, written here in F16, Q8_0 and Q4_K (one as a split set): the same tensors in the
// same buffer types, every host-readable tensor byte-equal, the logits of a fixed prompt
// bit-equal and the greedy tokens equal; a corrupt file and a cancelled load give NULL and the
// reason.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "ggml.h"
#include "gguf.h"
#include "hoist/llama.h"
#include "llama-model.h"  // the snapshot's: a model's tensors by name, which llama.h does not list
#include "llama_shape.h"

namespace {

namespace fs = std::filesystem;

// Small enough for CI; the vocabulary is the real one's size.
const LlamaShape kShape{2, 256, 512, 4, 2, 32000, 256};
constexpr int64_t kVocab = 32000;

// A llama-shaped model with the vocabulary's tokenizer: norms F32 near 1, matrices of `type`
// from seeded N(0, 0.05) values. splits > 1: NAME-0000i-of-0000N.gguf files, the first holding
// the keys; returns the first file's path.
std::string WriteModel(const fs::path& dir, const std::string& name, ggml_type type, int splits,
                       unsigned seed = 7) {
  gguf_context* vocab = gguf_init_from_file(HOIST_LLAMA_VOCAB, {true, nullptr});
  EXPECT_NE(vocab, nullptr) << HOIST_LLAMA_VOCAB;
  if (vocab == nullptr) return "";
  const std::vector<LlamaTensor> specs = LlamaTensors(kShape);
  size_t bytes = 0;
  for (const LlamaTensor& s : specs) {
    bytes += ggml_row_size(s.ne1 == 1 ? GGML_TYPE_F32 : type, s.ne0) * s.ne1 + 256;
  }
  ggml_init_params params{bytes + specs.size() * ggml_tensor_overhead() * 2, nullptr, false};
  ggml_context* ctx = ggml_init(params);
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.05f);
  std::vector<ggml_tensor*> tensors;
  for (const LlamaTensor& s : specs) {
    const bool norm = s.ne1 == 1;
    const ggml_type t_type = norm ? GGML_TYPE_F32 : type;
    ggml_tensor* t = norm ? ggml_new_tensor_1d(ctx, t_type, s.ne0)
                          : ggml_new_tensor_2d(ctx, t_type, s.ne0, s.ne1);
    ggml_set_name(t, s.name.c_str());
    std::vector<float> values(static_cast<size_t>(s.ne0 * s.ne1));
    for (float& v : values) v = norm ? 1.0f + normal(rng) : normal(rng);
    if (t_type == GGML_TYPE_F32) {
      std::memcpy(t->data, values.data(), values.size() * sizeof(float));
    } else {
      ggml_quantize_chunk(t_type, values.data(), t->data, 0, s.ne1, s.ne0, nullptr);
    }
    tensors.push_back(t);
  }
  std::string first;
  const size_t per_file = (tensors.size() + splits - 1) / splits;
  for (int f = 0; f < splits; ++f) {
    gguf_context* out = gguf_init_empty();
    if (f == 0) {
      gguf_set_kv(out, vocab);
      SetLlamaKeys(out, kShape);
      gguf_set_val_u32(out, "general.file_type", static_cast<uint32_t>(type));
    }
    if (splits > 1) {
      gguf_set_val_u16(out, "split.no", static_cast<uint16_t>(f));
      gguf_set_val_u16(out, "split.count", static_cast<uint16_t>(splits));
      gguf_set_val_i32(out, "split.tensors.count", static_cast<int32_t>(tensors.size()));
    }
    for (size_t i = f * per_file; i < std::min(tensors.size(), (f + 1) * per_file); ++i) {
      gguf_add_tensor(out, tensors[i]);
    }
    char file_name[512];
    if (splits > 1) {
      llama_split_path(file_name, sizeof file_name, (dir / name).c_str(), f, splits);
    } else {
      std::snprintf(file_name, sizeof file_name, "%s.gguf", (dir / name).c_str());
    }
    EXPECT_TRUE(gguf_write_to_file(out, file_name, false)) << file_name;
    gguf_free(out);
    if (f == 0) first = file_name;
  }
  ggml_free(ctx);
  gguf_free(vocab);
  return first;
}

struct ModelFree {
  void operator()(llama_model* m) const { llama_model_free(m); }
};
using Model = std::unique_ptr<llama_model, ModelFree>;

llama_model_params CpuParams() {
  llama_model_params p = llama_model_default_params();
  p.n_gpu_layers = 0;
  return p;
}

// name -> (buffer type, bytes if host-readable)
std::map<std::string, std::pair<std::string, std::vector<uint8_t>>> TensorsOf(
    const llama_model* model) {
  std::map<std::string, std::pair<std::string, std::vector<uint8_t>>> out;
  for (const auto& [name, t] : model->tensors_by_name) {
    auto& entry = out[name];
    entry.first = t->buffer != nullptr ? ggml_backend_buffer_name(t->buffer) : "(none)";
    if (t->buffer != nullptr && ggml_backend_buffer_is_host(t->buffer)) {
      const auto* p = static_cast<const uint8_t*>(t->data);
      entry.second.assign(p, p + ggml_nbytes(t));
    }
  }
  return out;
}

struct Evaluation {
  std::vector<float> logits;  // of the prompt's last token
  std::vector<llama_token> greedy;
};

Evaluation Evaluate(llama_model* model) {
  Evaluation e;
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = 128;
  cp.n_batch = 128;
  cp.n_threads = 2;
  cp.n_threads_batch = 2;
  llama_context* ctx = llama_init_from_model(model, cp);
  EXPECT_NE(ctx, nullptr);
  if (ctx == nullptr) return e;
  const llama_vocab* vocab = llama_model_get_vocab(model);
  const std::string prompt = "The quick brown fox jumps over the lazy dog because";
  std::vector<llama_token> tokens(64);
  const int n = llama_tokenize(vocab, prompt.c_str(), static_cast<int32_t>(prompt.size()),
                               tokens.data(), static_cast<int32_t>(tokens.size()), true, false);
  EXPECT_GT(n, 4);
  tokens.resize(static_cast<size_t>(std::max(n, 0)));
  llama_batch batch = llama_batch_get_one(tokens.data(), static_cast<int32_t>(tokens.size()));
  EXPECT_EQ(llama_decode(ctx, batch), 0);
  const int n_vocab = llama_vocab_n_tokens(vocab);
  const float* logits = llama_get_logits_ith(ctx, -1);
  e.logits.assign(logits, logits + n_vocab);
  for (int step = 0; step < 8; ++step) {
    const float* l = llama_get_logits_ith(ctx, -1);
    llama_token next = static_cast<llama_token>(std::max_element(l, l + n_vocab) - l);
    e.greedy.push_back(next);
    llama_batch one = llama_batch_get_one(&next, 1);
    if (llama_decode(ctx, one) != 0) break;
  }
  llama_free(ctx);
  return e;
}

class HoistLlamaTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    llama_backend_init();
    ggml_backend_load_all();
    dir_ = new fs::path(fs::temp_directory_path() /
                        ("hoist-llama-test-" + std::to_string(::getpid())));
    fs::create_directories(*dir_);
  }
  static void TearDownTestSuite() {
    std::error_code ec;
    fs::remove_all(*dir_, ec);
    delete dir_;
    llama_backend_free();
  }
  static fs::path* dir_;
};
fs::path* HoistLlamaTest::dir_ = nullptr;

// llama.cpp's own load without mmap (whose tensors would sit in the mapped file, CPU_Mapped)
// gives the buffer types and bytes to match; its logits are also those of its default (mmap).
void ExpectSameAsLlamasOwnLoad(const std::string& path) {
  llama_model_params read = CpuParams();
  read.use_mmap = false;
  Model own(llama_model_load_from_file(path.c_str(), read));
  ASSERT_NE(own, nullptr) << path;
  Model own_mapped(llama_model_load_from_file(path.c_str(), CpuParams()));
  ASSERT_NE(own_mapped, nullptr) << path;
  Model ours(hoist_llama_load(path.c_str(), CpuParams(), nullptr));
  ASSERT_NE(ours, nullptr) << hoist_llama_last_error();
  EXPECT_EQ(llama_model_size(ours.get()), llama_model_size(own.get()));
  EXPECT_EQ(llama_model_n_params(ours.get()), llama_model_n_params(own.get()));
  const auto own_tensors = TensorsOf(own.get());
  const auto our_tensors = TensorsOf(ours.get());
  ASSERT_EQ(own_tensors.size(), our_tensors.size());
  size_t compared = 0;
  std::map<std::string, int> buffer_types;
  for (const auto& [name, own_entry] : own_tensors) {
    auto it = our_tensors.find(name);
    ASSERT_NE(it, our_tensors.end()) << name;
    EXPECT_EQ(it->second.first, own_entry.first) << name << ": buffer type";
    ++buffer_types[own_entry.first];
    if (!own_entry.second.empty()) {
      EXPECT_TRUE(it->second.second == own_entry.second) << name << ": bytes differ";
      ++compared;
    }
  }
  for (const auto& [type, count] : buffer_types) {
    std::printf("  %s: %d tensors in %s\n", fs::path(path).filename().c_str(), count, type.c_str());
  }
  EXPECT_GT(compared, 0u);
  const Evaluation a = Evaluate(own.get());
  const Evaluation b = Evaluate(ours.get());
  ASSERT_EQ(a.logits.size(), static_cast<size_t>(kVocab));
  ASSERT_EQ(b.logits.size(), a.logits.size());
  size_t differ = 0;
  for (size_t i = 0; i < a.logits.size(); ++i) {
    differ += std::memcmp(&a.logits[i], &b.logits[i], sizeof(float)) != 0;
  }
  EXPECT_EQ(differ, 0u) << "of " << a.logits.size() << " logits";
  EXPECT_EQ(a.greedy, b.greedy);
  EXPECT_EQ(a.greedy.size(), 8u);
  const Evaluation mapped = Evaluate(own_mapped.get());
  EXPECT_TRUE(mapped.logits == b.logits) << "llama.cpp's mmap load computes otherwise";
}

TEST_F(HoistLlamaTest, F16LoadsAsLlamasOwnLoad) {
  ExpectSameAsLlamasOwnLoad(WriteModel(*dir_, "f16", GGML_TYPE_F16, 1));
}

TEST_F(HoistLlamaTest, Q8_0LoadsAsLlamasOwnLoad) {
  ExpectSameAsLlamasOwnLoad(WriteModel(*dir_, "q8_0", GGML_TYPE_Q8_0, 1));
}

TEST_F(HoistLlamaTest, Q4_KSplitSetLoadsAsLlamasOwnLoad) {
  ExpectSameAsLlamasOwnLoad(WriteModel(*dir_, "q4_k", GGML_TYPE_Q4_K, 3));
}

// Q4_0: the matrices llama.cpp repacks for its faster CPU kernels (CPU_REPACK where the
// processor has them), filled through ggml_backend_tensor_set.
TEST_F(HoistLlamaTest, Q4_0LoadsAsLlamasOwnLoad) {
  ExpectSameAsLlamasOwnLoad(WriteModel(*dir_, "q4_0", GGML_TYPE_Q4_0, 1));
}

TEST_F(HoistLlamaTest, TheProgressCallbackSeesTheBytesAndCanCancel) {
  const std::string path = WriteModel(*dir_, "progress", GGML_TYPE_F16, 1);
  struct Seen {
    std::vector<float> fractions;
    int cancel_after = -1;
  } seen;
  llama_model_params p = CpuParams();
  p.progress_callback = [](float fraction, void* user) {
    auto* s = static_cast<Seen*>(user);
    s->fractions.push_back(fraction);
    return s->cancel_after < 0 || static_cast<int>(s->fractions.size()) <= s->cancel_after;
  };
  p.progress_callback_user_data = &seen;
  Model loaded(hoist_llama_load(path.c_str(), p, nullptr));
  ASSERT_NE(loaded, nullptr) << hoist_llama_last_error();
  ASSERT_FALSE(seen.fractions.empty());
  EXPECT_FLOAT_EQ(seen.fractions.back(), 1.0f);
  for (size_t i = 1; i < seen.fractions.size(); ++i) {
    EXPECT_GE(seen.fractions[i], seen.fractions[i - 1]);
  }
  seen = Seen{};
  seen.cancel_after = 0;  // false at the first call
  Model cancelled(hoist_llama_load(path.c_str(), p, nullptr));
  EXPECT_EQ(cancelled, nullptr);
  EXPECT_NE(std::string(hoist_llama_last_error()).find("cancelled"), std::string::npos)
      << hoist_llama_last_error();
}

TEST_F(HoistLlamaTest, ACorruptFileIsRefusedWithItsReason) {
  const std::string path = WriteModel(*dir_, "whole", GGML_TYPE_Q8_0, 1);
  // Cut: the last tensor's bytes end past the file's end.
  const fs::path cut = *dir_ / "cut.gguf";
  fs::copy_file(path, cut, fs::copy_options::overwrite_existing);
  fs::resize_file(cut, fs::file_size(cut) - 4096);
  EXPECT_EQ(hoist_llama_load(cut.c_str(), CpuParams(), nullptr), nullptr);
  std::string error = hoist_llama_last_error();
  EXPECT_NE(error.find(cut.string()), std::string::npos) << error;
  EXPECT_NE(error.find("invalid model"), std::string::npos) << error;

  // A tensor whose shape is not the architecture's: llama.cpp's own load refuses it too.
  gguf_context* g = gguf_init_from_file(path.c_str(), {true, nullptr});
  ASSERT_NE(g, nullptr);
  gguf_set_val_u32(g, "llama.feed_forward_length", kShape.feed_forward * 2);
  const fs::path reshaped = *dir_ / "reshaped.gguf";
  ASSERT_TRUE(gguf_write_to_file(g, reshaped.c_str(), /*only_meta=*/true));
  gguf_free(g);
  {  // the tensor data after the header, as in the original
    std::ifstream in(path, std::ios::binary);
    std::vector<char> bytes((std::istreambuf_iterator<char>(in)), {});
    gguf_context* original = gguf_init_from_file(path.c_str(), {true, nullptr});
    const size_t data = gguf_get_data_offset(original);
    gguf_free(original);
    std::ofstream out(reshaped, std::ios::binary | std::ios::app);
    out.write(bytes.data() + data, static_cast<std::streamsize>(bytes.size() - data));
  }
  EXPECT_EQ(llama_model_load_from_file(reshaped.c_str(), CpuParams()), nullptr);
  EXPECT_EQ(hoist_llama_load(reshaped.c_str(), CpuParams(), nullptr), nullptr);
  error = hoist_llama_last_error();
  EXPECT_NE(error.find("ffn_gate.weight"), std::string::npos) << error;
  EXPECT_NE(error.find("expects shape"), std::string::npos) << error;

  EXPECT_EQ(hoist_llama_load((*dir_ / "absent.gguf").c_str(), CpuParams(), nullptr), nullptr);
  error = hoist_llama_last_error();
  EXPECT_NE(error.find("absent.gguf"), std::string::npos) << error;
}

// `hoist serve PATH --device host --name NAME` in XDG_RUNTIME_DIR (the fixture's), once ready.
class Holder {
 public:
  Holder(const std::string& path, const std::string& name) {
    int out[2];
    if (::pipe(out) != 0) return;
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(out[1], 1);
      ::close(out[0]);
      ::execl(HOIST_CLI, HOIST_CLI, "serve", path.c_str(), "--device", "host", "--name",
              name.c_str(), "--json", static_cast<char*>(nullptr));
      ::_exit(127);
    }
    ::close(out[1]);
    std::string seen;
    char buf[4096];
    ssize_t n = 0;
    while (seen.find("\"ready\":true") == std::string::npos &&
           (n = ::read(out[0], buf, sizeof buf)) > 0) {
      seen.append(buf, static_cast<size_t>(n));
    }
    ::close(out[0]);
    ready_ = seen.find("\"ready\":true") != std::string::npos;
  }
  ~Holder() {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      int status = 0;
      ::waitpid(pid_, &status, 0);
    }
  }
  bool ready() const { return ready_; }

 private:
  pid_t pid_ = -1;
  bool ready_ = false;
};

// What hoist_llama_load logged, for the line that says where the bytes came from.
std::string* g_log = nullptr;
void Capture(ggml_log_level, const char* text, void*) {
  if (g_log != nullptr) g_log->append(text);
}

// A holder of the very file: its bytes come from the held memory (the log says so), the model
// computes as llama.cpp's own load of the file; the file rewritten after the holder loaded it:
// the holder's bytes are refused and the new file's are read.
TEST_F(HoistLlamaTest, TensorsComeFromAHolderOfTheSameFileOnly) {
  const std::string runtime = (*dir_ / "runtime").string();
  fs::create_directories(runtime);
  ::chmod(runtime.c_str(), 0700);
  ::setenv("XDG_RUNTIME_DIR", runtime.c_str(), 1);
  const std::string path = WriteModel(*dir_, "held", GGML_TYPE_F16, 1);
  std::string log;
  g_log = &log;
  llama_log_set(Capture, nullptr);
  {
    Holder holder(path, "held");
    ASSERT_TRUE(holder.ready());
    Model ours(hoist_llama_load(path.c_str(), CpuParams(), nullptr));
    ASSERT_NE(ours, nullptr) << hoist_llama_last_error();
    EXPECT_NE(log.find("on host from the holder of the file"), std::string::npos) << log;
    Model own(llama_model_load_from_file(path.c_str(), CpuParams()));
    ASSERT_NE(own, nullptr);
    EXPECT_TRUE(Evaluate(own.get()).logits == Evaluate(ours.get()).logits);

    // Rewritten in place with other weights (same names and shapes): the holder has the old.
    const std::string other = WriteModel(*dir_, "other", GGML_TYPE_F16, 1, 8);
    fs::copy_file(other, path, fs::copy_options::overwrite_existing);
    log.clear();
    Model fresh(hoist_llama_load(path.c_str(), CpuParams(), nullptr));
    ASSERT_NE(fresh, nullptr) << hoist_llama_last_error();
    EXPECT_EQ(log.find("from the holder of the file"), std::string::npos) << log;
    EXPECT_NE(log.find("not taken from its holder"), std::string::npos) << log;
    Model own_fresh(llama_model_load_from_file(path.c_str(), CpuParams()));
    ASSERT_NE(own_fresh, nullptr);
    EXPECT_TRUE(Evaluate(own_fresh.get()).logits == Evaluate(fresh.get()).logits);
  }
  llama_log_set(nullptr, nullptr);
  g_log = nullptr;
}

}  // namespace
