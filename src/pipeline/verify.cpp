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
    std::vector<unsigned char> from_file;
    std::vector<unsigned char> from_device(kPiece);
    for (;;) {
      const size_t k = next.fetch_add(1);
      if (k >= work.size()) return;
      const TensorEntry& t = dir.tensors[work[k]];
      const auto* src = static_cast<const unsigned char*>(model.data(work[k]));
      // A tensor read by rows is compared a whole number of its rows at a time (one row when a
      // row is larger than a piece), each read as the file range that spans them.
      const RowStride stride = model.strides.empty() ? RowStride{} : model.strides[work[k]];
      const uint64_t width = stride.width != 0 ? stride.width : t.nbytes;
      const uint64_t pitch = stride.width != 0 ? stride.pitch : t.nbytes;
      const uint64_t piece = stride.width == 0 || width > kPiece ? kPiece : kPiece / width * width;
      for (uint64_t off = 0; off < t.nbytes; off += piece) {
        const uint64_t n = std::min(piece, t.nbytes - off);
        // Device bytes [off, off + n) are rows [first_row, last_row] of the file's, from
        // column `column` of the first.
        const uint64_t first_row = off / width;
        const uint64_t column = off % width;
        const uint64_t last_row = (off + n - 1) / width;
        const uint64_t file_begin = t.offset + first_row * pitch + column;
        const uint64_t span =
            (last_row - first_row) * pitch + (off + n - last_row * width) - column;
        from_file.resize(std::max<uint64_t>(from_file.size(), span));
        Status s = StopRequested().WithContext("verify");
        if (s.ok()) s = files[t.file]->ReadExact(file_begin, from_file.data(), span);
        if (s.ok())
          s = model.device_of(work[k]).CopyToHost(from_device.data(), src + off, n,
                                                  model.external_destinations);
        std::lock_guard<std::mutex> lock(mutex);
        if (!error.ok()) return;  // another worker failed: stop as soon as possible
        if (!s.ok()) {
          error = s;
          return;
        }
        // Row by row (one run when the tensor is contiguous).
        bool differs = false;
        for (uint64_t at = 0; at < n && !differs;) {
          const uint64_t device_pos = off + at;
          const uint64_t row = device_pos / width;
          const uint64_t in_row = device_pos % width;
          const uint64_t run = std::min(width - in_row, n - at);
          const uint64_t file_pos = (row - first_row) * pitch + in_row - column;
          if (std::memcmp(from_file.data() + file_pos, from_device.data() + at, run) != 0) {
            uint64_t i = 0;
            while (from_file[file_pos + i] == from_device[at + i]) ++i;
            if (mismatches.size() < max_reported) {
              mismatches.push_back({t.name, device_pos + i, file_begin + file_pos + i});
            }
            differs = true;
          }
          at += run;
        }
        if (differs) break;
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
