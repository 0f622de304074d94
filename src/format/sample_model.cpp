#include "format/sample_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <optional>

#include "base/units.h"
#include "format/dtypes.h"
#include "format/gguf.h"
#include "format/gguf_split_name.h"
#include "format/safetensors.h"

namespace hoist {
namespace {

uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

struct SampleTensor {
  std::string name;
  std::string dtype;
  std::vector<uint64_t> shape;
};

// A llama-like layout with hidden size h, feed-forward 4h, a small vocabulary and enough
// layers to reach the target size.
std::vector<SampleTensor> Layout(const SampleSpec& spec) {
  std::vector<std::string> dtypes = spec.dtypes;
  if (dtypes.empty()) {
    dtypes = spec.format == "gguf" ? std::vector<std::string>{"F16", "Q8_0", "Q4_K"}
                                   : std::vector<std::string>{"F16", "BF16"};
  }
  // Pick h (a multiple of 256 so every block size divides rows) so that one layer is about a
  // sixteenth of the target, within 256 .. 8192.
  const uint64_t target = std::max<uint64_t>(spec.target_bytes, 1 << 20);
  uint64_t h = 256;
  while (h < 8192 && 12 * (2 * h) * (2 * h) * 2 * 16 <= target) h *= 2;
  const uint64_t ff = 4 * h;
  const uint64_t vocab = 4 * h;
  std::vector<SampleTensor> out;
  size_t next_dtype = 0;
  auto weight = [&](std::string name, std::vector<uint64_t> shape) {
    out.push_back({std::move(name), dtypes[next_dtype++ % dtypes.size()], std::move(shape)});
  };
  auto bytes_of = [&](const SampleTensor& t) -> uint64_t {
    auto b = spec.format == "gguf" ? GgmlTensorBytes(t.dtype, t.shape)
                                   : SafetensorsTensorBytes(t.dtype, t.shape);
    return b.ok() ? b.value() : 0;
  };
  weight("token_embd.weight", {vocab, h});
  uint64_t total = bytes_of(out.back());
  for (int layer = 0; total < target || layer < 1; ++layer) {
    const std::string p = "blk." + std::to_string(layer) + ".";
    const size_t first = out.size();
    out.push_back({p + "attn_norm.weight", "F32", {h}});
    weight(p + "attn_q.weight", {h, h});
    weight(p + "attn_k.weight", {h, h});
    weight(p + "attn_v.weight", {h, h});
    weight(p + "attn_output.weight", {h, h});
    out.push_back({p + "ffn_norm.weight", "F32", {h}});
    weight(p + "ffn_gate.weight", {ff, h});
    weight(p + "ffn_up.weight", {ff, h});
    weight(p + "ffn_down.weight", {h, ff});
    for (size_t i = first; i < out.size(); ++i) total += bytes_of(out[i]);
  }
  out.push_back({"output_norm.weight", "F32", {h}});
  weight("output.weight", {vocab, h});
  return out;
}

// GGUF shards are NAME-0000i-of-0000N.gguf beside path; safetensors shards are
// model-0000i-of-0000N.safetensors beside the index at path.
std::string ShardPath(const std::string& path, const SampleSpec& spec, int index) {
  if (spec.format == "gguf") {
    // The prefix of a split's name or of a ".gguf" name, else the whole path.
    std::string prefix = path;
    if (const std::optional<GgufSplitName> split = ParseGgufSplitName(path)) {
      prefix = split->prefix;
    } else if (path.ends_with(".gguf")) {
      prefix.resize(path.size() - 5);
    }
    return GgufSplitPath(prefix, index + 1, spec.shards);
  }
  char suffix[48];
  std::snprintf(suffix, sizeof suffix, "model-%05d-of-%05d.safetensors", index + 1, spec.shards);
  return (std::filesystem::path(path).parent_path() / suffix).string();
}

}  // namespace

void FillSampleBytes(uint64_t seed, size_t tensor, uint64_t offset, std::span<unsigned char> out) {
  const uint64_t key = SplitMix64(seed * 0x100000001B3ull + tensor);
  size_t i = 0;
  while (i < out.size()) {
    const uint64_t pos = offset + i;
    const uint64_t word = SplitMix64(key ^ (pos >> 3));
    const size_t lane = pos & 7;
    const size_t n = std::min<size_t>(8 - lane, out.size() - i);
    std::memcpy(out.data() + i, reinterpret_cast<const unsigned char*>(&word) + lane, n);
    i += n;
  }
}

namespace {

uint16_t Fp16Of(float f) {
  uint32_t x = 0;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const int exponent = static_cast<int>((x >> 23) & 0xff) - 127 + 15;
  uint32_t mantissa = x & 0x7fffffu;
  if (exponent <= 0) {  // subnormal or zero in f16
    if (exponent < -10) return static_cast<uint16_t>(sign);
    mantissa |= 0x800000u;
    const int shift = 14 - exponent;
    uint32_t half = mantissa >> shift;
    const uint32_t rest = mantissa & ((1u << shift) - 1);
    const uint32_t midpoint = 1u << (shift - 1);
    if (rest > midpoint || (rest == midpoint && (half & 1u) != 0)) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  if (exponent >= 31) return static_cast<uint16_t>(sign | 0x7c00u);  // |x| >= 65520: no such
  uint32_t half = (static_cast<uint32_t>(exponent) << 10) | (mantissa >> 13);
  const uint32_t rest = mantissa & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (half & 1u) != 0)) ++half;  // may carry: fine
  return static_cast<uint16_t>(sign | half);
}

uint16_t Bf16Of(float f) {
  uint32_t x = 0;
  std::memcpy(&x, &f, 4);
  x += 0x7fffu + ((x >> 16) & 1u);  // round to nearest even (no NaN among normals)
  return static_cast<uint16_t>(x >> 16);
}

}  // namespace

