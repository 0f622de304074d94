// Windows: process memory, the console, Ctrl-C / Ctrl-Break / console close.
#include <windows.h>
// After windows.h, which they need.
#include <psapi.h>
#include <shellapi.h>

#include <atomic>
#include <csignal>
#include <cstdio>

#include "base/platform.h"

namespace hoist {
namespace {

std::atomic<int> g_stop_signal{0};

BOOL WINAPI OnConsoleControl(DWORD type) {
  int sig = 0;
  switch (type) {
    case CTRL_C_EVENT:
      sig = SIGINT;
      break;
    case CTRL_BREAK_EVENT:
    case CTRL_CLOSE_EVENT:
      sig = SIGTERM;
      break;
    default:
      return FALSE;
  }
  int expected = 0;
  // A second event: the user insists; let the default handler end the process.
  return g_stop_signal.compare_exchange_strong(expected, sig) ? TRUE : FALSE;
}

}  // namespace

std::vector<std::string> CommandLineArguments(int argc, char** argv) {
  int count = 0;
  LPWSTR* wide = ::CommandLineToArgvW(::GetCommandLineW(), &count);
  if (wide == nullptr) return {argv, argv + argc};
  std::vector<std::string> args;
  for (int i = 0; i < count; ++i) {
    const int n = ::WideCharToMultiByte(CP_UTF8, 0, wide[i], -1, nullptr, 0, nullptr, nullptr);
    std::string arg(n > 0 ? static_cast<size_t>(n - 1) : 0, '\0');
    if (n > 1) ::WideCharToMultiByte(CP_UTF8, 0, wide[i], -1, arg.data(), n, nullptr, nullptr);
    args.push_back(std::move(arg));
  }
  ::LocalFree(wide);
  return args;
}

uint64_t PeakRssBytes() {
  PROCESS_MEMORY_COUNTERS counters{};
  if (!::GetProcessMemoryInfo(::GetCurrentProcess(), &counters, sizeof(counters))) return 0;
  return static_cast<uint64_t>(counters.PeakWorkingSetSize);
}

uint64_t CurrentRssBytes() {
  PROCESS_MEMORY_COUNTERS counters{};
  if (!::GetProcessMemoryInfo(::GetCurrentProcess(), &counters, sizeof(counters))) return 0;
  return static_cast<uint64_t>(counters.WorkingSetSize);
}

// Windows limits pinned memory by the working-set quota, not by a lock limit.
uint64_t MemlockLimitBytes() { return UINT64_MAX; }

std::string FileSystemKind(const std::string& path) {
  (void)path;
  return "unknown";
}

bool StderrIsTerminal() {
  HANDLE err = ::GetStdHandle(STD_ERROR_HANDLE);
  DWORD mode = 0;
  return err != INVALID_HANDLE_VALUE && err != nullptr && ::GetConsoleMode(err, &mode) != 0;
}

int CpuCount() {
  const DWORD n = ::GetActiveProcessorCount(ALL_PROCESSOR_GROUPS);
  return n > 0 ? static_cast<int>(n) : 1;
}

void InstallStopSignalHandlers() {
  static std::atomic<bool> installed{false};
  if (installed.exchange(true)) return;
  ::SetConsoleCtrlHandler(OnConsoleControl, TRUE);
}

int StopSignalReceived() { return g_stop_signal.load(); }

void IgnoreBrokenPipes() {}

bool SharedLibraryLoads(const char* name) {
  HMODULE library = LoadLibraryA(name);
  if (library == nullptr) return false;
  FreeLibrary(library);
  return true;
}

Result<CommandOutput> RunCommand(const std::string& command, size_t max_bytes,
                                 double /*timeout_s*/) {
  FILE* pipe = _popen(command.c_str(), "rb");
  if (pipe == nullptr) return Status::IoError("'" + command + "' could not be started");
  CommandOutput result;
  char buffer[4096];
  bool too_long = false;
  for (size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;) {
    if (result.output.size() + n > max_bytes) {
      too_long = true;
      break;
    }
    result.output.append(buffer, n);
  }
  result.exit_code = _pclose(pipe);
  if (too_long) {
    return Status::IoError("'" + command + "': it wrote more than " + std::to_string(max_bytes) +
                           " bytes");
  }
  return result;
}

}  // namespace hoist
