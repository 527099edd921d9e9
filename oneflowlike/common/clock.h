#pragma once
// Monotonic time for timeouts, spin budgets and traces (one clock for every thread and, on one
// host, every process).

#include <chrono>
#include <cstdint>

namespace ofl {

/// Nanoseconds on the steady clock.
inline int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace ofl