bool FillSampleNormals(uint64_t seed, size_t tensor, const std::string& dtype, uint64_t offset,
                       std::span<unsigned char> out) {
  const int width = dtype == "F32" ? 4 : dtype == "F16" || dtype == "BF16" ? 2 : 0;
  if (width == 0) return false;
  const uint64_t key = SplitMix64(seed * 0x100000001B3ull + tensor) ^ 0x6e6f726d616cull;
  size_t i = 0;
  while (i < out.size()) {
    const uint64_t pos = offset + i;
    const uint64_t index = pos / static_cast<uint64_t>(width);
    // Box-Muller over two uniforms from one 64-bit draw per value.
    const uint64_t draw = SplitMix64(key ^ index);
    const double u1 = (static_cast<double>(draw >> 40) + 1.0) / 16777217.0;
    const double u2 = static_cast<double>(draw & 0xffffffu) / 16777216.0;
    const auto value = static_cast<float>(0.02 * std::sqrt(-2.0 * std::log(u1)) *
                                          std::cos(6.283185307179586 * u2));
    unsigned char bytes[4];
    if (width == 4) {
      std::memcpy(bytes, &value, 4);
    } else {
      const uint16_t half = dtype == "F16" ? Fp16Of(value) : Bf16Of(value);
      std::memcpy(bytes, &half, 2);
    }
    const size_t lane = pos % static_cast<uint64_t>(width);
    const size_t n = std::min<size_t>(static_cast<size_t>(width) - lane, out.size() - i);
    std::memcpy(out.data() + i, bytes + lane, n);
    i += n;
  }
  return true;
}

