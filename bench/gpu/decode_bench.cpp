// The packed form's GPU decoder alone, on the device (docs/PERFORMANCE.md, "Packed models"):
// every coded tensor of a .hoistpack file is copied to the GPU once, decoded there (warm-up,
// then timed with events over several passes), and its bytes compared with what hoist's CPU
// reader decodes, byte for byte. The pinned host-to-device copy is measured in the same run:
// the decoder must outrun the link for a packed load to be bounded by the link alone.
// Usage: hoist_decode_bench FILE.hoistpack [PASSES]
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "format/model.h"
#include "pack/exponent_code.h"
#include "pack/exponent_decode_gpu.h"

namespace {

void Check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "hoist_decode_bench: %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

std::vector<uint8_t> ReadRange(std::ifstream& in, const nlohmann::json& range) {
  const uint64_t begin = range[0].get<uint64_t>();
  const uint64_t end = range[1].get<uint64_t>();
  std::vector<uint8_t> bytes(end - begin);
  in.seekg(static_cast<std::streamoff>(begin));
  in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!in) {
    std::fprintf(stderr, "hoist_decode_bench: cannot read bytes %llu-%llu\n",
                 static_cast<unsigned long long>(begin), static_cast<unsigned long long>(end));
    std::exit(1);
  }
  return bytes;
}

