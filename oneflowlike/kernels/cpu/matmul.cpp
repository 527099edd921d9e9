// CPU kernels of matmul and batch_matmul. float32 goes to oneDNN's sgemm; other types use a
// plain row-by-row loop (float64 serves the gradient checks).

#include "oneflowlike/ops/matmul.h"

#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <vector>

#include "oneflowlike/common/parallel.h"
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

// The reference loop: C row i = sum_k A(i, k) * B row k (or dot products against B's rows when
// B is transposed), with A's row gathered first when A is transposed.
template <class T>
void gemm_rows(const Gemm& gm, const T* a, const T* b, T* c, int64_t row_begin, int64_t row_end) {
  const int64_t lda = gm.lda(), ldb = gm.ldb();
  const T alpha = static_cast<T>(gm.alpha);
  std::vector<T> a_row(gm.k);
  for (int64_t i = row_begin; i < row_end; ++i) {
    for (int64_t p = 0; p < gm.k; ++p) a_row[p] = gm.transpose_a ? a[p * lda + i] : a[i * lda + p];
    T* c_row = c + i * gm.n;
    if (gm.transpose_b) {  // B stored (n, k): contiguous dot products
      for (int64_t j = 0; j < gm.n; ++j) {
        const T* b_row = b + j * ldb;
        T acc = T(0);
        for (int64_t p = 0; p < gm.k; ++p) acc += a_row[p] * b_row[p];
        c_row[j] = alpha * acc;
      }
    } else {  // B stored (k, n): accumulate scaled rows of B
      std::fill(c_row, c_row + gm.n, T(0));
      for (int64_t p = 0; p < gm.k; ++p) {
        const T s = a_row[p];
        const T* b_row = b + p * ldb;
        for (int64_t j = 0; j < gm.n; ++j) c_row[j] += s * b_row[j];
      }
      if (alpha != T(1)) {
        for (int64_t j = 0; j < gm.n; ++j) c_row[j] *= alpha;
      }
    }
  }
}

template <class T>
void gemm(const Gemm& gm, const T* a, const T* b, T* c, bool may_parallelise) {
  if (gm.m == 0 || gm.n == 0) return;
  if constexpr (std::is_same_v<T, float>) {
    if (gm.k == 0) {
      std::fill(c, c + gm.m * gm.n, 0.0f);
      return;
    }
    // Inside a parallel region oneDNN runs single-threaded, so batches do not oversubscribe.
    const dnnl_status_t status =
        dnnl_sgemm(gm.transpose_a ? 'T' : 'N', gm.transpose_b ? 'T' : 'N', gm.m, gm.n, gm.k,
                   static_cast<float>(gm.alpha), a, gm.lda(), b, gm.ldb(), 0.0f, c, gm.n);
    OFL_ASSERT(status == dnnl_success) << "dnnl_sgemm failed with status " << status;
  } else {
    const int64_t work_per_row = std::max<int64_t>(1, gm.n * std::max<int64_t>(gm.k, 1));
    const int64_t grain =
        may_parallelise ? std::max<int64_t>(1, kParallelGrain / work_per_row) : gm.m;
    parallel_for(gm.m, grain,
                 [&](int64_t begin, int64_t end) { gemm_rows(gm, a, b, c, begin, end); });
  }
}

// a (rows..., K) or (K, M), b (K, N) or (N, K): the N-d a is one tall matrix.
template <class T>
struct MatmulKernel {
  static void run(const KernelContext& ctx) {
    const auto& p = ctx.p<MatmulParams>();
    const Shape& b = ctx.in(1).shape();
    const Shape& out = ctx.out(0).shape();
    Gemm gm{p.transpose_a, p.transpose_b};
    gm.m = out.count(0, out.ndim() - 1);
    gm.n = out[out.ndim() - 1];
    gm.k = p.transpose_b ? b[1] : b[0];
    gm.alpha = p.alpha;
    gemm(gm, ctx.in(0).data<T>(), ctx.in(1).data<T>(), ctx.out(0).data<T>(),
         /*may_parallelise=*/true);
  }
};

// a (batch..., M, K), b (batch..., K, N): one product per batch. Many small products run in
// parallel over batches; few large ones let each product use the threads.
template <class T>
struct BatchMatmulKernel {
  static void run(const KernelContext& ctx) {
    const auto& p = ctx.p<MatmulParams>();
    const Shape& a = ctx.in(0).shape();
    const Shape& out = ctx.out(0).shape();
    const int nd = out.ndim();
    Gemm gm{p.transpose_a, p.transpose_b};
    gm.m = out[nd - 2];
    gm.n = out[nd - 1];
    gm.k = p.transpose_a ? a[nd - 2] : a[nd - 1];
    gm.alpha = p.alpha;
    const int64_t batches = out.count(0, nd - 2);
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
};

}  // namespace

OFL_REGISTER_KERNEL("matmul", kCPU, MatmulKernel, float, double, int32_t, int64_t);
OFL_REGISTER_KERNEL("batch_matmul", kCPU, BatchMatmulKernel, float, double, int32_t, int64_t);

}  // namespace ofl::cpu
