#pragma once
// Status and Result<T>: what boundaries (compiler entry, comm, bootstrap) return.
// Inside the core a user error is an ofl::Error exception; capture_status() turns one back
// into a Status at a boundary, and Status::throw_if_error() turns a Status into the exception.

#include <optional>
#include <string>
#include <utility>

#include "oneflowlike/common/error.h"

namespace ofl {

class Status {
 public:
  Status() = default;
  Status(ErrorCode code, std::string message) : code_(code), message_(std::move(message)) {}
  static Status ok_status() { return Status(); }

  bool ok() const { return code_ == ErrorCode::kOk; }
  ErrorCode code() const { return code_; }
  const std::string& message() const { return message_; }
  std::string to_string() const;
  void throw_if_error() const {
    if (!ok()) throw_error(code_, message_);
  }

 private:
  ErrorCode code_ = ErrorCode::kOk;
  std::string message_;
};

/// A value or the Status that explains why there is none.
template <class T>
class Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) { OFL_ASSERT(!status_.ok()); }  // NOLINT

  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }
  /// The value; throws ofl::Error carrying the status when there is none.
  T& value() & {
    status_.throw_if_error();
    return *value_;
  }
  T&& value() && {
    status_.throw_if_error();
    return std::move(*value_);
  }

 private:
  std::optional<T> value_;
  Status status_;
};

/// Runs f and converts an ofl::Error it throws into a Status.
template <class F>
Status capture_status(F&& f) {
  try {
    f();
    return Status();
  } catch (const Error& e) {
    return Status(e.code(), e.what());
  }
}

}  // namespace ofl
