#include <dlfcn.h>
#include <signal.h>
#if defined(__linux__)
#include <sys/vfs.h>
#endif
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <climits>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "base/platform.h"

namespace hoist {
namespace {

// Read by every thread that honours a stop (verify's workers, the measurements), so an atomic
// rather than a volatile sig_atomic_t; lock-free, which makes it safe in a signal handler.
std::atomic<int> g_stop_signal{0};
static_assert(std::atomic<int>::is_always_lock_free);

extern "C" void OnStopSignal(int sig) {
  if (g_stop_signal.load() != 0) {
    // Second signal: the user insists. Restore the default action and re-raise.
    ::signal(sig, SIG_DFL);
    ::raise(sig);
    return;
  }
  g_stop_signal.store(sig);
}

}  // namespace

std::vector<std::string> CommandLineArguments(int argc, char** argv) { return {argv, argv + argc}; }

uint64_t PeakRssBytes() {
  struct rusage usage {};
  if (::getrusage(RUSAGE_SELF, &usage) != 0) return 0;
  return static_cast<uint64_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

uint64_t CurrentRssBytes() {
  std::ifstream statm("/proc/self/statm");
  uint64_t pages = 0;
  uint64_t resident = 0;
  if (!(statm >> pages >> resident)) return 0;
  return resident * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
}

uint64_t MemlockLimitBytes() {
  struct rlimit limit {};
  if (::getrlimit(RLIMIT_MEMLOCK, &limit) != 0) return 0;
  return limit.rlim_cur == RLIM_INFINITY ? UINT64_MAX : static_cast<uint64_t>(limit.rlim_cur);
}

std::string FileSystemKind(const std::string& path) {
#if defined(__linux__)
  struct statfs fs {};
  if (::statfs(path.c_str(), &fs) != 0) return "unknown";
  switch (static_cast<uint64_t>(fs.f_type)) {
    case 0xEF53:
      return "ext4";
    case 0x58465342:
      return "xfs";
    case 0x9123683E:
      return "btrfs";
    case 0x01021994:
      return "tmpfs";
    case 0x794C7630:
      return "overlay";
    case 0x6969:
      return "nfs";
    case 0xFF534D42:
      return "cifs";
    case 0xFE534D42:
      return "smb2";
    case 0x517B:
      return "smb";
    case 0x65735546:
      return "fuse";
    case 0x2FC12FC1:
      return "zfs";
    case 0x01021997:
      return "9p";
    default: {
      char hex[32];
      std::snprintf(hex, sizeof hex, "0x%llx", static_cast<unsigned long long>(fs.f_type));
      return hex;
    }
  }
#else
  (void)path;
  return "unknown";
#endif
}

bool StderrIsTerminal() { return ::isatty(STDERR_FILENO) == 1; }

int CpuCount() {
  const long n = ::sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<int>(n) : 1;
}

void InstallStopSignalHandlers() {
  static std::atomic<bool> installed{false};
  if (installed.exchange(true)) return;
  struct sigaction action {};
  action.sa_handler = OnStopSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = 0;  // no SA_RESTART: a blocked read returns EINTR and the loop checks the flag
  ::sigaction(SIGINT, &action, nullptr);
  ::sigaction(SIGTERM, &action, nullptr);
}

int StopSignalReceived() { return g_stop_signal.load(); }

bool SharedLibraryLoads(const char* name) {
  void* library = dlopen(name, RTLD_LAZY | RTLD_LOCAL);
  if (library == nullptr) return false;
  dlclose(library);
  return true;
}

}  // namespace hoist
