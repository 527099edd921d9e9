#pragma once
// Row-major batched matrix products on a kernel's stream, for CUDA kernels other than matmul's
// (fused attention's score and gradient products): the one cuBLASLt path of matmul.cu, with its
// plan cache, handle and workspace, and its tiled fallback.

#include <cstdint>
#include <functional>
#include <string>

#include "oneflowlike/kernels/cuda/common.cuh"
#include "oneflowlike/kernels/cuda/gemm_layout.h"

namespace ofl::cuda_kernels {

/// Describes the operands of a product for an error message ("q (2, 4, 9, 16) bfloat16 ...").
using DescribeOperands = std::function<std::string()>;

/// out (batches, m, n) = alpha * op(a) @ op(b), matrices of each operand one after another
/// (RowMajorProduct's strides), on the context's stream; float types through cuBLASLt with its
/// compute type (no TF32), else the tiled kernel. `op` and `describe` name the operands in
/// errors. Instantiated for Out = T (float, double, float16, bfloat16: the 16-bit ones
/// accumulated in float32 and rounded once), and for float16 and bfloat16 operands with a float32
/// out (never rounded to 16 bits: fused attention's scores and dp).
template <class T, class Out = T>
void batched_product(const KernelContext& ctx, const char* op, const gemm::RowMajorProduct& p,
                     int64_t batches, const native_t<T>* a, const native_t<T>* b,
                     native_t<Out>* out, double alpha, const DescribeOperands& describe);

}  // namespace ofl::cuda_kernels
