#pragma once
// Errors. Two macros, two meanings (see STYLE.md):
//  - OFL_CHECK* report a user mistake: they throw ofl::Error with a code that the Python
//    binding maps to a typed exception (ValueError, TypeError, IndexError, ...).
//  - OFL_ASSERT is an internal invariant: a failure is a bug and aborts through glog.
// Message form: "[op] <what is required>. However, got <actual>."

#include <glog/logging.h>

#include <sstream>
#include <stdexcept>
#include <string>

namespace ofl {

enum class ErrorCode {
  kOk,
  kInvalidArgument,     // ValueError
  kTypeError,           // TypeError
  kOutOfRange,          // IndexError
  kFailedPrecondition,  // RuntimeError
  kNotFound,            // LookupError
  kUnavailable,         // RuntimeError
  kDeadlineExceeded,    // TimeoutError
  kUnimplemented,       // NotImplementedError
  kInternal,            // RuntimeError
  kCancelled,           // RuntimeError
};

const char* error_code_name(ErrorCode code);

/// The exception every user-facing error becomes inside C++.
class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
  ErrorCode code() const { return code_; }

 private:
  ErrorCode code_;
};

template <class... Args>
std::string str_cat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

[[noreturn]] void throw_error(ErrorCode code, const std::string& message);

}  // namespace ofl

#define OFL_CHECK_CODE(cond, code, ...)                        \
  do {                                                         \
    if (!(cond)) [[unlikely]] {                                \
      ::ofl::throw_error((code), ::ofl::str_cat(__VA_ARGS__)); \
    }                                                          \
  } while (0)

/// User error that becomes ValueError.
#define OFL_CHECK(cond, ...) OFL_CHECK_CODE(cond, ::ofl::ErrorCode::kInvalidArgument, __VA_ARGS__)
/// User error that becomes TypeError (wrong dtype, wrong kind of argument).
#define OFL_CHECK_TYPE(cond, ...) OFL_CHECK_CODE(cond, ::ofl::ErrorCode::kTypeError, __VA_ARGS__)
/// User error that becomes IndexError (axis or index out of range).
#define OFL_CHECK_INDEX(cond, ...) OFL_CHECK_CODE(cond, ::ofl::ErrorCode::kOutOfRange, __VA_ARGS__)
/// Internal invariant: a failure is a bug in oneflowlike.
#define OFL_ASSERT(cond) CHECK(cond)