namespace {

void FillSample(const SampleSpec& spec, size_t tensor, const std::string& dtype, uint64_t offset,
                std::span<unsigned char> out) {
  if (!spec.normal_values || !FillSampleNormals(spec.seed, tensor, dtype, offset, out)) {
    FillSampleBytes(spec.seed, tensor, offset, out);
  }
}

// The spec's own rules, and room for it where it goes (refused up front rather than after
// filling the disk).
Status CheckSampleSpec(const std::string& path, const SampleSpec& spec) {
  if (spec.format != "gguf" && spec.format != "safetensors") {
    return Status::InvalidArgument("unknown sample format '" + spec.format + "'");
  }
  if (spec.shards < 1 || spec.shards > 999) {
    return Status::InvalidArgument("shards must be between 1 and 999");
  }
  // A shard set is read by its index's name: written under any other, it would be read back
  // as a safetensors file.
  if (spec.format == "safetensors" && spec.shards > 1 && !path.ends_with(".index.json")) {
    return Status::InvalidArgument(path +
                                   ": a sharded safetensors sample is written as its index, "
                                   "whose name must end in .index.json "
                                   "(model.safetensors.index.json)");
  }
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  std::error_code ec;
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  if (ec) return Status::IoError(parent.string() + ": cannot create directory: " + ec.message());
  const std::filesystem::space_info space =
      std::filesystem::space(parent.empty() ? std::filesystem::path(".") : parent, ec);
  if (!ec && space.available < spec.target_bytes) {
    return Status::IoError(path + ": a sample of " + FormatBytes(spec.target_bytes) +
                           " does not fit in the " + FormatBytes(space.available) + " free there");
  }
  return Status::Ok();
}

// Shard `s` of `shards` (tensors [first, end) of the layout) written to `file`; a safetensors
// shard's tensors are named in weight_map.
Result<TensorDirectory> WriteSampleShard(const std::string& file, const SampleSpec& spec,
                                         const std::vector<SampleTensor>& layout, int s, int shards,
                                         size_t first, size_t end, nlohmann::json& weight_map) {
  auto fill = [&](size_t tensor, uint64_t offset, std::span<unsigned char> out) {
    FillSample(spec, first + tensor, layout[first + tensor].dtype, offset, out);
    return true;
  };
  if (spec.format == "gguf") {
    std::vector<MetadataEntry> meta = {
        {"general.architecture", "STRING", "", 1, "llama"},
        {"general.name", "STRING", "", 1, "hoist sample"},
    };
    if (shards > 1) {
      meta.push_back({"split.no", "UINT16", "", 1, s});
      meta.push_back({"split.count", "UINT16", "", 1, shards});
      meta.push_back({"split.tensors.count", "INT32", "", 1, layout.size()});
    }
    std::vector<GgufTensorSpec> specs;
    for (size_t i = first; i < end; ++i) {
      specs.push_back({layout[i].name, layout[i].dtype, layout[i].shape, 0});
    }
    return WriteGguf(file, meta, specs, fill);
  }
  std::vector<SafetensorsTensorSpec> specs;
  for (size_t i = first; i < end; ++i) {
    specs.push_back({layout[i].name, layout[i].dtype, layout[i].shape});
    weight_map[layout[i].name] = std::filesystem::path(file).filename().string();
  }
  return WriteSafetensors(file, {{"format", "pt"}}, specs, fill);
}

// A sharded safetensors sample's index at `path`.
Status WriteSampleIndex(const std::string& path, const TensorDirectory& whole,
                        const nlohmann::json& weight_map) {
  nlohmann::json index = {{"metadata", {{"total_size", whole.total_bytes()}}},
                          {"weight_map", weight_map}};
  const std::string text = index.dump(2);
  HOIST_ASSIGN_OR_RETURN(auto out, CreateWritableFile(path));
  HOIST_RETURN_IF_ERROR(out->WriteAt(0, text.data(), text.size()));
  return out->Close();
}

}  // namespace

Result<TensorDirectory> WriteSampleModel(const std::string& path, const SampleSpec& spec) {
  HOIST_RETURN_IF_ERROR(CheckSampleSpec(path, spec));
  const std::vector<SampleTensor> layout = Layout(spec);
  const int shards = std::min<int>(spec.shards, static_cast<int>(layout.size()));
  TensorDirectory whole;
  whole.format = spec.format;
  nlohmann::json weight_map = nlohmann::json::object();
  size_t next = 0;
  for (int s = 0; s < shards; ++s) {
    const size_t end = layout.size() * (s + 1) / shards;
    const std::string file = shards == 1 ? path : ShardPath(path, spec, s);
    HOIST_ASSIGN_OR_RETURN(TensorDirectory part,
                           WriteSampleShard(file, spec, layout, s, shards, next, end, weight_map));
    const auto base = static_cast<uint32_t>(whole.files.size());
    whole.files.push_back(part.files[0]);
    if (s == 0) {
      whole.metadata = part.metadata;
      whole.version = part.version;
    }
    for (TensorEntry& t : part.tensors) {
      t.file += base;
      whole.tensors.push_back(std::move(t));
    }
    next = end;
  }
  if (spec.format == "safetensors" && shards > 1) {
    HOIST_RETURN_IF_ERROR(WriteSampleIndex(path, whole, weight_map));
  }
  whole.IndexNames();
  return whole;
}

}  // namespace hoist
