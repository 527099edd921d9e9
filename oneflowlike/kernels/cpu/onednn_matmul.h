#pragma once
// Matmuls on the CPU through oneDNN's matmul primitive: float32 matmul, and bfloat16 and
// float16 matmul and batch_matmul.
//
// Note [Low-precision matmul on the CPU]: bfloat16 operands go to oneDNN's bf16 matmul, which
// runs on AMX where the CPU has it (brg:avx512_core_amx_bf16 here), accumulates in float32 and
// rounds the result once to bfloat16. Creating a primitive JIT-compiles it (milliseconds), so
// primitives are cached by (dtype, shapes, transposes, alpha) for the life of the process.
// float16: this machine's oneDNN (2.6) has no f16 matmul on CPUs; where oneDNN refuses a
// dtype, the operands are widened to float32, multiplied by sgemm and rounded once, which is
// the same arithmetic (products and sums in float32) at float32 speed. Under float32_out the
// float32 result is written as it is (oneDNN's bf16 primitive with an f32 destination).
//
// Note [oneDNN matmul scratchpad]: float32 matmul went through dnnl_sgemm, which mallocs its
// packing buffers inside every call, on every OpenMP thread. glibc kept those freed megabytes in
// each thread's malloc arena, so a process held 20-35 MiB more than its plan, a different amount
// from run to run (docs/benchmarks.md, "Planned memory per rank under ZeRO"). The matmul
// primitive (brg:avx512_core here, as fast as sgemm on the GPT's products) takes a scratchpad
// from the caller instead: one per thread, kept at the largest call's size (at most about 2 MiB
// on the GPT), which the memory report counts as kernel workspace
// (onednn_matmul_scratchpad_bytes). batch_matmul in float32 keeps sgemm: its small products run
// one per thread inside a parallel region.

#include <cstdint>

#include "oneflowlike/dtype.h"
#include "oneflowlike/ops/matmul.h"
#include "oneflowlike/shape.h"

namespace ofl::cpu {

/// C[i] (m, n) = alpha * op(A[i]) @ op(B[i]) for i < batches, all row-major and contiguous,
/// A[i] stored (m, k) or, transposed, (k, m); B[i] (k, n) or (n, k).
struct MatmulProduct {
  bool transpose_a = false;
  bool transpose_b = false;
  int64_t batches = 1, m = 0, n = 0, k = 0;
  double alpha = 1.0;        // oneDNN takes it as a float
  bool float32_out = false;  // C is float32 for 16-bit A and B (MatmulParams::float32_out)
};

/// The product of a matmul (batched: batch_matmul) with operand b and result out.
MatmulProduct matmul_product(bool batched, const Shape& a, const Shape& b, const Shape& out,
                             const MatmulParams& p);

/// The product of broadcast_matmul_grad_b (Note [Products over rows] in ops/matmul.h): a
/// (rows..., K) and b (rows..., N) as the (K, N) product a^T b over the rows.
MatmulProduct rows_product(const Shape& a, const Shape& b, const MatmulParams& p);

/// Whether the CPU kernel of matmul (batched: batch_matmul) runs `dtype` on oneDNN's primitive.
constexpr bool uses_onednn_matmul(bool batched, DataType dtype) {
  return dtype == DataType::kBFloat16 || dtype == DataType::kFloat16 ||
         (dtype == DataType::kFloat32 && !batched);
}

/// The product through oneDNN's primitive (a float32 product of one row by a weight stored
/// (n, k): row_products.h's kernel, Note [One-row products]); `dtype` is kFloat32, kBFloat16 or
/// kFloat16 and the raw pointers hold that type (c float32 under product.float32_out).
void onednn_matmul(DataType dtype, const MatmulProduct& product, const void* a, const void* b,
                   void* c);

/// Bytes of the calling thread's scratchpad the product takes (Note [oneDNN matmul
/// scratchpad]) when run with the calling thread's OpenMP thread count; 0 where oneDNN has no
/// primitive for it.
int64_t onednn_matmul_scratchpad_bytes(DataType dtype, const MatmulProduct& product);

}  // namespace ofl::cpu
