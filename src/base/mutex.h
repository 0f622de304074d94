// A mutex that clang's thread-safety analysis understands (-Wthread-safety, run by the tidy
// stage): members marked HOIST_GUARDED_BY(m) may be touched only with m held, functions marked
// HOIST_REQUIRES(m) only be called with it held. Other compilers see plain std::mutex.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

#if defined(__clang__)
#define HOIST_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define HOIST_THREAD_ANNOTATION(x)
#endif
#define HOIST_CAPABILITY(x) HOIST_THREAD_ANNOTATION(capability(x))
#define HOIST_SCOPED_CAPABILITY HOIST_THREAD_ANNOTATION(scoped_lockable)
#define HOIST_GUARDED_BY(x) HOIST_THREAD_ANNOTATION(guarded_by(x))
#define HOIST_REQUIRES(...) HOIST_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define HOIST_ACQUIRE(...) HOIST_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define HOIST_RELEASE(...) HOIST_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define HOIST_EXCLUDES(...) HOIST_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))

namespace hoist {

class HOIST_CAPABILITY("mutex") Mutex {
 public:
  void Lock() HOIST_ACQUIRE() { mutex_.lock(); }
  void Unlock() HOIST_RELEASE() { mutex_.unlock(); }

 private:
  friend class MutexLock;
  std::mutex mutex_;
};

// Holds a Mutex for its scope; waits on condition variables with it.
class HOIST_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mutex) HOIST_ACQUIRE(mutex) : lock_(mutex.mutex_) {}
  ~MutexLock() HOIST_RELEASE() = default;
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  // For work done without the mutex inside the scope; Lock() before the scope ends.
  void Unlock() HOIST_RELEASE() { lock_.unlock(); }
  void Lock() HOIST_ACQUIRE() { lock_.lock(); }

  // As std::condition_variable's: the mutex is released while waiting and held again after.
  // The analysis does not look into `done`, which runs with the mutex held.
  template <typename Done>
  void Wait(std::condition_variable& cv, Done done) {
    cv.wait(lock_, done);
  }
  template <typename Rep, typename Period, typename Done>
  bool WaitFor(std::condition_variable& cv, std::chrono::duration<Rep, Period> timeout, Done done) {
    return cv.wait_for(lock_, timeout, done);
  }
  template <typename Rep, typename Period>
  void WaitFor(std::condition_variable& cv, std::chrono::duration<Rep, Period> timeout) {
    cv.wait_for(lock_, timeout);
  }

 private:
  std::unique_lock<std::mutex> lock_;
};

}  // namespace hoist
