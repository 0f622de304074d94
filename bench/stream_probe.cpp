// Probes where a warm load's streaming time goes on a GPU machine, outside hoist's pipeline:
//   alloc        time to get (and free) 64 MiB of pinned staging as 16 x 4 MiB buffers, per kind
//   read         T threads pread the (cached) file into 4 MiB buffers of a kind, no copies
//   contend      pinned H2D copies alone, page-cache reads alone, then both at once
//   pipe         T threads, each with B buffers of C MiB of a kind and its own stream: pread,
//                cudaMemcpyAsync, event; the whole file into one device allocation
//   streams      pinned H2D copies of 4-64 MiB spread over 1-12 streams
//   sizes        12 threads pread the file in 2-16 MiB reads
//   pipe2        pipe variants: reads skewed off page alignment, one 8 MiB buffer per thread
//   groups       threads in groups fill one buffer together, the leader copies it whole
//   realloc      whether a load into device memory freed just before is slower: pipe (12 x 2 x
//                4 MiB) into the same allocation again, into a new one made right after freeing
//                the old, the same after a pause; pinned copies alone right after a free
//   hybrid       pipe over the first part of the file while Z threads register 64 MiB windows
//                of a read-only mapping of the rest (cudaHostRegisterReadOnly) and copy from them
// Buffer kinds: hostalloc (cudaHostAlloc), thp (anonymous mmap, MADV_HUGEPAGE, touched,
// cudaHostRegister), small (the same with MADV_NOHUGEPAGE: 4 KiB pages), pageable (malloc'd,
// read tests only). Prints one JSON object per line. Usage: hoist_stream_probe FILE [SECTIONS]
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <cuda_runtime_api.h>

namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void Check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    std::fprintf(stderr, "%s failed: %s\n", what, cudaGetErrorString(err));
    std::exit(1);
  }
}
#define CHECK(call) Check((call), #call)

constexpr uint64_t kMiB = 1ull << 20;

struct Buffer {
  std::string kind;
  void* data = nullptr;
  uint64_t bytes = 0;
};

