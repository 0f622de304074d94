#include "format/header_cursor.h"

#include <algorithm>
#include <cstring>

namespace hoist {

Status HeaderCursor::Read(void* dst, uint64_t n, const char* what) {
  if (n > remaining()) {
    return Invalid(position_, std::string("file ends inside ") + what + " (" + std::to_string(n) +
                                  " bytes needed, " + std::to_string(remaining()) + " left)");
  }
  auto* out = static_cast<unsigned char*>(dst);
  while (n > 0) {
    const uint64_t window_end = window_start_ + window_.size();
    if (position_ < window_start_ || position_ >= window_end) {
      const uint64_t want = std::min<uint64_t>(kWindow, remaining());
      window_.resize(want);
      window_start_ = position_;
      HOIST_RETURN_IF_ERROR(file_.ReadExact(position_, window_.data(), want));
      continue;
    }
    const uint64_t take = std::min<uint64_t>(n, window_end - position_);
    std::memcpy(out, window_.data() + (position_ - window_start_), take);
    out += take;
    position_ += take;
    n -= take;
  }
  return Status::Ok();
}

Status HeaderCursor::Skip(uint64_t n, const char* what) {
  if (n > remaining()) {
    return Invalid(position_, std::string("file ends inside ") + what);
  }
  position_ += n;
  return Status::Ok();
}

}  // namespace hoist
