#pragma once
// CUDA runtime errors as ofl::Error, for the files of the CUDA backend only.

#include <cuda_runtime_api.h>

#include "oneflowlike/common/error.h"
#include "oneflowlike/cuda/device.h"  // DeviceGuard, which CUDA files take from here too

namespace ofl::cuda {

/// Raises ofl::Error naming `what`, the device and the CUDA runtime's words when `status` is an
/// error (kUnavailable for a missing device or driver, kInternal otherwise).
inline void check(cudaError_t status, const char* what, int device) {
  if (status == cudaSuccess) [[likely]] {
    return;
  }
  const bool missing = status == cudaErrorNoDevice || status == cudaErrorInsufficientDriver ||
                       status == cudaErrorInvalidDevice;
  throw_error(missing ? ErrorCode::kUnavailable : ErrorCode::kInternal,
              str_cat("[cuda] ", what, " on cuda:", device, " failed: ", cudaGetErrorString(status),
                      " (", cudaGetErrorName(status), ")."));
}

}  // namespace ofl::cuda
