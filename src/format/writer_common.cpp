#include "format/writer_common.h"

#include <algorithm>
#include <vector>

#include "base/units.h"

namespace hoist {

Status WriteTensorData(WritableFile& out, const TensorDirectory& dir, const TensorFill& fill) {
  if (!fill) return Status::Ok();
  std::vector<unsigned char> piece;
  for (size_t i = 0; i < dir.tensors.size(); ++i) {
    const TensorEntry& t = dir.tensors[i];
    for (uint64_t done = 0; done < t.nbytes;) {
      const uint64_t n = std::min<uint64_t>(t.nbytes - done, 16 * kMiB);
      piece.resize(n);
      if (fill(i, done, piece)) {
        HOIST_RETURN_IF_ERROR(out.WriteAt(t.offset + done, piece.data(), n));
      }
      done += n;
    }
  }
  return Status::Ok();
}

}  // namespace hoist
