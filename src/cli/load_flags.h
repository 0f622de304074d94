// The load settings that `hoist load`, `verify` and `bench` share: their flags, and the one
// translation of them into LoadOptions, checked before any model is opened.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "base/status.h"
#include "pipeline/loader.h"

namespace hoist::cli {

struct LoadSettingFlags {
  int threads = 0;
  std::string chunk;    // a size: "4MiB", "512KiB", or a bare number of MiB; empty: default
  std::string staging;  // the same; empty: two buffers per reader
  double stall_timeout_s = kDefaultStallTimeoutSeconds;
  std::string io = "buffered";
  bool checksum = false;
};

// Adds --threads, --chunk, --staging and --stall-timeout; with `io_and_checksum` also --io and
// --checksum (bench sets those itself).
void AddLoadSettingFlags(CLI::App* cmd, LoadSettingFlags& flags, bool io_and_checksum);
// --stall-timeout alone, for commands that wait on a device without loading (doctor).
void AddStallTimeoutFlag(CLI::App* cmd, double& seconds);
// The LoadOptions for the flags, or an invalid-argument error naming the flag.
Result<LoadOptions> ToLoadOptions(const LoadSettingFlags& flags);

// A size flag's bytes: a size with its unit ("4MiB", "64KiB", "1GB": units.h's ParseByteSize)
// or a bare number of MiB ("4", "0.5"); 0 for an empty text. An invalid-argument error naming
// the flag and the accepted spellings otherwise.
Result<uint64_t> ParseSizeFlag(const std::string& text, std::string_view flag);

// A finite number within [min, max]: CLI11's Range lets NaN through (every comparison with it
// is false).
CLI::Validator FiniteRange(double min, double max);

}  // namespace hoist::cli
