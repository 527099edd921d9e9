// CPU kernels of matmul, broadcast_matmul_grad_b and batch_matmul: oneDNN's matmul primitive for
// float32 matmul and the 16-bit dtypes (onednn_matmul.h); cpu::gemm (gemm.h) for the rest: oneDNN's
// sgemm for float32 batch_matmul, a plain row-by-row loop for float64 (the gradient checks) and the
// integers.

#include "oneflowlike/ops/matmul.h"

#include <algorithm>
#include <vector>

#include "oneflowlike/common/parallel.h"
#include "oneflowlike/half.h"
#include "oneflowlike/kernels/cpu/gemm.h"
#include "oneflowlike/kernels/cpu/onednn_matmul.h"
#include "oneflowlike/op.h"

namespace ofl::cpu {

namespace {

// One row-major product C (m, n) = alpha * op(A) @ op(B), where op(A) is (m, k) and op(B) is
// (k, n); lda and ldb are the row strides of A and B as stored.
struct Gemm {
  bool transpose_a = false;
  bool transpose_b = false;
  int64_t m = 0, n = 0, k = 0;
  double alpha = 1.0;
  int64_t lda() const { return transpose_a ? m : k; }
  int64_t ldb() const { return transpose_b ? k : n; }
};

Gemm gemm_of(const MatmulProduct& product) {
  Gemm gm{product.transpose_a, product.transpose_b, product.m, product.n, product.k};
  gm.alpha = product.alpha;
  return gm;
}

template <class T>
void gemm(const Gemm& gm, const T* a, const T* b, T* c, bool may_parallelise) {
  if (gm.m == 0 || gm.n == 0) return;
  const T alpha = static_cast<T>(gm.alpha);
  if (std::is_same_v<T, float> || !may_parallelise) {
    cpu::gemm(gm.transpose_a, gm.transpose_b, gm.m, gm.n, gm.k, alpha, a, gm.lda(), b, gm.ldb(),
              T(0), c, gm.n);
    return;
  }
  // The plain loop (other types) in row blocks on every thread; oneDNN threads itself.
  const int64_t work_per_row = std::max<int64_t>(1, gm.n * std::max<int64_t>(gm.k, 1));
  parallel_for(gm.m, std::max<int64_t>(1, kParallelGrain / work_per_row),
               [&](int64_t begin, int64_t end) {
                 const T* a_rows = gm.transpose_a ? a + begin : a + begin * gm.lda();
                 cpu::gemm(gm.transpose_a, gm.transpose_b, end - begin, gm.n, gm.k, alpha, a_rows,
                           gm.lda(), b, gm.ldb(), T(0), c + begin * gm.n, gm.n);
               });
}

// One unbatched product of the kernel's operands and output.
template <class T>
void run_product(const KernelContext& ctx, const MatmulProduct& product) {
  if constexpr (uses_onednn_matmul(/*batched=*/false, dtype_of<T>())) {
    onednn_matmul(ctx.in(0).dtype(), product, ctx.in(0).raw_data(), ctx.in(1).raw_data(),
                  ctx.out(0).raw_data());
  } else {
    gemm(gemm_of(product), ctx.in(0).data<T>(), ctx.in(1).data<T>(), ctx.out(0).data<T>(),
         /*may_parallelise=*/true);
  }
}

// a (rows..., K) or (K, M), b (K, N) or (N, K): the N-d a is one tall matrix.
template <class T>
struct MatmulKernel {
  static void run(const KernelContext& ctx) {
    run_product<T>(ctx, matmul_product(/*batched=*/false, ctx.in(0).shape(), ctx.in(1).shape(),
                                       ctx.out(0).shape(), ctx.p<MatmulParams>()));
  }
};

// a (rows..., K), b (rows..., N): a^T b over the rows, the stored a read transposed (Note
// [Products over rows] in ops/matmul.h).
template <class T>
struct RowsProductKernel {
  static void run(const KernelContext& ctx) {
    run_product<T>(ctx, rows_product(ctx.in(0).shape(), ctx.in(1).shape(), ctx.p<MatmulParams>()));
  }
};

// a (batch..., M, K), b (batch..., K, N): one product per batch. Many small products run in
// parallel over batches; few large ones let each product use the threads.
template <class T>
struct BatchMatmulKernel {
  static void run(const KernelContext& ctx) {
    const MatmulProduct product =
        matmul_product(/*batched=*/true, ctx.in(0).shape(), ctx.in(1).shape(), ctx.out(0).shape(),
                       ctx.p<MatmulParams>());
    if constexpr (uses_onednn_matmul(/*batched=*/true, dtype_of<T>())) {
      onednn_matmul(ctx.in(0).dtype(), product, ctx.in(0).raw_data(), ctx.in(1).raw_data(),
                    ctx.out(0).raw_data());
      return;
    } else {
      const Gemm gm = gemm_of(product);
      const int64_t batches = product.batches;
      const int64_t a_step = gm.m * gm.k, b_step = gm.k * gm.n, c_step = gm.m * gm.n;
      const T* pa = ctx.in(0).data<T>();
      const T* pb = ctx.in(1).data<T>();
      T* pc = ctx.out(0).data<T>();
      const int64_t flops = std::max<int64_t>(1, gm.m * gm.n * std::max<int64_t>(gm.k, 1));
      constexpr int64_t kSmallProduct = int64_t{1} << 18;  // ~64^3: too small to share threads
      if (batches >= omp_get_max_threads() && flops <= kSmallProduct) {
        parallel_for(batches, std::max<int64_t>(1, kParallelGrain / flops),
                     [&](int64_t begin, int64_t end) {
                       for (int64_t i = begin; i < end; ++i) {
                         gemm(gm, pa + i * a_step, pb + i * b_step, pc + i * c_step,
                              /*may_parallelise=*/false);
                       }
                     });
      } else {
        for (int64_t i = 0; i < batches; ++i) {
          gemm(gm, pa + i * a_step, pb + i * b_step, pc + i * c_step, /*may_parallelise=*/true);
        }
      }
    }
  }
};

}  // namespace

OFL_REGISTER_KERNEL("matmul", kCPU, MatmulKernel, float, double, float16, bfloat16, int32_t,
                    int64_t);
OFL_REGISTER_KERNEL("broadcast_matmul_grad_b", kCPU, RowsProductKernel, float, double, float16,
                    bfloat16, int32_t, int64_t);
OFL_REGISTER_KERNEL("batch_matmul", kCPU, BatchMatmulKernel, float, double, float16, bfloat16,
                    int32_t, int64_t);

}  // namespace ofl::cpu
