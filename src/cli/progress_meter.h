// Shows a load's progress on standard error: a bar with bytes, GB/s and ETA on a terminal, a
// plain line every few seconds elsewhere (logs stay readable).
#pragma once

#include <chrono>

#include "pipeline/loader.h"

namespace hoist::cli {

class ProgressMeter {
 public:
  explicit ProgressMeter(bool enabled);
  // Suitable as LoadOptions::progress; always returns true.
  bool Update(const LoadProgress& p);
  // Ends the bar's line, if one was drawn.
  void Finish();

 private:
  bool enabled_;
  bool terminal_;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point last_line_;
};

}  // namespace hoist::cli
