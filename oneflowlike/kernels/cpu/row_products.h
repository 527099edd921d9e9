#pragma once
// Note [One-row products]: generating a token runs every weight of the model once against one
// row (batch 1, one position): y (1, n) = alpha * x (1, k) @ W^T, W (n, k) row-major, a linear
// layer's product. oneDNN's matmul primitive reads a weight held in cache at about 25 GB/s for
// that shape on the test VM (512 x 512: 42 us, where torch's takes 26); it is tuned for
// products with many rows. Here each output is the dot product of x with one contiguous row of
// W, four rows at a time sharing x's loads: 60-75 GB/s in cache, and the memory's bandwidth out of
// it. The sums run in 16 lanes (element i of a row into lane i % 16, by fused multiply-adds),
// then the lanes are added in one fixed tree and the tail with std::fma, so the AVX-512 and the
// AVX2 copies give the same bits (the AVX2 copy holds the 16 lanes in two registers). Other
// products with one row (x @ W with W (k, n)) stay on oneDNN. The work is split over rows, so a
// product with at most four outputs (a dot product) runs on one thread.

#include <cstdint>

namespace ofl::cpu {

/// y[j] = alpha * sum_i x[i] * w[j * k + i] for j < n, on the kernels' threads.
void one_row_product(const float* x, const float* w, float* y, int64_t n, int64_t k, float alpha);
/// The same with the copy chosen: the AVX-512 one (the CPU must have it) or the AVX2 one.
void one_row_product(const float* x, const float* w, float* y, int64_t n, int64_t k, float alpha,
                     bool avx512);

}  // namespace ofl::cpu