Buffer Allocate(const std::string& kind, uint64_t bytes) {
  Buffer b{kind, nullptr, bytes};
  if (kind == "hostalloc") {
    CHECK(cudaHostAlloc(&b.data, bytes, cudaHostAllocPortable));
  } else if (kind == "pageable") {
    b.data = std::malloc(bytes);
    std::memset(b.data, 0, bytes);
  } else {
    const uint64_t huge = 2 * kMiB;
    const uint64_t rounded = (bytes + huge - 1) / huge * huge;
    void* p = ::mmap(nullptr, rounded, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      std::perror("mmap");
      std::exit(1);
    }
    ::madvise(p, rounded, kind == "thp" ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
    for (uint64_t off = 0; off < rounded; off += 4096) static_cast<char*>(p)[off] = 0;
    CHECK(cudaHostRegister(p, rounded, cudaHostRegisterPortable));
    b.data = p;
    b.bytes = rounded;
  }
  return b;
}

void Free(Buffer& b) {
  if (b.kind == "hostalloc") {
    CHECK(cudaFreeHost(b.data));
  } else if (b.kind == "pageable") {
    std::free(b.data);
  } else {
    CHECK(cudaHostUnregister(b.data));
    ::munmap(b.data, b.bytes);
  }
  b.data = nullptr;
}

void FreeAll(std::vector<std::vector<Buffer>>& buffers) {
  for (auto& v : buffers) {
    for (Buffer& b : v) Free(b);
  }
}

// Waits for a stream's copies, then destroys its events and the stream.
void Finish(cudaStream_t stream, std::vector<cudaEvent_t>& events) {
  CHECK(cudaStreamSynchronize(stream));
  for (auto& e : events) CHECK(cudaEventDestroy(e));
  CHECK(cudaStreamDestroy(stream));
}

uint64_t FileSize(int fd) { return static_cast<uint64_t>(::lseek(fd, 0, SEEK_END)); }

bool PreadAll(int fd, void* dst, uint64_t n, uint64_t at) {
  uint64_t done = 0;
  while (done < n) {
    const ssize_t got =
        ::pread(fd, static_cast<char*>(dst) + done, n - done, static_cast<off_t>(at + done));
    if (got <= 0) return false;
    done += static_cast<uint64_t>(got);
  }
  return true;
}

void Alloc() {
  for (const char* kind : {"hostalloc", "thp", "small"}) {
    std::vector<Buffer> pool;
    const double t0 = Now();
    for (int i = 0; i < 16; ++i) pool.push_back(Allocate(kind, 4 * kMiB));
    const double t1 = Now();
    for (Buffer& b : pool) Free(b);
    const double t2 = Now();
    Buffer big = Allocate(kind, 64 * kMiB);
    const double t3 = Now();
    Free(big);
    const double t4 = Now();
    std::printf(
        "{\"section\":\"alloc\",\"kind\":\"%s\",\"alloc_16x4MiB_ms\":%.2f,\"free_16x4MiB_ms\":%.2f,"
        "\"alloc_64MiB_ms\":%.2f,\"free_64MiB_ms\":%.2f}\n",
        kind, (t1 - t0) * 1e3, (t2 - t1) * 1e3, (t3 - t2) * 1e3, (t4 - t3) * 1e3);
    std::fflush(stdout);
  }
}

// Reads the whole file with `threads` readers into buffers of `kind`; returns GB/s.
double ReadAll(int fd, const std::string& kind, int threads, uint64_t chunk,
               double stop_after_s = 0) {
  const uint64_t size = FileSize(fd);
  std::atomic<uint64_t> next{0};
  std::atomic<uint64_t> bytes{0};
  std::vector<Buffer> buffers;
  for (int t = 0; t < threads; ++t) buffers.push_back(Allocate(kind, chunk));
  const double start = Now();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      for (;;) {
        if (stop_after_s > 0 && Now() - start > stop_after_s) break;
        uint64_t at = next.fetch_add(chunk);
        if (at >= size) {
          if (stop_after_s == 0) break;
          at %= size;  // keep going around until the time is up
        }
        const uint64_t n = std::min(chunk, size - at);
        if (!PreadAll(fd, buffers[t].data, n, at)) std::exit(2);
        bytes += n;
      }
    });
  }
  for (auto& t : pool) t.join();
  const double seconds = Now() - start;
  for (Buffer& b : buffers) Free(b);
  return static_cast<double>(bytes.load()) / seconds / 1e9;
}

void Read(int fd) {
  for (const char* kind : {"pageable", "hostalloc", "thp", "small"}) {
    for (int threads : {8, 12, 16}) {
      const double gbps = ReadAll(fd, kind, threads, 4 * kMiB);
      std::printf(
          "{\"section\":\"read\",\"kind\":\"%s\",\"threads\":%d,\"chunk_mib\":4,\"gbps\":%.2f}\n",
          kind, threads, gbps);
      std::fflush(stdout);
    }
  }
}

// Pinned H2D copies of `copy` bytes from one 256 MiB buffer, round robin over `nstreams`
// streams, in batches of 256 MiB, for `seconds`; GB/s.
double CopyFor(double seconds, void* device, int nstreams = 2, uint64_t copy = 4 * kMiB) {
  const uint64_t span = 256 * kMiB;
  Buffer src = Allocate("hostalloc", span);
  std::vector<cudaStream_t> streams(static_cast<size_t>(nstreams));
  for (auto& s : streams) CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  uint64_t bytes = 0;
  const double start = Now();
  while (Now() - start < seconds) {
    for (uint64_t off = 0, i = 0; off < span; off += copy, ++i) {
      CHECK(cudaMemcpyAsync(static_cast<char*>(device) + off, static_cast<char*>(src.data) + off,
                            copy, cudaMemcpyHostToDevice, streams[i % streams.size()]));
      bytes += copy;
    }
    for (auto& s : streams) CHECK(cudaStreamSynchronize(s));
  }
  const double elapsed = Now() - start;
  for (auto& s : streams) CHECK(cudaStreamDestroy(s));
  Free(src);
  return static_cast<double>(bytes) / elapsed / 1e9;
}

void Streams(void* device) {
  (void)CopyFor(0.3, device);
  for (uint64_t mib : {4, 8, 16, 64}) {
    for (int n : {1, 2, 4, 12}) {
      std::printf("{\"section\":\"streams\",\"copy_mib\":%llu,\"streams\":%d,\"gbps\":%.2f}\n",
                  static_cast<unsigned long long>(mib), n, CopyFor(1.0, device, n, mib * kMiB));
      std::fflush(stdout);
    }
  }
}

