// One-row float32 products (Note [One-row products] in row_products.h).

#include "oneflowlike/kernels/cpu/row_products.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "oneflowlike/common/parallel.h"
#include "oneflowlike/kernels/cpu/unary_functions.h"

namespace ofl::cpu {

namespace {

constexpr int64_t kLanes = 16;
constexpr int64_t kRows = 4;  // rows of W per pass over x

// The 16 lanes added in one fixed tree, then the tail of the row after them.
[[gnu::always_inline]] inline float finish(float* lanes, const float* x, const float* row,
                                           int64_t from, int64_t k) {
  for (int64_t width = kLanes / 2; width >= 1; width /= 2) {
    for (int64_t l = 0; l < width; ++l) lanes[l] += lanes[l + width];
  }
  float sum = lanes[0];
  for (int64_t i = from; i < k; ++i) sum = std::fma(x[i], row[i], sum);
  return sum;
}

[[gnu::target("arch=x86-64-v4")]] void rows_avx512(const float* x, const float* w, float* y,
                                                   int64_t begin, int64_t end, int64_t k,
                                                   float alpha) {
  const int64_t whole = k / kLanes * kLanes;
  alignas(64) float lanes[kRows][kLanes];
  int64_t j = begin;
  for (; j + kRows <= end; j += kRows) {
    __m512 acc[kRows];
    for (auto& a : acc) a = _mm512_setzero_ps();
    for (int64_t i = 0; i < whole; i += kLanes) {
      const __m512 xv = _mm512_loadu_ps(x + i);
      for (int64_t r = 0; r < kRows; ++r) {
        acc[r] = _mm512_fmadd_ps(xv, _mm512_loadu_ps(w + (j + r) * k + i), acc[r]);
      }
    }
    for (int64_t r = 0; r < kRows; ++r) {
      _mm512_store_ps(lanes[r], acc[r]);
      y[j + r] = alpha * finish(lanes[r], x, w + (j + r) * k, whole, k);
    }
  }
  for (; j < end; ++j) {
    __m512 acc = _mm512_setzero_ps();
    for (int64_t i = 0; i < whole; i += kLanes) {
      acc = _mm512_fmadd_ps(_mm512_loadu_ps(x + i), _mm512_loadu_ps(w + j * k + i), acc);
    }
    _mm512_store_ps(lanes[0], acc);
    y[j] = alpha * finish(lanes[0], x, w + j * k, whole, k);
  }
}

// The same sums with each 16-lane accumulator held in two 8-lane registers (lo, hi).
void rows_avx2(const float* x, const float* w, float* y, int64_t begin, int64_t end, int64_t k,
               float alpha) {
  const int64_t whole = k / kLanes * kLanes;
  alignas(64) float lanes[kRows][kLanes];
  int64_t j = begin;
  for (; j + kRows <= end; j += kRows) {
    __m256 lo[kRows], hi[kRows];
    for (int64_t r = 0; r < kRows; ++r) lo[r] = hi[r] = _mm256_setzero_ps();
    for (int64_t i = 0; i < whole; i += kLanes) {
      const __m256 xl = _mm256_loadu_ps(x + i), xh = _mm256_loadu_ps(x + i + 8);
      for (int64_t r = 0; r < kRows; ++r) {
        const float* row = w + (j + r) * k + i;
        lo[r] = _mm256_fmadd_ps(xl, _mm256_loadu_ps(row), lo[r]);
        hi[r] = _mm256_fmadd_ps(xh, _mm256_loadu_ps(row + 8), hi[r]);
      }
    }
    for (int64_t r = 0; r < kRows; ++r) {
      _mm256_store_ps(lanes[r], lo[r]);
      _mm256_store_ps(lanes[r] + 8, hi[r]);
      y[j + r] = alpha * finish(lanes[r], x, w + (j + r) * k, whole, k);
    }
  }
  for (; j < end; ++j) {
    __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
    for (int64_t i = 0; i < whole; i += kLanes) {
      lo = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(w + j * k + i), lo);
      hi = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8), _mm256_loadu_ps(w + j * k + i + 8), hi);
    }
    _mm256_store_ps(lanes[0], lo);
    _mm256_store_ps(lanes[0] + 8, hi);
    y[j] = alpha * finish(lanes[0], x, w + j * k, whole, k);
  }
}

}  // namespace

void one_row_product(const float* x, const float* w, float* y, int64_t n, int64_t k, float alpha) {
  one_row_product(x, w, y, n, k, alpha, avx512_loops());
}

void one_row_product(const float* x, const float* w, float* y, int64_t n, int64_t k, float alpha,
                     bool wide) {
  // Chunks of whole 4-row groups, each at least a grain of the weight's elements.
  const int64_t groups = (n + kRows - 1) / kRows;
  parallel_for(groups, items_per_grain(kRows * k), [&](int64_t begin, int64_t end) {
    const int64_t first = begin * kRows, last = std::min(n, end * kRows);
    if (wide) {
      rows_avx512(x, w, y, first, last, k, alpha);
    } else {
      rows_avx2(x, w, y, first, last, k, alpha);
    }
  });
}

}  // namespace ofl::cpu
