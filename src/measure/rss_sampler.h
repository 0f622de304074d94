// Samples this process's resident memory on a background thread, so that a measurement can
// say how much host memory one phase took (the process-wide peak only ever grows).
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>

#include "base/platform.h"

namespace hoist {

class RssSampler {
 public:
  RssSampler() : baseline_(CurrentRssBytes()), peak_(baseline_) {
    thread_ = std::thread([this] {
      while (!stop_.load()) {
        const uint64_t now = CurrentRssBytes();
        uint64_t seen = peak_.load();
        while (now > seen && !peak_.compare_exchange_weak(seen, now)) {
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
    });
  }
  ~RssSampler() { Stop(); }
  RssSampler(const RssSampler&) = delete;
  RssSampler& operator=(const RssSampler&) = delete;

  // The most resident memory above the level at construction, in bytes.
  uint64_t Stop() {
    if (thread_.joinable()) {
      stop_ = true;
      thread_.join();
    }
    const uint64_t now = CurrentRssBytes();
    return std::max(peak_.load(), now) - baseline_;
  }

 private:
  uint64_t baseline_;
  std::atomic<uint64_t> peak_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace hoist
