// How fast the readers parse headers: a 100,000-tensor GGUF and safetensors file, and a
// 15 MB vocabulary GGUF (a 500,000-string array). Run: build/bench/readers_benchmark
#include <benchmark/benchmark.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "format/gguf.h"
#include "format/safetensors.h"
#include "io/file.h"

namespace {

std::string Scratch(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("hoist-bench-" + name)).string();
}

const std::string& ManyTensorsGguf() {
  static const std::string path = [] {
    std::vector<hoist::GgufTensorSpec> specs;
    for (int i = 0; i < 100000; ++i)
      specs.push_back({"blk." + std::to_string(i) + ".w", "F16", {8, 32}, 0});
    std::string p = Scratch("100k.gguf");
    if (!hoist::WriteGguf(p, {}, specs, nullptr).ok()) std::abort();
    return p;
  }();
  return path;
}

const std::string& ManyTensorsSafetensors() {
  static const std::string path = [] {
    std::vector<hoist::SafetensorsTensorSpec> specs;
    for (int i = 0; i < 100000; ++i)
      specs.push_back({"blk." + std::to_string(i) + ".w", "F16", {8, 32}});
    std::string p = Scratch("100k.safetensors");
    if (!hoist::WriteSafetensors(p, {}, specs, nullptr).ok()) std::abort();
    return p;
  }();
  return path;
}

const std::string& VocabularyGguf() {
  static const std::string path = [] {
    nlohmann::json tokens = nlohmann::json::array();
    nlohmann::json scores = nlohmann::json::array();
    for (int i = 0; i < 500000; ++i) {
      tokens.push_back("tok_" + std::to_string(i) + "_abcdefghij");
      scores.push_back(static_cast<float>(i) * 0.5f);
    }
    std::vector<hoist::MetadataEntry> meta = {
        {"tokenizer.ggml.tokens", "ARRAY", "STRING", tokens.size(), tokens},
        {"tokenizer.ggml.scores", "ARRAY", "FLOAT32", scores.size(), scores},
    };
    std::string p = Scratch("vocab.gguf");
    if (!hoist::WriteGguf(p, meta, {}, nullptr).ok()) std::abort();
    return p;
  }();
  return path;
}

template <typename Reader>
void ReadHeader(benchmark::State& state, const std::string& path, Reader read) {
  uint64_t tensors = 0;
  for (auto _ : state) {
    auto file = hoist::OpenFile(path);
    auto dir = read(**file);
    if (!dir.ok()) state.SkipWithError(dir.status().message().c_str());
    tensors = dir->tensors.size();
    benchmark::DoNotOptimize(dir);
  }
  state.counters["tensors"] = static_cast<double>(tensors);
  state.counters["file_MB"] = static_cast<double>(std::filesystem::file_size(path)) / 1e6;
}

void BM_Gguf100kTensors(benchmark::State& state) {
  ReadHeader(state, ManyTensorsGguf(), [](hoist::File& f) { return hoist::ReadGguf(f); });
}
void BM_Safetensors100kTensors(benchmark::State& state) {
  ReadHeader(state, ManyTensorsSafetensors(),
             [](hoist::File& f) { return hoist::ReadSafetensors(f); });
}
void BM_GgufVocabulary15MB(benchmark::State& state) {
  ReadHeader(state, VocabularyGguf(), [](hoist::File& f) { return hoist::ReadGguf(f); });
}

BENCHMARK(BM_Gguf100kTensors)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Safetensors100kTensors)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_GgufVocabulary15MB)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
