#pragma once
// Row-major GEMM for the CPU kernels (matmul, attention): one entry point, oneDNN's sgemm for
// float32 and a plain loop for the other types (float64 serves the gradient checks).

#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "oneflowlike/common/error.h"

namespace ofl::cpu {

/// C (m, n) = alpha * op(A) @ op(B) + beta * C, op(A) (m, k) and op(B) (k, n); lda, ldb, ldc are
/// the row strides as stored (A stored (k, m) when transposed, B (n, k)). beta 0 ignores C's old
/// values. Runs on the calling thread for types other than float32; oneDNN's sgemm runs
/// single-threaded inside a parallel region, so callers may parallelise around it.
template <class T>
void gemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
          int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  if constexpr (std::is_same_v<T, float>) {
    if (k > 0) {
      const dnnl_status_t status = dnnl_sgemm(transpose_a ? 'T' : 'N', transpose_b ? 'T' : 'N', m,
                                              n, k, alpha, a, lda, b, ldb, beta, c, ldc);
      OFL_ASSERT(status == dnnl_success) << "dnnl_sgemm failed with status " << status;
      return;
    }
  }
  std::vector<T> a_row(std::max<int64_t>(k, 0));
  std::vector<T> acc(n);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t p = 0; p < k; ++p) a_row[p] = transpose_a ? a[p * lda + i] : a[i * lda + p];
    if (transpose_b) {  // B stored (n, k): contiguous dot products
      for (int64_t j = 0; j < n; ++j) {
        const T* b_row = b + j * ldb;
        T dot = T(0);
        for (int64_t p = 0; p < k; ++p) dot += a_row[p] * b_row[p];
        acc[j] = dot;
      }
    } else {  // B stored (k, n): accumulate scaled rows of B
      std::fill(acc.begin(), acc.end(), T(0));
      for (int64_t p = 0; p < k; ++p) {
        const T s = a_row[p];
        const T* b_row = b + p * ldb;
        for (int64_t j = 0; j < n; ++j) acc[j] += s * b_row[j];
      }
    }
    T* c_row = c + i * ldc;
    for (int64_t j = 0; j < n; ++j) {
      const T scaled = alpha == T(1) ? acc[j] : alpha * acc[j];
      c_row[j] = beta == T(0) ? scaled : beta * c_row[j] + scaled;
    }
  }
}

}  // namespace ofl::cpu
