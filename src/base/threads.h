// Starting a thread without letting std::system_error escape: a process out of threads or
// address space (ulimit -v, a container's pids limit) gets a Status, never an abort.
#pragma once

#include <exception>
#include <string>
#include <string_view>
#include <thread>
#include <utility>

#include "base/status.h"

namespace hoist {

// Starts `body` on a new thread. `what` names the thread in the error ("reader thread 3 of 12").
template <typename F>
Result<std::thread> StartThread(std::string_view what, F&& body) {
  try {
    return std::thread(std::forward<F>(body));
  } catch (const std::exception& e) {
    return Status::Unavailable("cannot start " + std::string(what) + ": " + e.what() +
                               " (the process is out of threads or memory)");
  }
}

}  // namespace hoist