template <typename T>
T* ToDevice(const std::vector<T>& host, size_t slack = 0) {
  void* p = nullptr;
  Check(cudaMalloc(&p, host.size() * sizeof(T) + slack), "cudaMalloc");
  Check(cudaMemset(p, 0, host.size() * sizeof(T) + slack), "cudaMemset");
  Check(cudaMemcpy(p, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy");
  return static_cast<T*>(p);
}

struct Tensor {
  std::string name;
  uint64_t offset = 0;  // in the decoded view
  uint64_t nbytes = 0;
  hoist::GpuExponentTensor gpu;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: hoist_decode_bench FILE.hoistpack [PASSES]\n");
    return 64;
  }
  const std::string path = argv[1];
  const int passes = argc > 2 ? std::atoi(argv[2]) : 10;
  std::ifstream in(path, std::ios::binary);
  uint64_t prologue[3] = {};
  in.read(reinterpret_cast<char*>(prologue), sizeof prologue);
  std::string text(prologue[2], '\0');
  in.seekg(static_cast<std::streamoff>(prologue[1]));
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  const nlohmann::json header = nlohmann::json::parse(text);
  auto dir = hoist::ReadModelDirectory(path);
  if (!dir.ok()) {
    std::fprintf(stderr, "hoist_decode_bench: %s\n", dir.status().message().c_str());
    return 1;
  }
  uint64_t* bad = nullptr;
  Check(cudaMalloc(reinterpret_cast<void**>(&bad), 8), "cudaMalloc");
  Check(cudaMemcpy(bad, &hoist::kNoBadGroup, 8, cudaMemcpyHostToDevice), "cudaMemcpy");
  std::vector<Tensor> tensors;
  uint64_t decoded = 0;
  uint64_t stored = 0;
  for (size_t i = 0; i < header["tensors"].size(); ++i) {
    const nlohmann::json& j = header["tensors"][i];
    if (j["stored"] != "exponent-huffman") continue;
    const nlohmann::json& s = j["sections"];
    std::vector<uint8_t> lengths = ReadRange(in, s["code_lengths"]);
    auto table = hoist::DecodingTable(lengths, j["name"].get<std::string>());
    if (!table.ok()) {
      std::fprintf(stderr, "hoist_decode_bench: %s\n", table.status().message().c_str());
      return 1;
    }
    const std::vector<uint8_t> starts = ReadRange(in, s["group_start_bits"]);
    const std::vector<uint8_t> units = ReadRange(in, s["unit_bits"]);
    const std::vector<uint8_t> checksums = ReadRange(in, s["group_checksums"]);
    const std::vector<uint8_t> coded = ReadRange(in, s["coded"]);
    const std::vector<uint8_t> rest = ReadRange(in, s["rest"]);
    Tensor t;
    t.name = j["name"];
    t.offset = dir->tensors[i].offset;
    t.nbytes = j["nbytes"];
    t.gpu.table = ToDevice(*table);
    t.gpu.group_start_bits = reinterpret_cast<const uint64_t*>(ToDevice(starts));
    t.gpu.unit_bits = reinterpret_cast<const uint16_t*>(ToDevice(units));
    // Checked as the loader checks them.
    t.gpu.group_checksums = reinterpret_cast<const uint64_t*>(ToDevice(checksums));
    t.gpu.coded = ToDevice(coded, 16);
    t.gpu.rest = ToDevice(rest);
    t.gpu.values = j["values"];
    t.gpu.value_bytes = j["value_bytes"];
    t.gpu.shift = j["shift"];
    Check(cudaMalloc(&t.gpu.out, t.nbytes), "cudaMalloc");
    t.gpu.first_bad_group = bad;
    decoded += t.nbytes;
    stored += coded.size() + rest.size() + units.size() + starts.size() * 2 + 256;
    tensors.push_back(t);
  }
  if (tensors.empty()) {
    std::fprintf(stderr, "hoist_decode_bench: %s has no coded tensor\n", path.c_str());
    return 1;
  }
  cudaStream_t stream = nullptr;
  Check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  auto pass = [&] {
    for (const Tensor& t : tensors) {
      Check(static_cast<cudaError_t>(hoist::LaunchExponentDecode(t.gpu, stream)), "launch");
    }
  };
  pass();  // warm-up, and the bytes checked
  Check(cudaStreamSynchronize(stream), "decode");
  uint64_t first_bad = 0;
  Check(cudaMemcpy(&first_bad, bad, 8, cudaMemcpyDeviceToHost), "cudaMemcpy");
  if (first_bad != hoist::kNoBadGroup) {
    std::fprintf(stderr, "hoist_decode_bench: the GPU found group %llu corrupt\n",
                 static_cast<unsigned long long>(first_bad));
    return 2;
  }
  auto file = dir->source().Open(dir->files[0].path, {});
  if (!file.ok()) return 1;
  std::vector<uint8_t> want;
  std::vector<uint8_t> got;
  for (const Tensor& t : tensors) {
    want.resize(t.nbytes);
    got.resize(t.nbytes);
    if (!(*file)->ReadExact(t.offset, want.data(), want.size()).ok()) return 1;
    Check(cudaMemcpy(got.data(), t.gpu.out, t.nbytes, cudaMemcpyDeviceToHost), "cudaMemcpy");
    if (want != got) {
      std::fprintf(stderr, "hoist_decode_bench: %s: the GPU's bytes differ from the CPU's\n",
                   t.name.c_str());
      return 5;
    }
  }
  cudaEvent_t begin = nullptr;
  cudaEvent_t end = nullptr;
  Check(cudaEventCreate(&begin), "cudaEventCreate");
  Check(cudaEventCreate(&end), "cudaEventCreate");
  Check(cudaEventRecord(begin, stream), "cudaEventRecord");
  for (int p = 0; p < passes; ++p) pass();
  Check(cudaEventRecord(end, stream), "cudaEventRecord");
  Check(cudaEventSynchronize(end), "cudaEventSynchronize");
  float decode_ms = 0;
  Check(cudaEventElapsedTime(&decode_ms, begin, end), "cudaEventElapsedTime");
  const double decode_gbps = static_cast<double>(decoded) * passes / (decode_ms / 1e3) / 1e9;

  // The link in the same run: pinned host memory to the device, 1 GiB, after a warm-up.
  const size_t link_bytes = size_t{1} << 30;
  void* pinned = nullptr;
  void* target = nullptr;
  Check(cudaMallocHost(&pinned, link_bytes), "cudaMallocHost");
  Check(cudaMalloc(&target, link_bytes), "cudaMalloc");
  std::memset(pinned, 1, link_bytes);
  Check(cudaMemcpyAsync(target, pinned, link_bytes, cudaMemcpyHostToDevice, stream), "h2d");
  Check(cudaEventRecord(begin, stream), "cudaEventRecord");
  for (int p = 0; p < 5; ++p) {
    Check(cudaMemcpyAsync(target, pinned, link_bytes, cudaMemcpyHostToDevice, stream), "h2d");
  }
  Check(cudaEventRecord(end, stream), "cudaEventRecord");
  Check(cudaEventSynchronize(end), "cudaEventSynchronize");
  float link_ms = 0;
  Check(cudaEventElapsedTime(&link_ms, begin, end), "cudaEventElapsedTime");
  const double link_gbps = static_cast<double>(link_bytes) * 5 / (link_ms / 1e3) / 1e9;
  cudaDeviceProp prop{};
  Check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  std::printf(
      "%s: %zu coded tensors, %.3f GB decoded from %.3f GB (%.1f%%), every byte equal to "
      "the CPU's\n",
      prop.name, tensors.size(), static_cast<double>(decoded) / 1e9,
      static_cast<double>(stored) / 1e9,
      100.0 * static_cast<double>(stored) / static_cast<double>(decoded));
  std::printf("decode: %.2f ms per pass, %.1f GB/s of decoded bytes (%d passes)\n",
              decode_ms / passes, decode_gbps, passes);
  std::printf("pinned H2D: %.2f GB/s; decode / link %.2fx\n", link_gbps, decode_gbps / link_gbps);
  return 0;
}
