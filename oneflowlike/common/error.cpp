#include "oneflowlike/common/error.h"

#include "oneflowlike/common/status.h"

namespace ofl {

const char* error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::kOk:
      return "Ok";
    case ErrorCode::kInvalidArgument:
      return "InvalidArgument";
    case ErrorCode::kTypeError:
      return "TypeError";
    case ErrorCode::kOutOfRange:
      return "OutOfRange";
    case ErrorCode::kFailedPrecondition:
      return "FailedPrecondition";
    case ErrorCode::kNotFound:
      return "NotFound";
    case ErrorCode::kUnavailable:
      return "Unavailable";
    case ErrorCode::kDeadlineExceeded:
      return "DeadlineExceeded";
    case ErrorCode::kUnimplemented:
      return "Unimplemented";
    case ErrorCode::kInternal:
      return "Internal";
    case ErrorCode::kCancelled:
      return "Cancelled";
  }
  return "Unknown";
}

void throw_error(ErrorCode code, const std::string& message) { throw Error(code, message); }

std::string Status::to_string() const {
  if (ok()) return "OK";
  return str_cat(error_code_name(code_), ": ", message_);
}

}  // namespace ofl
