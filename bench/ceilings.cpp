// The machine's ceilings that hoist's loads are quoted against, measured in the same run:
//   read   parallel pread of FILE through the page cache (or O_DIRECT with --direct)
//   h2d    pinned host-to-device copies on GPU 0, timed with CUDA events after a warm-up; with
//          --gpus N, into GPUs 0..N-1 at once (one thread and pinned buffer each), the
//          aggregate over the wall time from the first start to the last end
// Prints one JSON object per line. Usage:
//   hoist_ceilings read FILE [--threads N] [--chunk-mib M] [--direct]
//   hoist_ceilings h2d [--mib-per-copy M] [--total-gib G] [--gpus N]
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#if defined(HOIST_HAVE_GPU)
#include <cuda_runtime_api.h>
#endif

namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int Read(const std::string& path, int threads, uint64_t chunk, bool direct) {
  const int fd = ::open(path.c_str(), O_RDONLY | (direct ? O_DIRECT : 0));
  if (fd < 0) {
    std::perror(path.c_str());
    return 1;
  }
  const uint64_t size = static_cast<uint64_t>(::lseek(fd, 0, SEEK_END));
  std::atomic<uint64_t> next{0};
  std::atomic<bool> failed{false};
  const double start = Now();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      void* buffer =
          ::mmap(nullptr, chunk, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      for (;;) {
        const uint64_t at = next.fetch_add(chunk);
        if (at >= size) break;
        const uint64_t want = std::min<uint64_t>(chunk, size - at);
        const uint64_t ask = direct ? (want + 4095) / 4096 * 4096 : want;
        uint64_t done = 0;
        while (done < want) {
          const ssize_t got = ::pread(fd, static_cast<char*>(buffer) + done, ask - done,
                                      static_cast<off_t>(at + done));
          if (got <= 0) {
            failed = true;
            break;
          }
          done += static_cast<uint64_t>(got);
        }
      }
      ::munmap(buffer, chunk);
    });
  }
  for (auto& t : pool) t.join();
  const double seconds = Now() - start;
  ::close(fd);
  std::printf(
      "{\"what\":\"%s\",\"file\":\"%s\",\"bytes\":%llu,\"threads\":%d,\"chunk_bytes\":%llu,"
      "\"seconds\":%.4f,\"gbps\":%.3f,\"ok\":%s}\n",
      direct ? "direct_read" : "page_cache_read", path.c_str(),
      static_cast<unsigned long long>(size), threads, static_cast<unsigned long long>(chunk),
      seconds, static_cast<double>(size) / seconds / 1e9, failed ? "false" : "true");
  return failed ? 1 : 0;
}

