#pragma once
// cuBLAS(Lt) status errors as ofl::Error, beside cuda::check (check.h) for the CUDA runtime's;
// for the CUDA kernel files that call cuBLASLt only.

#include <cublasLt.h>

#include <string_view>

#include "oneflowlike/common/error.h"

namespace ofl::cuda {

/// Raises ofl::Error naming the op, the call, the device, the operands and cuBLAS's words when
/// `status` is an error: "[matmul] cublasLtMatmul on cuda:0 failed for a (4, 8) float16, b
/// (8, 5) float16: the requested functionality is not supported (CUBLAS_STATUS_NOT_SUPPORTED)."
/// kUnavailable when cuBLAS could not allocate, kInternal otherwise. `describe_operands()` is
/// called only on failure, so callers may build the message lazily.
template <class DescribeOperands>
void check_cublas(cublasStatus_t status, std::string_view op, std::string_view call, int device,
                  DescribeOperands&& describe_operands) {
  if (status == CUBLAS_STATUS_SUCCESS) [[likely]] {
    return;
  }
  throw_error(
      status == CUBLAS_STATUS_ALLOC_FAILED ? ErrorCode::kUnavailable : ErrorCode::kInternal,
      str_cat("[", op, "] ", call, " on cuda:", device, " failed for ", describe_operands(), ": ",
              cublasLtGetStatusString(status), " (", cublasLtGetStatusName(status), ")."));
}

}  // namespace ofl::cuda
