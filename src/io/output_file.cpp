// CreateFileBeside and ReplaceWith (io/file.h): the one way hoist writes an output it names
// finished, on every platform.
#include <cstdio>
#include <filesystem>
#include <random>
#include <system_error>

#include "io/file.h"

namespace hoist {
namespace {

namespace fs = std::filesystem;

const char* KindOf(fs::file_type type) {
  switch (type) {
    case fs::file_type::directory:
      return "a directory";
    case fs::file_type::character:
      return "a character device";
    case fs::file_type::block:
      return "a block device";
    case fs::file_type::fifo:
      return "a FIFO";
    case fs::file_type::socket:
      return "a socket";
    default:
      return "not a regular file";
  }
}

// Where the target's bytes go: the target, or where it leads when it is a link; refused when
// that exists and is not a regular file.
Result<fs::path> RealTarget(const std::string& target) {
  std::error_code ec;
  fs::path real = fs::path(target);
  // Each link's target in turn (a dangling one too: the output is created where it leads).
  for (int links = 0; fs::is_symlink(fs::symlink_status(real, ec)); ++links) {
    const fs::path next = fs::read_symlink(real, ec);
    if (ec || links == 40) {
      return Status::IoError(target + ": cannot resolve the link" +
                             (ec ? ": " + ec.message() : std::string(" (a loop)")));
    }
    real = next.is_absolute() ? next : real.parent_path() / next;
  }
  const fs::file_status st = fs::status(real, ec);
  if (fs::exists(st) && !fs::is_regular_file(st)) {
    return Status::InvalidArgument(target + ": is " + KindOf(st.type()) +
                                   "; hoist writes its output to a regular file (name one)");
  }
  return real;
}

}  // namespace

Result<std::unique_ptr<WritableFile>> CreateFileBeside(const std::string& target,
                                                       std::string* temporary) {
  HOIST_ASSIGN_OR_RETURN(const fs::path real, RealTarget(target));
  std::random_device random;
  const uint64_t tag = (static_cast<uint64_t>(random()) << 32) ^ random();
  char suffix[32];
  std::snprintf(suffix, sizeof suffix, ".%016llx.partial", static_cast<unsigned long long>(tag));
  std::string name = real.filename().string();
  name.insert(name.begin(), '.');
  name.append(suffix);
  *temporary = (real.parent_path() / name).generic_string();
  return CreateWritableFile(*temporary, /*exclusive=*/true);
}

Status ReplaceWith(const std::string& temporary, const std::string& target) {
  Result<fs::path> real = RealTarget(target);  // again: the target may have changed meanwhile
  std::error_code ec;
  if (real.ok()) fs::rename(temporary, *real, ec);
  if (real.ok() && !ec) return Status::Ok();
  const std::string why = ec.message();
  fs::remove(temporary, ec);
  if (!real.ok()) return real.status();
  return Status::IoError("cannot rename " + temporary + " to " + target + ": " + why);
}

}  // namespace hoist