void Sizes(int fd) {
  for (uint64_t mib : {2, 4, 8, 16}) {
    const double gbps = ReadAll(fd, "thp", 12, mib * kMiB);
    std::printf(
        "{\"section\":\"sizes\",\"kind\":\"thp\",\"threads\":12,\"chunk_mib\":%llu,\"gbps\":%.2f}"
        "\n",
        static_cast<unsigned long long>(mib), gbps);
    std::fflush(stdout);
  }
}

void Contend(int fd, void* device) {
  (void)CopyFor(0.3, device);  // warm-up
  const double copy_alone = CopyFor(2.0, device);
  const double read_alone = ReadAll(fd, "pageable", 12, 4 * kMiB, 2.0);
  double copy_both = 0;
  std::thread copier([&] {
    CHECK(cudaSetDevice(0));
    copy_both = CopyFor(2.0, device);
  });
  const double read_both = ReadAll(fd, "pageable", 12, 4 * kMiB, 2.0);
  copier.join();
  std::printf(
      "{\"section\":\"contend\",\"copy_alone_gbps\":%.2f,\"read_alone_gbps\":%.2f,"
      "\"copy_with_reads_gbps\":%.2f,\"reads_with_copy_gbps\":%.2f}\n",
      copy_alone, read_alone, copy_both, read_both);
  std::fflush(stdout);
}

struct PipeResult {
  double seconds = 0;
  uint64_t bytes = 0;
};

// Streams file bytes [begin, end) to device memory at the same offsets.
PipeResult Pipe(int fd, void* device, const std::string& kind, int threads, int per_thread,
                uint64_t chunk, uint64_t begin, uint64_t end, uint64_t skew = 0) {
  std::atomic<uint64_t> next{begin};
  std::vector<std::vector<Buffer>> buffers(static_cast<size_t>(threads));
  for (auto& v : buffers) {
    for (int i = 0; i < per_thread; ++i) v.push_back(Allocate(kind, chunk));
  }
  const double start = Now();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      CHECK(cudaSetDevice(0));
      cudaStream_t stream;
      CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
      std::vector<cudaEvent_t> events(static_cast<size_t>(per_thread));
      std::vector<bool> used(static_cast<size_t>(per_thread), false);
      for (auto& e : events) CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
      for (uint64_t i = 0;; ++i) {
        const uint64_t at = next.fetch_add(chunk);
        if (at >= end) break;
        const uint64_t n = std::min(chunk, end - at);
        const size_t slot = i % static_cast<size_t>(per_thread);
        if (used[slot]) {
          while (cudaEventQuery(events[slot]) == cudaErrorNotReady) std::this_thread::yield();
        }
        Buffer& b = buffers[static_cast<size_t>(t)][slot];
        const uint64_t from = std::min(at + skew, end);
        const uint64_t m = std::min(n, end - from);
        if (m > 0 && !PreadAll(fd, b.data, m, from)) std::exit(2);
        CHECK(cudaMemcpyAsync(static_cast<char*>(device) + at, b.data, n, cudaMemcpyHostToDevice,
                              stream));
        CHECK(cudaEventRecord(events[slot], stream));
        used[slot] = true;
      }
      Finish(stream, events);
    });
  }
  for (auto& t : pool) t.join();
  const double seconds = Now() - start;
  FreeAll(buffers);
  return {seconds, end - begin};
}

void Pipe2(int fd, void* device) {
  const uint64_t size = FileSize(fd);
  struct Config {
    int threads, per_thread;
    uint64_t chunk_mib, skew;
  };
  const Config configs[] = {{12, 2, 4, 0}, {12, 2, 4, 2880}, {12, 1, 8, 0},   {16, 1, 8, 0},
                            {12, 2, 8, 0}, {12, 2, 4, 0},    {12, 2, 4, 2880}};
  for (const Config& c : configs) {
    const PipeResult r =
        Pipe(fd, device, "thp", c.threads, c.per_thread, c.chunk_mib * kMiB, 0, size, c.skew);
    std::printf(
        "{\"section\":\"pipe2\",\"threads\":%d,\"buffers_per_thread\":%d,\"chunk_mib\":%llu,"
        "\"read_skew_bytes\":%llu,\"gbps\":%.2f}\n",
        c.threads, c.per_thread, static_cast<unsigned long long>(c.chunk_mib),
        static_cast<unsigned long long>(c.skew), static_cast<double>(r.bytes) / r.seconds / 1e9);
    std::fflush(stdout);
  }
}

