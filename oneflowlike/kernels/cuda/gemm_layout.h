#pragma once
// How the CUDA matmul kernels (matmul.cu) address one row-major matrix product: the element
// offsets the tiled kernel reads, and the column-major problem handed to cuBLASLt. Plain C++
// (no CUDA types), so the CPU tests check both against the CPU kernels (GPU.md, "Make the
// untested part small"); only the launches stay GPU-only.
//
// Note [Row-major products in cuBLASLt]: cuBLASLt's default order is column-major, and a
// row-major (r, c) matrix with row stride c is, byte for byte, the column-major (c, r) matrix
// with leading dimension c, its transpose. So the row-major out (m, n) is the column-major
// out^T (n, m), and out^T = op(b)^T @ op(a)^T: cuBLASLt's "A" is our b and its "B" is our a,
// each with its own transpose flag unchanged, and its (m, n, k) is our (n, m, k). We chose this
// over CUBLASLT_ORDER_ROW layout attributes because column-major is cuBLASLt's default and
// best-trodden order (what cuBLAS users of row-major data do), and the swap costs nothing.

#include <cstdint>

#include "oneflowlike/common/host_device.h"

namespace ofl::gemm {

/// out (m, n) = alpha * op(a) @ op(b), contiguous row-major, batch by batch: op(a) is (m, k),
/// stored (m, k), or (k, m) when transpose_a; op(b) is (k, n), stored (k, n), or (n, k) when
/// transpose_b.
struct RowMajorProduct {
  bool transpose_a = false;
  bool transpose_b = false;
  int64_t m = 0, n = 0, k = 0;

  /// Where op(a)(i, p) and op(b)(p, j) are in their stored matrices.
  OFL_HOST_DEVICE int64_t a_offset(int64_t i, int64_t p) const {
    return transpose_a ? p * m + i : i * k + p;
  }
  OFL_HOST_DEVICE int64_t b_offset(int64_t p, int64_t j) const {
    return transpose_b ? j * k + p : p * n + j;
  }
  /// Elements from one batch's matrix to the next.
  int64_t a_stride() const { return m * k; }
  int64_t b_stride() const { return k * n; }
  int64_t out_stride() const { return m * n; }
};

/// A stored column-major matrix as a cuBLASLt layout describes it (before its transpose flag):
/// rows, columns and the leading dimension (elements from one column to the next).
struct ColumnMajorMatrix {
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t ld = 0;
};

/// The column-major product d = op(a) @ op(b) that cuBLASLt computes, with op(a) (m, k),
/// op(b) (k, n) and d (m, n) in cuBLASLt's own terms.
struct ColumnMajorProduct {
  ColumnMajorMatrix a, b, d;
  bool transpose_a = false;
  bool transpose_b = false;
  int64_t m = 0, n = 0, k = 0;
};

/// The column-major product whose d is `p`'s row-major out (Note [Row-major products in
/// cuBLASLt]): cuBLASLt's a is p's b, its b is p's a.
inline ColumnMajorProduct column_major(const RowMajorProduct& p) {
  ColumnMajorProduct c;
  c.m = p.n;
  c.n = p.m;
  c.k = p.k;
  c.transpose_a = p.transpose_b;
  c.transpose_b = p.transpose_a;
  // b stored row-major (k, n) = column-major (n, k), ld n; or (n, k) = column-major (k, n), ld k.
  c.a = p.transpose_b ? ColumnMajorMatrix{p.k, p.n, p.k} : ColumnMajorMatrix{p.n, p.k, p.n};
  // a stored row-major (m, k) = column-major (k, m), ld k; or (k, m) = column-major (m, k), ld m.
  c.b = p.transpose_a ? ColumnMajorMatrix{p.m, p.k, p.m} : ColumnMajorMatrix{p.k, p.m, p.k};
  // out row-major (m, n) = column-major (n, m), ld n.
  c.d = ColumnMajorMatrix{p.n, p.m, p.n};
  return c;
}

}  // namespace ofl::gemm
