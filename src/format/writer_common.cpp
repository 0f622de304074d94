#include "format/writer_common.h"

#include <algorithm>
#include <vector>

#include "base/units.h"

namespace hoist {

Status WriteModelFile(const std::string& path, const std::string& header, uint64_t file_size,
                      TensorDirectory& dir, const TensorFill& fill) {
  HOIST_ASSIGN_OR_RETURN(auto out, CreateWritableFile(path));
  HOIST_RETURN_IF_ERROR(out->Truncate(file_size));
  HOIST_RETURN_IF_ERROR(out->WriteAt(0, header.data(), header.size()));
  std::vector<unsigned char> piece;
  for (size_t i = 0; fill && i < dir.tensors.size(); ++i) {
    const TensorEntry& t = dir.tensors[i];
    for (uint64_t done = 0; done < t.nbytes;) {
      const uint64_t n = std::min<uint64_t>(t.nbytes - done, 16 * kMiB);
      piece.resize(n);
      if (fill(i, done, piece)) {
        HOIST_RETURN_IF_ERROR(out->WriteAt(t.offset + done, piece.data(), n));
      }
      done += n;
    }
  }
  HOIST_RETURN_IF_ERROR(out->Close());
  dir.files.push_back({path, file_size, {}});
  dir.IndexNames();
  return Status::Ok();
}

}  // namespace hoist