// Groups of `members` threads fill one buffer of members x piece bytes together, each reading
// its own piece, and the group's leader copies the whole buffer: large copies from a small set
// of buffers. Each group has `per_group` buffers and its own stream.
double Groups(int fd, void* device, int groups, int members, int per_group, uint64_t piece) {
  const uint64_t size = FileSize(fd);
  const uint64_t chunk = piece * static_cast<uint64_t>(members);
  std::atomic<uint64_t> next{0};
  struct Shared {
    std::atomic<uint64_t> seq{0};  // work generation published by the leader
    std::atomic<uint64_t> at{0};
    std::atomic<unsigned char*> buffer{nullptr};
    std::atomic<int> done{0};
    std::atomic<bool> stop{false};
  };
  std::vector<Shared> shared(static_cast<size_t>(groups));
  std::vector<std::vector<Buffer>> buffers(static_cast<size_t>(groups));
  for (auto& v : buffers) {
    for (int i = 0; i < per_group; ++i) v.push_back(Allocate("thp", chunk));
  }
  const double start = Now();
  std::vector<std::thread> pool;
  for (int g = 0; g < groups; ++g) {
    Shared& sh = shared[static_cast<size_t>(g)];
    for (int m = 1; m < members; ++m) {
      pool.emplace_back([&, m] {
        uint64_t seen = 0;
        for (;;) {
          uint64_t seq;
          while ((seq = sh.seq.load()) == seen && !sh.stop.load()) std::this_thread::yield();
          if (sh.seq.load() == seen && sh.stop.load()) break;
          seen = seq;
          const uint64_t at = sh.at.load() + piece * static_cast<uint64_t>(m);
          if (at < size && !PreadAll(fd, sh.buffer.load() + piece * static_cast<uint64_t>(m),
                                     std::min(piece, size - at), at))
            std::exit(2);
          sh.done.fetch_add(1);
        }
      });
    }
    pool.emplace_back([&, g] {
      CHECK(cudaSetDevice(0));
      cudaStream_t stream;
      CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
      std::vector<cudaEvent_t> events(static_cast<size_t>(per_group));
      std::vector<bool> used(static_cast<size_t>(per_group), false);
      for (auto& e : events) CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
      for (uint64_t i = 0;; ++i) {
        const size_t slot = i % static_cast<size_t>(per_group);
        if (used[slot]) {
          while (cudaEventQuery(events[slot]) == cudaErrorNotReady) std::this_thread::yield();
        }
        const uint64_t at = next.fetch_add(chunk);
        if (at >= size) break;
        auto* data = static_cast<unsigned char*>(buffers[static_cast<size_t>(g)][slot].data);
        sh.done.store(0);
        sh.at.store(at);
        sh.buffer.store(data);
        sh.seq.fetch_add(1);
        if (!PreadAll(fd, data, std::min(piece, size - at), at)) std::exit(2);
        while (sh.done.load() < members - 1) std::this_thread::yield();
        const uint64_t n = std::min(chunk, size - at);
        CHECK(cudaMemcpyAsync(static_cast<char*>(device) + at, data, n, cudaMemcpyHostToDevice,
                              stream));
        CHECK(cudaEventRecord(events[slot], stream));
        used[slot] = true;
      }
      sh.stop.store(true);
      Finish(stream, events);
    });
  }
  for (auto& t : pool) t.join();
  const double seconds = Now() - start;
  FreeAll(buffers);
  return static_cast<double>(size) / seconds / 1e9;
}

