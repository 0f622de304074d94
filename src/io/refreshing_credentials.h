// Credentials from one source (keys, a bearer token), fetched again once they come within five
// minutes of their expiration (the AWS and Google SDKs' window), so that a load longer than
// their life sends live ones with every request.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "base/mutex.h"
#include "base/status.h"

namespace hoist {

// T: the credentials, with a member `std::optional<std::chrono::system_clock::time_point>
// expiration` (nullopt: they do not expire). Thread safety: every method may be called from
// any thread; one thread fetches while the others wait for it.
template <typename T>
class RefreshingCredentials {
 public:
  using FetchFn = std::function<Result<T>()>;
  // `name` says where they come from in messages ("web identity (role ARN)"); never a secret.
  RefreshingCredentials(std::string name, FetchFn fetch)
      : name_(std::move(name)), fetch_(std::move(fetch)) {}
  // Credentials that do not expire and need no fetch.
  static std::shared_ptr<RefreshingCredentials> Fixed(std::string name, const T& credentials) {
    return std::make_shared<RefreshingCredentials>(
        std::move(name), [credentials]() -> Result<T> { return credentials; });
  }

  // Live credentials: the last ones fetched, or new ones when those expire within the window.
  // A failed fetch is the source's error; while the last ones still work, they are given and
  // the next call asks again.
  Result<T> Current() {
    // Fetches are at least a second apart while the old ones still work, so that a source
    // whose credentials live shorter than the window is not asked for every request.
    constexpr auto kWindow = std::chrono::minutes(5);
    constexpr auto kFewestSecondsApart = std::chrono::seconds(1);
    static constexpr auto kNever = std::chrono::system_clock::time_point::max();
    MutexLock lock(mutex_);
    const auto now = std::chrono::system_clock::now();
    const auto expires = current_ && current_->expiration ? *current_->expiration : kNever;
    const bool live = current_ && now < expires;
    if (live &&
        (expires == kNever || expires - now > kWindow || now - last_fetch_ < kFewestSecondsApart)) {
      return *current_;
    }
    ++fetches_;
    last_fetch_ = now;
    Result<T> fetched = fetch_();
    if (!fetched.ok()) {
      if (live) return *current_;
      return fetched.status();
    }
    current_ = std::move(fetched).value();
    return *current_;
  }
  const std::string& name() const { return name_; }
  // How many fetches were made (the first included).
  int fetches() const {
    MutexLock lock(mutex_);
    return fetches_;
  }

 private:
  const std::string name_;
  const FetchFn fetch_;
  mutable Mutex mutex_;
  std::optional<T> current_ HOIST_GUARDED_BY(mutex_);
  std::chrono::system_clock::time_point last_fetch_ HOIST_GUARDED_BY(mutex_);
  int fetches_ HOIST_GUARDED_BY(mutex_) = 0;
};

}  // namespace hoist