#if defined(HOIST_HAVE_GPU)
#define CHECK(call)                                                             \
  do {                                                                          \
    cudaError_t err_ = (call);                                                  \
    if (err_ != cudaSuccess) {                                                  \
      std::fprintf(stderr, "%s failed: %s\n", #call, cudaGetErrorString(err_)); \
      return 1;                                                                 \
    }                                                                           \
  } while (0)

int H2d(uint64_t copy_bytes, uint64_t total_bytes, int ordinal = 0,
        std::atomic<int>* ready = nullptr, int parties = 1, double* start_s = nullptr,
        double* end_s = nullptr) {
  CHECK(cudaSetDevice(ordinal));
  void* host = nullptr;
  void* device = nullptr;
  const uint64_t span = 1ull << 30;
  CHECK(cudaHostAlloc(&host, span, cudaHostAllocDefault));
  CHECK(cudaMalloc(&device, span));
  std::memset(host, 0x5A, span);
  cudaStream_t stream;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaEvent_t begin, end;
  CHECK(cudaEventCreate(&begin));
  CHECK(cudaEventCreate(&end));
  const uint64_t slots = span / copy_bytes;
  for (uint64_t i = 0; i < 8; ++i) {  // warm-up
    CHECK(cudaMemcpyAsync(static_cast<char*>(device) + (i % slots) * copy_bytes,
                          static_cast<char*>(host) + (i % slots) * copy_bytes, copy_bytes,
                          cudaMemcpyHostToDevice, stream));
  }
  CHECK(cudaStreamSynchronize(stream));
  const uint64_t copies = std::max<uint64_t>(1, total_bytes / copy_bytes);
  if (ready != nullptr) {  // every GPU starts together
    ready->fetch_add(1);
    while (ready->load() < parties) std::this_thread::yield();
  }
  if (start_s != nullptr) *start_s = Now();
  CHECK(cudaEventRecord(begin, stream));
  for (uint64_t i = 0; i < copies; ++i) {
    CHECK(cudaMemcpyAsync(static_cast<char*>(device) + (i % slots) * copy_bytes,
                          static_cast<char*>(host) + (i % slots) * copy_bytes, copy_bytes,
                          cudaMemcpyHostToDevice, stream));
  }
  CHECK(cudaEventRecord(end, stream));
  CHECK(cudaEventSynchronize(end));
  if (end_s != nullptr) *end_s = Now();
  float ms = 0;
  CHECK(cudaEventElapsedTime(&ms, begin, end));
  std::printf(
      "{\"what\":\"h2d_pinned\",\"gpu\":%d,\"copy_bytes\":%llu,\"bytes\":%llu,"
      "\"seconds\":%.5f,\"gbps\":%.3f}\n",
      ordinal, static_cast<unsigned long long>(copy_bytes),
      static_cast<unsigned long long>(copies * copy_bytes), ms / 1e3,
      static_cast<double>(copies * copy_bytes) / (ms / 1e3) / 1e9);
  CHECK(cudaFree(device));
  CHECK(cudaFreeHost(host));
  return 0;
}

// Every GPU's link at once: the ceiling a load across them is quoted against.
int H2dAll(uint64_t copy_bytes, uint64_t total_bytes, int gpus) {
  std::atomic<int> ready{0};
  std::vector<double> start(static_cast<size_t>(gpus)), end(static_cast<size_t>(gpus));
  std::vector<int> rc(static_cast<size_t>(gpus), 0);
  std::vector<std::thread> threads;
  for (int g = 0; g < gpus; ++g) {
    threads.emplace_back([&, g] {
      const auto i = static_cast<size_t>(g);
      rc[i] = H2d(copy_bytes, total_bytes, g, &ready, gpus, &start[i], &end[i]);
      if (rc[i] != 0) ready.fetch_add(gpus);  // let the others go on
    });
  }
  for (auto& t : threads) t.join();
  for (int r : rc) {
    if (r != 0) return r;
  }
  const double seconds =
      *std::max_element(end.begin(), end.end()) - *std::min_element(start.begin(), start.end());
  const uint64_t bytes =
      static_cast<uint64_t>(gpus) * std::max<uint64_t>(1, total_bytes / copy_bytes) * copy_bytes;
  std::printf(
      "{\"what\":\"h2d_pinned_all\",\"gpus\":%d,\"bytes\":%llu,\"seconds\":%.5f,"
      "\"gbps\":%.3f}\n",
      gpus, static_cast<unsigned long long>(bytes), seconds,
      static_cast<double>(bytes) / seconds / 1e9);
  return 0;
}
#endif

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: %s read FILE [--threads N] [--chunk-mib M] [--direct] | h2d "
                 "[--mib-per-copy M] [--total-gib G] [--gpus N]\n",
                 argv[0]);
    return 2;
  }
  const std::string mode = argv[1];
  int threads = 8;
  uint64_t chunk = 8ull << 20;
  bool direct = false;
  // Read only by the GPU mode: a build without one sets them all the same.
  [[maybe_unused]] uint64_t copy = 64ull << 20;
  [[maybe_unused]] uint64_t total = 8ull << 30;
  [[maybe_unused]] int gpus = 1;
  std::string path;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--threads" && i + 1 < argc)
      threads = std::atoi(argv[++i]);
    else if (a == "--chunk-mib" && i + 1 < argc)
      chunk = std::strtoull(argv[++i], nullptr, 10) << 20;
    else if (a == "--direct")
      direct = true;
    else if (a == "--mib-per-copy" && i + 1 < argc)
      copy = std::strtoull(argv[++i], nullptr, 10) << 20;
    else if (a == "--total-gib" && i + 1 < argc)
      total = std::strtoull(argv[++i], nullptr, 10) << 30;
    else if (a == "--gpus" && i + 1 < argc)
      gpus = std::atoi(argv[++i]);
    else
      path = a;
  }
  if (mode == "read") return Read(path, threads, chunk, direct);
#if defined(HOIST_HAVE_GPU)
  if (mode == "h2d") return gpus > 1 ? H2dAll(copy, total, gpus) : H2d(copy, total);
#endif
  std::fprintf(stderr, "unknown or unavailable mode %s\n", mode.c_str());
  return 2;
}
