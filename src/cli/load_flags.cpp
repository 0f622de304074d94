#include "cli/load_flags.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "base/units.h"

namespace hoist::cli {

CLI::Validator FiniteRange(double min, double max) {
  const std::string description =
      "NUMBER in [" + CLI::detail::to_string(min) + " - " + CLI::detail::to_string(max) + "]";
  return CLI::Validator(
      [min, max](std::string& text) -> std::string {
        errno = 0;
        char* end = nullptr;
        const double value = std::strtod(text.c_str(), &end);
        if (end == text.c_str() || *end != '\0' || errno == ERANGE) {
          return "'" + text + "' is not a number";
        }
        if (!std::isfinite(value) || value < min || value > max) {
          return "Value " + text + " not in range [" + CLI::detail::to_string(min) + " - " +
                 CLI::detail::to_string(max) + "]";
        }
        return {};
      },
      description);
}

void AddStallTimeoutFlag(CLI::App* cmd, double& seconds) {
  cmd->add_option("--stall-timeout", seconds,
                  "seconds without progress before the command fails with exit 3 (default 60)")
      ->check(FiniteRange(0.05, kMaxStallTimeoutSeconds));
}

void AddLoadSettingFlags(CLI::App* cmd, LoadSettingFlags& f, bool io_and_checksum) {
  cmd->add_option("--threads", f.threads,
                  "reader threads (default: from the machine; 16 or more over HTTP and S3)")
      ->check(CLI::Range(0, kMaxReaderThreads));
  cmd->add_option("--chunk", f.chunk,
                  "bytes per read: 4MiB, 512KiB, or a number of MiB (default 4MiB; 4KiB to 1GiB)");
  cmd->add_option("--staging", f.staging,
                  "staging budget: 256MiB, 2GiB, or a number of MiB (default: two chunks per "
                  "reader thread; at most half of the machine's memory)");
  AddStallTimeoutFlag(cmd, f.stall_timeout_s);
  if (!io_and_checksum) return;
  cmd->add_option("--io", f.io, "buffered (page cache) or direct (O_DIRECT)")
      ->check(CLI::IsMember({"buffered", "direct"}))
      ->capture_default_str();
  cmd->add_flag("--checksum", f.checksum, "XXH3-64 of every tensor over its staged bytes");
}

Result<uint64_t> ParseSizeFlag(const std::string& text, std::string_view flag) {
  if (text.empty()) return uint64_t{0};
  errno = 0;
  char* end = nullptr;
  const double mib = std::strtod(text.c_str(), &end);
  if (end != text.c_str() && *end == '\0' && errno != ERANGE) return MebibytesToBytes(mib, flag);
  auto bytes = ParseByteSize(text);
  if (!bytes.ok()) {
    return Status::InvalidArgument(std::string(flag) + " " + text +
                                   ": expected a size such as 4MiB, 512KiB, 1GB, or a number of "
                                   "MiB");
  }
  return bytes;
}

Result<LoadOptions> ToLoadOptions(const LoadSettingFlags& f) {
  LoadOptions options;
  options.threads = f.threads;
  HOIST_ASSIGN_OR_RETURN(options.chunk_bytes, ParseSizeFlag(f.chunk, "--chunk"));
  HOIST_ASSIGN_OR_RETURN(options.staging_bytes, ParseSizeFlag(f.staging, "--staging"));
  options.stall_timeout_s = f.stall_timeout_s;
  options.checksum = f.checksum;
  options.io = f.io == "direct" ? IoMode::kDirect : IoMode::kBuffered;
  HOIST_RETURN_IF_ERROR(CheckLoadOptions(options).WithContext("bad load settings"));
  return options;
}

}  // namespace hoist::cli