void GroupSweep(int fd, void* device) {
  struct Config {
    int groups, members, per_group;
    uint64_t piece_mib;
  };
  const Config configs[] = {{6, 2, 2, 4}, {7, 2, 2, 4},  {8, 2, 2, 4}, {3, 4, 2, 4}, {4, 4, 2, 4},
                            {6, 2, 2, 2}, {12, 1, 2, 4}, {6, 2, 3, 4}, {6, 2, 2, 4}, {4, 3, 2, 4}};
  for (const Config& c : configs) {
    const double gbps = Groups(fd, device, c.groups, c.members, c.per_group, c.piece_mib * kMiB);
    std::printf(
        "{\"section\":\"groups\",\"groups\":%d,\"members\":%d,\"buffers_per_group\":%d,"
        "\"piece_mib\":%llu,\"copy_mib\":%llu,\"gbps\":%.2f}\n",
        c.groups, c.members, c.per_group, static_cast<unsigned long long>(c.piece_mib),
        static_cast<unsigned long long>(c.piece_mib * static_cast<uint64_t>(c.members)), gbps);
    std::fflush(stdout);
  }
}

void PipeSweep(int fd, void* device) {
  const uint64_t size = FileSize(fd);
  struct Config {
    const char* kind;
    int threads, per_thread, chunk_mib;
  };
  const Config configs[] = {
      {"hostalloc", 12, 2, 4}, {"thp", 12, 2, 4}, {"small", 12, 2, 4}, {"thp", 16, 2, 4},
      {"thp", 12, 2, 2},       {"thp", 12, 4, 1}, {"thp", 8, 2, 4},    {"hostalloc", 12, 2, 4},
      {"thp", 12, 2, 8},       {"thp", 14, 2, 4},
  };
  for (const Config& c : configs) {
    const PipeResult r =
        Pipe(fd, device, c.kind, c.threads, c.per_thread, c.chunk_mib * kMiB, 0, size);
    std::printf(
        "{\"section\":\"pipe\",\"kind\":\"%s\",\"threads\":%d,\"buffers_per_thread\":%d,"
        "\"chunk_mib\":%d,\"seconds\":%.4f,\"gbps\":%.2f}\n",
        c.kind, c.threads, c.per_thread, c.chunk_mib, r.seconds,
        static_cast<double>(r.bytes) / r.seconds / 1e9);
    std::fflush(stdout);
  }
}

// The bench's repeated loads free their 20 GiB destination and allocate the next at once; a
// process loading once does not. Does a free just before slow the next load's copies?
void Realloc(int fd, void*& device) {
  const uint64_t size = FileSize(fd);
  auto renew = [&](double pause_s, double& free_s, double& malloc_s) {
    const double t0 = Now();
    CHECK(cudaFree(device));
    const double t1 = Now();
    CHECK(cudaMalloc(&device, size));
    const double t2 = Now();
    free_s = t1 - t0;
    malloc_s = t2 - t1;
    if (pause_s > 0) std::this_thread::sleep_for(std::chrono::duration<double>(pause_s));
  };
  auto print = [](const char* what, const char* how, int i, double gbps, double free_s,
                  double malloc_s) {
    std::printf(
        "{\"section\":\"realloc\",\"what\":\"%s\",\"destination\":\"%s\",\"i\":%d,"
        "\"gbps\":%.2f,\"free_ms\":%.2f,\"malloc_ms\":%.2f}\n",
        what, how, i, gbps, free_s * 1e3, malloc_s * 1e3);
    std::fflush(stdout);
  };
  struct Way {
    const char* name;
    bool renew;
    double pause_s;
  };
  const Way ways[] = {{"same", false, 0},          {"renewed", true, 0},
                      {"renewed+0.1s", true, 0.1}, {"renewed+0.25s", true, 0.25},
                      {"renewed+0.5s", true, 0.5}, {"renewed+1s", true, 1},
                      {"renewed+2s", true, 2},     {"renewed+3s", true, 3},
                      {"renewed", true, 0},        {"same", false, 0}};
  for (const Way& w : ways) {
    for (int i = 0; i < 2; ++i) {
      double free_s = 0, malloc_s = 0;
      if (w.renew) renew(w.pause_s, free_s, malloc_s);
      const PipeResult r = Pipe(fd, device, "thp", 12, 2, 4 * kMiB, 0, size);
      print("pipe", w.name, i, static_cast<double>(r.bytes) / r.seconds / 1e9, free_s, malloc_s);
    }
  }
  for (const Way& w :
       {Way{"same", false, 0}, Way{"renewed", true, 0}, Way{"renewed+3s", true, 3}}) {
    for (int i = 0; i < 2; ++i) {
      double free_s = 0, malloc_s = 0;
      if (w.renew) renew(w.pause_s, free_s, malloc_s);
      print("h2d_0.3s", w.name, i, CopyFor(0.3, device, 4, 16 * kMiB), free_s, malloc_s);
    }
  }
}

