#pragma once
// Matmuls of the 16-bit dtypes on the CPU through oneDNN's matmul primitive.
//
// Note [Low-precision matmul on the CPU]: bfloat16 operands go to oneDNN's bf16 matmul, which
// runs on AMX where the CPU has it (brg:avx512_core_amx_bf16 here), accumulates in float32 and
// rounds the result once to bfloat16. Creating a primitive JIT-compiles it (milliseconds), so
// primitives are cached by (dtype, shapes, transposes, alpha) for the life of the process.
// float16: this machine's oneDNN (2.6) has no f16 matmul on CPUs; where oneDNN refuses a
// dtype, the operands are widened to float32, multiplied by sgemm and rounded once, which is
// the same arithmetic (products and sums in float32) at float32 speed.

#include <cstdint>

#include "oneflowlike/dtype.h"

namespace ofl::cpu {

/// C[i] (m, n) = alpha * op(A[i]) @ op(B[i]) for i < batches, all row-major and contiguous,
/// A[i] stored (m, k) or, transposed, (k, m); B[i] (k, n) or (n, k). `dtype` is kBFloat16 or
/// kFloat16; the raw pointers hold that type.
void low_precision_matmul(DataType dtype, bool transpose_a, bool transpose_b, int64_t batches,
                          int64_t m, int64_t n, int64_t k, float alpha, const void* a,
                          const void* b, void* c);

}  // namespace ofl::cpu
