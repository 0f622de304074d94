// The SIGBUS guard around copies out of file mappings. Each guarded copy takes a slot in a
// process-wide table that says which thread copies out of which mapping and where to jump back
// to; the handler jumps back when the fault is inside the mapping of its own thread's slot, and
// otherwise hands the signal on. (A table, not a thread_local: in a library that Python loads
// with dlopen, a thread_local may be allocated on its first touch, which a signal handler must
// not do, and static TLS is too scarce there to ask for.)
#include <pthread.h>

#include <atomic>
#include <csetjmp>
#include <csignal>
#include <cstring>
#include <mutex>

#include "io/mapped_rows.h"

namespace hoist {
namespace {

struct CopyGuard {
  std::atomic<bool> taken{false};
  std::atomic<bool> armed{false};  // owner, begin, end and back are set
  std::atomic<pthread_t> owner{};
  const unsigned char* begin = nullptr;
  const unsigned char* end = nullptr;
  sigjmp_buf back{};
};

// More guarded copies at once than this: the rest do not gather (their callers read whole rows).
constexpr int kGuards = 256;
CopyGuard g_guards[kGuards];
struct sigaction g_previous {};  // written once, before the handler is installed

void PassOn(int sig, siginfo_t* info, void* context) {
  if ((g_previous.sa_flags & SA_SIGINFO) != 0) {
    g_previous.sa_sigaction(sig, info, context);
    return;
  }
  if (g_previous.sa_handler == SIG_IGN) return;
  if (g_previous.sa_handler != SIG_DFL) {
    g_previous.sa_handler(sig);
    return;
  }
  // The default action: a fault re-runs the faulting instruction and meets it; a signal that
  // was sent (kill) is raised again.
  ::signal(sig, SIG_DFL);
  if (info->si_code <= 0) ::raise(sig);
}

void OnBusError(int sig, siginfo_t* info, void* context) {
  if (info->si_code > 0) {  // a fault, not a signal someone sent
    const pthread_t self = pthread_self();
    const auto* at = static_cast<const unsigned char*>(info->si_addr);
    for (CopyGuard& g : g_guards) {
      if (g.armed.load(std::memory_order_acquire) &&
          pthread_equal(g.owner.load(std::memory_order_relaxed), self) != 0 && at >= g.begin &&
          at < g.end) {
        siglongjmp(g.back, 1);
      }
    }
  }
  PassOn(sig, info, context);
}

void InstallHandler() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction action {};
    action.sa_sigaction = OnBusError;
    // SA_NODEFER: SIGBUS stays unblocked while the handler runs, so that a fault in the handler
    // it passes a signal on to is not a silent kill.
    action.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK;
    sigemptyset(&action.sa_mask);
    ::sigaction(SIGBUS, nullptr, &g_previous);
    ::sigaction(SIGBUS, &action, nullptr);
  });
}

// Not inlined into the caller: nothing the caller keeps in registers lives across sigsetjmp.
__attribute__((noinline)) bool GuardedCopy(CopyGuard& guard, const unsigned char* src,
                                           uint64_t width, uint64_t pitch, uint64_t rows,
                                           unsigned char* dst) {
  // Saving the signal mask costs a system call per copy (a chunk of megabytes); it restores the
  // mask when the handler jumps back, in case whatever delivered the signal blocked SIGBUS
  // despite SA_NODEFER (ThreadSanitizer's wrapper does), which would make the next fault fatal.
  if (sigsetjmp(guard.back, 1) != 0) {
    guard.armed.store(false, std::memory_order_release);
    return false;
  }
  guard.armed.store(true, std::memory_order_release);
  for (uint64_t r = 0; r < rows; ++r) std::memcpy(dst + r * width, src + r * pitch, width);
  guard.armed.store(false, std::memory_order_release);
  return true;
}

}  // namespace

bool CopyRowsFromMapping(const unsigned char* src, uint64_t width, uint64_t pitch, uint64_t rows,
                         unsigned char* dst, const void* mapping, uint64_t mapping_bytes) {
  InstallHandler();
  for (CopyGuard& guard : g_guards) {
    if (guard.taken.exchange(true, std::memory_order_acquire)) continue;
    guard.owner.store(pthread_self(), std::memory_order_relaxed);
    guard.begin = static_cast<const unsigned char*>(mapping);
    guard.end = guard.begin + mapping_bytes;
    const bool copied = GuardedCopy(guard, src, width, pitch, rows, dst);
    guard.taken.store(false, std::memory_order_release);
    return copied;
  }
  return false;
}

}  // namespace hoist
