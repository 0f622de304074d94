// Reading loaded tensors back from their devices and comparing them with the files.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "base/platform.h"
#include "base/threads.h"
#include "pipeline/file_checks.h"
#include "pipeline/loader.h"

namespace hoist {

Result<std::vector<Mismatch>> Verify(const TensorDirectory& dir, LoadedModel& model, int threads,
                                     size_t max_reported) {
  std::vector<std::unique_ptr<File>> files;
  for (const FileEntry& f : dir.files) {
    HOIST_ASSIGN_OR_RETURN(auto file, dir.source().Open(f.path, {}));
    HOIST_RETURN_IF_ERROR(CheckOpenedAsParsed(f, *file));
    files.push_back(std::move(file));
  }
  std::vector<size_t> work;
  for (size_t i = 0; i < dir.tensors.size(); ++i) {
    if (model.loaded(i) && dir.tensors[i].nbytes > 0) work.push_back(i);
  }
  std::atomic<size_t> next{0};
  std::mutex mutex;
  Status error;
  std::vector<Mismatch> mismatches;
  constexpr uint64_t kPiece = 16ull << 20;
  auto worker = [&] {
    std::vector<unsigned char> from_file(kPiece), from_device(kPiece);
    for (;;) {
      const size_t k = next.fetch_add(1);
      if (k >= work.size()) return;
      const TensorEntry& t = dir.tensors[work[k]];
      const auto* src = static_cast<const unsigned char*>(model.data(work[k]));
      for (uint64_t off = 0; off < t.nbytes; off += kPiece) {
        const uint64_t n = std::min(kPiece, t.nbytes - off);
        Status s = StopRequested().WithContext("verify");
        if (s.ok()) s = files[t.file]->ReadExact(t.offset + off, from_file.data(), n);
        if (s.ok())
          s = model.device_of(work[k]).CopyToHost(from_device.data(), src + off, n,
                                                  model.external_destinations);
        std::lock_guard<std::mutex> lock(mutex);
        if (!error.ok()) return;  // another worker failed: stop as soon as possible
        if (!s.ok()) {
          error = s;
          return;
        }
        if (std::memcmp(from_file.data(), from_device.data(), n) != 0) {
          uint64_t at = 0;
          while (from_file[at] == from_device[at]) ++at;
          if (mismatches.size() < max_reported) {
            mismatches.push_back({t.name, off + at, t.offset + off + at});
          }
          break;
        }
      }
    }
  };
  std::vector<std::thread> pool;
  for (int i = 0; i < std::max(1, threads); ++i) {
    auto thread = StartThread("a verify thread", worker);
    if (!thread.ok()) {
      if (pool.empty()) return thread.status();
      break;  // the ones running share the work
    }
    pool.push_back(std::move(thread).value());
  }
  for (std::thread& t : pool) t.join();
  // A file written to while it was compared explains a mismatch or a failed read better than
  // the device or the disk does.
  if (error.ok() || error.code() == Code::kIoError) {
    HOIST_RETURN_IF_ERROR(CheckFilesUnchanged(files, "while it was being verified"));
  }
  if (!error.ok()) return error;
  return mismatches;
}

}  // namespace hoist
