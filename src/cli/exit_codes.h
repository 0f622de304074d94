// The command-line tool's exit codes (StatusRow in base/status.h relates them to the kinds of
// failure) and the one way a command reports a failure.
#pragma once

#include <cstdio>
#include <cstdlib>

#include "base/platform.h"
#include "base/status.h"
#include "io/http_storage.h"

namespace hoist::cli {

enum ExitCode : int {
  kExitOk = 0,
  kExitFailure = 1,       // anything not listed below: cannot open, I/O error, bad arguments
  kExitInvalidModel = 2,  // the model's bytes break a rule of its format
  kExitStalled = 3,       // the watchdog found a stage that made no progress
  kExitDeviceError = 4,   // the device reported an error
  kExitVerifyMismatch = 5,
  kExitFileChanged = 6,   // a model file was replaced or written to while hoist read it
  kExitSignalBase = 128,  // cancelled by a signal: 128 + the signal's number
};

inline int ExitCodeFor(const Status& status) { return RowOf(status.code()).exit_code; }

// Prints "hoist: MESSAGE" on stderr and returns the exit code for the failure: 128 + N when a
// stop signal N cancelled it.
inline int ReportFailure(const Status& status) {
  std::fprintf(stderr, "hoist: %s\n", RedactSecrets(status.message()).c_str());
  if (status.code() == Code::kCancelled && StopSignalReceived() != 0) {
    return kExitSignalBase + StopSignalReceived();
  }
  return ExitCodeFor(status);
}

// For the failures after which the process must not wait on the device: a stall (a copy may
// never complete, and freeing its memory could hang or corrupt) and a stop signal (the user
// wants out now; the system frees what the process held). Reports and leaves at once.
[[noreturn]] inline void ReportAndExitNow(const Status& status) {
  const int code = ReportFailure(status);
  std::fflush(nullptr);
  std::_Exit(code);
}

// ReportFailure, or for a stall or a stop signal ReportAndExitNow.
inline int ReportOrExitNow(const Status& status) {
  if (status.code() == Code::kStalled ||
      (status.code() == Code::kCancelled && StopSignalReceived() != 0)) {
    ReportAndExitNow(status);
  }
  return ReportFailure(status);
}

}  // namespace hoist::cli
