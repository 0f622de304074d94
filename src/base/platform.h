// The little the rest of hoist needs from the operating system outside file I/O: process
// memory, terminals, stop signals. One implementation file per platform (platform_posix.cpp).
#pragma once

#include <cstdint>

namespace hoist {

// The most resident memory this process has used so far, in bytes.
uint64_t PeakRssBytes();
// Whether standard error is a terminal (progress bar) or not (periodic lines).
bool StderrIsTerminal();
int CpuCount();

// SIGINT and SIGTERM (Ctrl-C and Ctrl-Break on Windows) set a flag that every wait of a load
// checks; a second one ends the process at once. Idempotent.
void InstallStopSignalHandlers();
// The signal number received since installation, or 0.
int StopSignalReceived();

}  // namespace hoist