// Copies file bytes [begin, end) straight from the page cache: register a window of a
// read-only mapping, copy it, unregister. Returns bytes done.
void ZeroCopy(const unsigned char* mapping, void* device, std::atomic<uint64_t>& next, uint64_t end,
              uint64_t window) {
  CHECK(cudaSetDevice(0));
  cudaStream_t stream;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  for (;;) {
    const uint64_t at = next.fetch_add(window);
    if (at >= end) break;
    const uint64_t n = std::min(window, end - at);
    void* p = const_cast<unsigned char*>(mapping) + at;
    CHECK(cudaHostRegister(p, n, cudaHostRegisterReadOnly));
    CHECK(cudaMemcpyAsync(static_cast<char*>(device) + at, p, n, cudaMemcpyHostToDevice, stream));
    CHECK(cudaStreamSynchronize(stream));
    CHECK(cudaHostUnregister(p));
  }
  CHECK(cudaStreamDestroy(stream));
}

void Hybrid(int fd, void* device) {
  const uint64_t size = FileSize(fd);
  void* m = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  if (m == MAP_FAILED) {
    std::perror("mmap file");
    return;
  }
  const auto* mapping = static_cast<const unsigned char*>(m);
  for (double fraction : {1.0, 0.2, 0.3}) {
    for (int zero_threads : {1, 2}) {
      const uint64_t split = static_cast<uint64_t>(static_cast<double>(size) * (1 - fraction)) /
                             (64 * kMiB) * (64 * kMiB);
      std::atomic<uint64_t> next{split};
      const double start = Now();
      std::vector<std::thread> zero;
      for (int z = 0; z < zero_threads; ++z) {
        zero.emplace_back([&] { ZeroCopy(mapping, device, next, size, 64 * kMiB); });
      }
      const double zero_start = Now();
      PipeResult staged{};
      if (split > 0) staged = Pipe(fd, device, "thp", 12, 2, 4 * kMiB, 0, split);
      for (auto& t : zero) t.join();
      const double seconds = Now() - start;
      std::printf(
          "{\"section\":\"hybrid\",\"zero_copy_fraction\":%.2f,\"zero_copy_threads\":%d,"
          "\"staged_gbps\":%.2f,\"zero_copy_gbps\":%.2f,\"seconds\":%.4f,\"gbps\":%.2f}\n",
          fraction, zero_threads,
          staged.seconds > 0 ? static_cast<double>(staged.bytes) / staged.seconds / 1e9 : 0.0,
          static_cast<double>(size - split) / (Now() - zero_start) / 1e9, seconds,
          static_cast<double>(size) / seconds / 1e9);
      std::fflush(stdout);
    }
  }
  ::munmap(m, size);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s FILE [alloc,read,contend,pipe,hybrid]\n", argv[0]);
    return 64;
  }
  const std::string sections =
      argc > 2 ? argv[2] : "alloc,read,contend,pipe,hybrid,streams,sizes,pipe2,groups";
  const int fd = ::open(argv[1], O_RDONLY);
  if (fd < 0) {
    std::perror(argv[1]);
    return 1;
  }
  CHECK(cudaSetDevice(0));
  CHECK(cudaFree(nullptr));
  void* device = nullptr;
  CHECK(cudaMalloc(&device, FileSize(fd)));
  auto want = [&](const char* s) { return sections.find(s) != std::string::npos; };
  if (want("alloc")) Alloc();
  if (want("read")) Read(fd);
  if (want("contend")) Contend(fd, device);
  if (want("pipe")) PipeSweep(fd, device);
  if (want("hybrid")) Hybrid(fd, device);
  if (want("streams")) Streams(device);
  if (want("sizes")) Sizes(fd);
  if (want("pipe2")) Pipe2(fd, device);
  if (want("groups")) GroupSweep(fd, device);
  if (want("realloc")) Realloc(fd, device);
  CHECK(cudaFree(device));
  ::close(fd);
  return 0;
}
