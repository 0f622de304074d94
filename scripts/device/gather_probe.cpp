// How fast can the columns of a row-major tensor come out of the page cache? Measures, with
// T threads, reading the first `width` bytes of every `pitch`-byte row of a cached file:
//   rows  pread of whole rows (what the engine does now: twice the slice bytes for a half)
//   pvm   process_vm_readv from a read-only mapping of the file, 1024 rows per call: only the
//         slice bytes are copied, and a page that is gone comes back as EFAULT, not SIGBUS
//   prow  one pread per row (only the slice bytes, one syscall each)
//   mmap  memcpy out of a fresh mapping (reference only: SIGBUS if the file shrinks)
//   mmapp the same after madvise(MADV_POPULATE_READ) of each chunk's range
//   mmapw memcpy out of the mapping the previous mode made (its page tables already filled)
// Usage: gather_probe FILE THREADS WIDTH PITCH OFFSET MODE...   (prints GB/s of slice bytes)
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

int main(int argc, char** argv) {
  if (argc < 7) {
    std::fprintf(stderr, "usage: %s FILE THREADS WIDTH PITCH OFFSET MODE...\n", argv[0]);
    return 2;
  }
  const char* path = argv[1];
  const int threads = std::atoi(argv[2]);
  const size_t width = std::strtoull(argv[3], nullptr, 10);
  const size_t pitch = std::strtoull(argv[4], nullptr, 10);
  const size_t offset = std::strtoull(argv[5], nullptr, 10);
  int fd = open(path, O_RDONLY);
  struct stat st {};
  if (fd < 0 || fstat(fd, &st) != 0) {
    std::perror(path);
    return 1;
  }
  const size_t size = static_cast<size_t>(st.st_size);
  const size_t rows = (size - offset) / pitch;
  const size_t rows_per_chunk = std::max<size_t>(1, (8u << 20) / pitch);
  const size_t chunks = (rows + rows_per_chunk - 1) / rows_per_chunk;
  void* kept = nullptr;
  for (int m = 6; m < argc; ++m) {
    const std::string mode = argv[m];
    void* map = nullptr;
    auto t0 = std::chrono::steady_clock::now();
    if (mode == "mmapw") {
      map = kept;
      kept = nullptr;
    } else if (mode == "pvm" || mode == "mmap" || mode == "mmapp") {
      map = mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
      if (map == MAP_FAILED) {
        std::perror("mmap");
        return 1;
      }
    }
    std::atomic<size_t> next{0};
    std::atomic<bool> failed{false};
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&] {
        std::vector<unsigned char> buf(rows_per_chunk * pitch);
        std::memset(buf.data(), 1, buf.size());
        std::vector<iovec> local(1024), remote(1024);
        for (size_t c; (c = next.fetch_add(1)) < chunks;) {
          const size_t r0 = c * rows_per_chunk;
          const size_t n = std::min(rows_per_chunk, rows - r0);
          const size_t base = offset + r0 * pitch;
          if (mode == "rows") {
            size_t done = 0;
            while (done < n * pitch) {
              ssize_t got = pread(fd, buf.data() + done, n * pitch - done, base + done);
              if (got <= 0) {
                failed = true;
                return;
              }
              done += static_cast<size_t>(got);
            }
          } else if (mode == "prow") {
            for (size_t r = 0; r < n; ++r) {
              if (pread(fd, buf.data() + r * width, width, base + r * pitch) != (ssize_t)width) {
                failed = true;
                return;
              }
            }
          } else if (mode == "pvm") {
            for (size_t r = 0; r < n; r += 1024) {
              const size_t k = std::min<size_t>(1024, n - r);
              for (size_t i = 0; i < k; ++i) {
                local[i] = {buf.data() + (r + i) * width, width};
                remote[i] = {static_cast<unsigned char*>(map) + base + (r + i) * pitch, width};
              }
              ssize_t got = process_vm_readv(getpid(), local.data(), k, remote.data(), k, 0);
              if (got != static_cast<ssize_t>(k * width)) {
                std::perror("process_vm_readv");
                failed = true;
                return;
              }
            }
          } else if (mode == "mmap" || mode == "mmapp" || mode == "mmapw") {
            if (mode == "mmapp") {
              const size_t first = base / 4096 * 4096;
              if (madvise(static_cast<unsigned char*>(map) + first,
                          base + (n - 1) * pitch + width - first,
                          22 /* MADV_POPULATE_READ */) != 0) {
                std::perror("madvise");
                failed = true;
                return;
              }
            }
            for (size_t r = 0; r < n; ++r) {
              std::memcpy(buf.data() + r * width,
                          static_cast<unsigned char*>(map) + base + r * pitch, width);
            }
          } else {
            failed = true;
            return;
          }
        }
      });
    }
    for (auto& t : pool) t.join();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (map != nullptr && m + 1 < argc && std::string(argv[m + 1]) == "mmapw") {
      kept = map;
    } else if (map != nullptr) {
      munmap(map, size);
    }
    if (failed) {
      std::printf("%-5s failed\n", mode.c_str());
      continue;
    }
    const double slice = static_cast<double>(rows * width),
                 file = static_cast<double>(rows * pitch);
    std::printf(
        "%-5s threads %2d width %6zu pitch %6zu: %6.2f GB/s of slice bytes (%6.2f of file bytes) "
        "%.3f s\n",
        mode.c_str(), threads, width, pitch, slice / s / 1e9, file / s / 1e9, s);
  }
  return 0;
}
