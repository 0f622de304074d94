#include "cli/progress_meter.h"

#include <cstdio>
#include <string>

#include "base/platform.h"
#include "base/units.h"

namespace hoist::cli {

ProgressMeter::ProgressMeter(bool enabled)
    : enabled_(enabled),
      terminal_(StderrIsTerminal()),
      last_line_(std::chrono::steady_clock::now()) {}

bool ProgressMeter::Update(const LoadProgress& p) {
  if (!enabled_) return true;
  const double rate = p.elapsed_s > 0 ? static_cast<double>(p.copied_bytes) / p.elapsed_s : 0;
  const double eta = rate > 0 ? static_cast<double>(p.total_bytes - p.copied_bytes) / rate : 0;
  const double fraction =
      p.total_bytes > 0 ? static_cast<double>(p.copied_bytes) / static_cast<double>(p.total_bytes)
                        : 1;
  if (terminal_) {
    constexpr int kWidth = 30;
    const int filled = static_cast<int>(fraction * kWidth);
    std::string bar(static_cast<size_t>(filled), '#');
    bar.append(static_cast<size_t>(kWidth - filled), '.');
    std::fprintf(stderr, "\r[%s] %s / %s  %s  ETA %.0fs   ", bar.c_str(),
                 FormatBytes(p.copied_bytes).c_str(), FormatBytes(p.total_bytes).c_str(),
                 FormatRate(rate).c_str(), eta);
    std::fflush(stderr);
    drawn_ = true;
    return true;
  }
  const auto now = std::chrono::steady_clock::now();
  if (now - last_line_ >= std::chrono::seconds(3)) {
    last_line_ = now;
    std::fprintf(stderr, "hoist: %s of %s (%.0f%%), %s, ETA %.0fs\n",
                 FormatBytes(p.copied_bytes).c_str(), FormatBytes(p.total_bytes).c_str(),
                 fraction * 100, FormatRate(rate).c_str(), eta);
  }
  return true;
}

void ProgressMeter::Finish() {
  if (drawn_) std::fprintf(stderr, "\n");
  drawn_ = false;
}

}  // namespace hoist::cli
