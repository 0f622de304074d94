// The little the rest of hoist needs from the operating system outside file I/O: process
// memory, terminals, stop signals. One implementation file per platform (platform_posix.cpp).
#pragma once

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "base/status.h"

namespace hoist {

// The program's arguments in UTF-8, the program name first (Windows passes argv in the
// ANSI code page, so there they are read again from the wide command line).
std::vector<std::string> CommandLineArguments(int argc, char** argv);

// Whether the shared library `name` ("libcuda.so.1", "nvcuda.dll") can be loaded here: the
// difference between a driver too old and no driver at all.
bool SharedLibraryLoads(const char* name);

// The most resident memory this process has used so far, in bytes.
uint64_t PeakRssBytes();
// Resident memory now, in bytes (0 when the platform cannot say).
uint64_t CurrentRssBytes();
// How much memory this process may lock (pin), in bytes; UINT64_MAX when unlimited, 0 when
// unknown.
uint64_t MemlockLimitBytes();
// The kind of file system that holds path ("ext4", "xfs", "tmpfs", "nfs", "fuse", ...), or
// "unknown".
std::string FileSystemKind(const std::string& path);
// Whether standard error is a terminal (progress bar) or not (periodic lines).
bool StderrIsTerminal();
int CpuCount();
// The environment variable `name`, or "" when it is unset.
inline std::string EnvironmentVariable(const char* name) {
  const char* value = std::getenv(name);  // NOLINT(concurrency-mt-unsafe): read, never set
  return value == nullptr ? std::string() : std::string(value);
}

struct CommandOutput {
  int exit_code = 0;  // 128 + N when signal N ended it
  std::string output;
};
// Runs `command` through the system's shell (/bin/sh -c; cmd.exe on Windows) with its standard
// output captured, at most max_bytes, and its standard error the caller's. kIoError when it
// cannot start, writes more or runs past timeout_s (it is killed then; Windows waits for it).
Result<CommandOutput> RunCommand(const std::string& command, size_t max_bytes, double timeout_s);

// SIGINT and SIGTERM (Ctrl-C and Ctrl-Break on Windows) set a flag that every wait of a load
// checks; a second one ends the process at once. Idempotent.
void InstallStopSignalHandlers();
// The signal number received since installation, or 0.
int StopSignalReceived();
// A write to a pipe whose reader has gone fails (EPIPE) instead of ending the process: for a
// long-lived service whose notes go to a stderr no one may read any more. No-op on Windows.
void IgnoreBrokenPipes();
// kCancelled ("cancelled by signal N") once a stop signal was received, else OK: for loops
// that must end promptly on Ctrl-C.
inline Status StopRequested() {
  const int signal = StopSignalReceived();
  if (signal == 0) return Status::Ok();
  return Status::Cancelled("cancelled by signal " + std::to_string(signal));
}

}  // namespace hoist
