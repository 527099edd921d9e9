#pragma once
// Matrix products: matmul (2-D, or N-d a folded into rows against a 2-D b) and batch_matmul
// (identical batch dims). Both compute out = alpha * op(a) @ op(b), where op transposes the
// last two axes when its flag is set. With float32_out, 16-bit operands give a float32 out: the
// float32 sums are written as they are, not rounded to the operands' dtype (Note [Casts folded
// into products] in compiler/passes/cast_folding.cpp makes such products).
//
// Note [Products over rows]: broadcast_matmul_grad_b (OneFlow's name) is a matmul's weight
// gradient for an N-d a: a (..., K) and b (..., N) with the same leading axes give (K, N) =
// alpha * sum over every leading index r of a[r]^T b[r], one product over the rows of both.
// Written as reshapes to (rows, K) and (rows, N) and a 2-D matmul, as it was, a sequence split
// (S(1) of (B, T, C): context and sequence parallelism) cannot survive the reshape, and the
// compiler turned both operands into batch splits by all-to-alls before every weight gradient;
// here any leading axis splits both operands and leaves partial sums. Its kernels are the
// matmul kernels on the rows (no copies), with the same dtypes and float32_out.

#include "oneflowlike/params.h"
#include "oneflowlike/tensor.h"

namespace ofl {

struct MatmulParams {
  bool transpose_a = false;
  bool transpose_b = false;
  double alpha = 1.0;
  bool float32_out = false;  // float16 or bfloat16 operands only
  OFL_PARAMS(MatmulParams, transpose_a, transpose_b, alpha, float32_out)
};

namespace functional {
/// a (M, K) or (..., M, K) with b (K, N) -> (..., M, N). transpose_a needs a 2-D a.
Tensor matmul(const Tensor& a, const Tensor& b, bool transpose_a = false, bool transpose_b = false,
              double alpha = 1.0);
/// a (..., M, K), b (..., K, N) with equal batch dims -> (..., M, N).
Tensor batch_matmul(const Tensor& a, const Tensor& b, bool transpose_a = false,
                    bool transpose_b = false, double alpha = 1.0);
/// a (..., K), b (..., N) with the same leading axes -> (K, N) = alpha * a^T b over all rows
/// (Note [Products over rows]).
Tensor broadcast_matmul_grad_b(const Tensor& a, const Tensor& b, double alpha = 1.0);
/// torch.nn.functional.linear: x (..., in) @ weight (out, in)^T + bias (out,). An undefined
/// bias means none.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());
}  // namespace functional

}  // namespace ofl
