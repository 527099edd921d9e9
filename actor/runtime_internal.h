#pragma once
// What the runtime's files share (actor/runtime*.cpp): its message tag and the virtual ids of
// Note [What the runtime adds to a plan] in runtime.h. Not a public header.

#include <cstdint>
#include <exception>
#include <string>
#include <utility>

#include "actor/plan_index.h"
#include "oneflowlike/common/error.h"

namespace ofl::actor {

inline constexpr const char* kTag = "[runtime] ";

// What `error` holds: its code and message (kInternal and "unknown error" for what is not an
// exception).
std::pair<ErrorCode, std::string> error_of(std::exception_ptr error);

// Virtual ids (Note [What the runtime adds to a plan]); plan ids stay far below them.
inline constexpr int64_t kCallerActor = -1;  // run() and the destructor, which start and end ticks
inline constexpr int64_t kTickActorBase = int64_t{1} << 60;
inline constexpr int64_t kRunRegisterBase = int64_t{1} << 59;
inline constexpr int64_t kVirtualRegisterBase = int64_t{1} << 58;
inline constexpr int64_t kTransferRegisterBase = int64_t{1} << 57;
inline constexpr int64_t kFirstVirtualId = int64_t{1} << 56;  // plan ids stay below

// Note [Variables bound to the caller's tensors] (runtime_variables.cpp): why the caller's
// tensor cannot be register `reg` of a VARIABLE task whatever tensor it is ("" when it can).
std::string why_register_not_bound(const PlanIndex& index, const PlanIndex::RegisterInfo& reg);

// Note [Watchdog] in runtime_watchdog.cpp: the watchdog's clock, one rule for the threaded and
// the caller-run loops. An act finishing or a message moving is progress. Work under way (an
// act, a stream's kernels, a collective) keeps the run alive too, but only for
// kBusyLimitFactor watchdog periods without anything finishing: a GPU kernel or an NCCL
// collective that never ends (a peer that never joins) is then a stall as well.
class StallClock {
 public:
  static constexpr double kBusyLimitFactor = 10;

  StallClock(double watchdog_seconds, int64_t now)
      : timeout_ns_(static_cast<int64_t>(watchdog_seconds * 1e9)),
        last_progress_(now),
        last_moved_(now) {}

  /// Why the run stalled at `now` ("" while it has not): `moved`, something finished;
  /// `busy`, work under way.
  std::string check(bool moved, bool busy, int64_t now) {
    if (moved) last_moved_ = now;
    if (moved || busy) last_progress_ = now;
    if (now - last_progress_ > timeout_ns_) return "no actor made progress";
    if (busy && static_cast<double>(now - last_moved_) > kBusyLimitFactor * timeout_ns_) {
      return str_cat("work was under way but nothing finished for ", kBusyLimitFactor,
                     " times the watchdog's limit (a kernel or a collective that does not end: "
                     "a peer that never joins?)");
    }
    return "";
  }

 private:
  int64_t timeout_ns_;
  int64_t last_progress_;  // something moved or was under way
  int64_t last_moved_;     // something finished
};

}  // namespace ofl::actor
