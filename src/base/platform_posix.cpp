#include <dlfcn.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#if defined(__linux__)
#include <sys/vfs.h>
#endif
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <utility>

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

void IgnoreBrokenPipes() { ::signal(SIGPIPE, SIG_IGN); }

bool SharedLibraryLoads(const char* name) {
  void* library = dlopen(name, RTLD_LAZY | RTLD_LOCAL);
  if (library == nullptr) return false;
  dlclose(library);
  return true;
}

extern "C" char** environ;  // NOLINT(readability-redundant-declaration): POSIX's, for posix_spawn

namespace {

// `/bin/sh -c command` with its standard output on a pipe: its pid and the pipe's read end.
Result<std::pair<pid_t, int>> SpawnShell(const std::string& command) {
  int fds[2];
  if (pipe(fds) != 0) return ErrnoStatus(errno, "pipe", command);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&actions, fds[0]);
  posix_spawn_file_actions_addclose(&actions, fds[1]);
  std::string sh = "/bin/sh";
  std::string dash_c = "-c";
  std::string text = command;
  char* argv[] = {sh.data(), dash_c.data(), text.data(), nullptr};
  pid_t pid = -1;
  const int spawned = posix_spawn(&pid, "/bin/sh", &actions, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  if (spawned != 0) {
    close(fds[0]);
    return ErrnoStatus(spawned, "posix_spawn /bin/sh -c", command);
  }
  return std::make_pair(pid, fds[0]);
}

// Reads fd to its end into *output; why it stopped early ("" when it did not): a stop signal,
// the timeout, or more than max_bytes.
std::string ReadToEnd(int fd, size_t max_bytes, double timeout_s, std::string* output) {
  const auto until = std::chrono::steady_clock::now() +
                     std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                         std::chrono::duration<double>(timeout_s));
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        until - std::chrono::steady_clock::now());
    pollfd p{fd, POLLIN, 0};
    // Woken every 100 ms at most, so that a stop signal ends the wait.
    const int ready =
        left.count() <= 0 ? 0 : poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 100)));
    if (StopSignalReceived() != 0) return "stopped";
    if (ready == 0 && left.count() <= 0) {
      return "it ran longer than " + std::to_string(static_cast<int>(timeout_s)) + " s";
    }
    if (ready == 0 || (ready < 0 && errno == EINTR)) continue;
    char buffer[4096];
    const ssize_t n = ready < 0 ? -1 : read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return "";  // the end of its output
    if (output->size() + static_cast<size_t>(n) > max_bytes) {
      return "it wrote more than " + std::to_string(max_bytes) + " bytes";
    }
    output->append(buffer, static_cast<size_t>(n));
  }
}

}  // namespace

Result<CommandOutput> RunCommand(const std::string& command, size_t max_bytes, double timeout_s) {
  HOIST_ASSIGN_OR_RETURN(const auto spawned, SpawnShell(command));
  const auto [pid, out] = spawned;
  CommandOutput result;
  const std::string failure = ReadToEnd(out, max_bytes, timeout_s, &result.output);
  close(out);
  if (!failure.empty()) kill(pid, SIGKILL);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!failure.empty()) {
    HOIST_RETURN_IF_ERROR(StopRequested());
    return Status::IoError("'" + command + "': " + failure + ": killed");
  }
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

}  // namespace hoist
