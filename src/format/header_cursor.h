// Sequential reads of a file's header through a bounded window, with every length checked
// against the bytes left in the file before anything is read or allocated.
#pragma once

#include <bit>
#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "io/file.h"

namespace hoist {

static_assert(std::endian::native == std::endian::little, "hoist reads little-endian formats");

class HeaderCursor {
 public:
  explicit HeaderCursor(File& file) : file_(file) {}

  uint64_t position() const { return position_; }
  uint64_t remaining() const { return file_.size() - position_; }
  const std::string& path() const { return file_.path(); }

  // Reads n bytes. Running past the end of the file is an invalid-model error naming `what`.
  Status Read(void* dst, uint64_t n, const char* what);
  template <typename T>
  Status ReadScalar(T* out, const char* what) {
    return Read(out, sizeof(T), what);
  }
  Status Skip(uint64_t n, const char* what);

  Status Invalid(uint64_t at, const std::string& rule) const {
    return Status::InvalidModel(file_.path(), at, rule);
  }

 private:
  static constexpr uint64_t kWindow = 1 << 20;
  File& file_;
  uint64_t position_ = 0;
  std::vector<unsigned char> window_;
  uint64_t window_start_ = 0;
};

}  // namespace hoist
