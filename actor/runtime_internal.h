#pragma once
// What the runtime's files share (actor/runtime*.cpp): its message tag and the virtual ids of
// Note [What the runtime adds to a plan] in runtime.h. Not a public header.

#include <cstdint>
#include <exception>
#include <string>
#include <utility>

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

}  // namespace ofl::actor
