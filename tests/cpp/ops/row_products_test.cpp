// Note [One-row products] in kernels/cpu/row_products.h: the one-row float32 product against a
// double reference over row counts and lengths that leave partial groups of rows and tails
// shorter than the 16 lanes, with alpha; the AVX-512 and AVX2 copies give the same bits; and
// matmul of one row (a stored either way) is this kernel, bit for bit, and oneDNN's product of
// two rows' first row to float tolerance.

#include "oneflowlike/kernels/cpu/row_products.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "oneflowlike/kernels/cpu/onednn_matmul.h"
#include "oneflowlike/kernels/cpu/unary_functions.h"

namespace ofl::cpu {
namespace {

std::vector<float> random_values(int64_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(gen);
  return v;
}

TEST(OneRowProduct, MatchesADoubleReferenceAtEveryShapeOfTail) {
  for (int64_t n : {1, 3, 4, 7, 64, 517}) {
    for (int64_t k : {1, 15, 16, 17, 48, 129, 512}) {
      const std::vector<float> x = random_values(k, 1), w = random_values(n * k, 2);
      std::vector<float> y(static_cast<size_t>(n));
      one_row_product(x.data(), w.data(), y.data(), n, k, 0.5f);
      for (int64_t j = 0; j < n; ++j) {
        double want = 0;
        for (int64_t i = 0; i < k; ++i) want += double(x[i]) * double(w[j * k + i]);
        ASSERT_NEAR(y[j], 0.5 * want, 1e-5 * std::sqrt(double(k))) << n << " x " << k << " " << j;
      }
    }
  }
}

TEST(OneRowProduct, TheAvx512AndAvx2CopiesGiveTheSameBits) {
  if (!avx512_loops()) GTEST_SKIP() << "this CPU has no AVX-512 (x86-64-v4): one copy runs";
  for (int64_t k : {16, 33, 1376}) {
    const int64_t n = 301;
    const std::vector<float> x = random_values(k, 3), w = random_values(n * k, 4);
    std::vector<float> wide(static_cast<size_t>(n)), narrow(static_cast<size_t>(n));
    one_row_product(x.data(), w.data(), wide.data(), n, k, -0.37f, /*avx512=*/true);
    one_row_product(x.data(), w.data(), narrow.data(), n, k, -0.37f, /*avx512=*/false);
    EXPECT_EQ(wide, narrow) << k;
  }
}

TEST(OneRowProduct, IsWhatMatmulOfOneRowRuns) {
  const int64_t n = 70, k = 45;
  const std::vector<float> a = random_values(2 * k, 5), b = random_values(n * k, 6);
  std::vector<float> one(static_cast<size_t>(n)), two(static_cast<size_t>(2 * n));
  MatmulProduct product{/*transpose_a=*/false, /*transpose_b=*/true};
  product.m = 1, product.n = n, product.k = k, product.alpha = 2.0;
  EXPECT_EQ(onednn_matmul_scratchpad_bytes(DataType::kFloat32, product), 0);
  onednn_matmul(DataType::kFloat32, product, a.data(), b.data(), one.data());
  std::vector<float> kernel(static_cast<size_t>(n)), transposed(static_cast<size_t>(n));
  one_row_product(a.data(), b.data(), kernel.data(), n, k, 2.0f);
  EXPECT_EQ(one, kernel);      // the routing: matmul of one row is this kernel, bit for bit
  product.transpose_a = true;  // a stored (k, 1): the same k floats
  onednn_matmul(DataType::kFloat32, product, a.data(), b.data(), transposed.data());
  EXPECT_EQ(transposed, kernel);
  product.transpose_a = false;
  product.m = 2;  // oneDNN's primitive
  onednn_matmul(DataType::kFloat32, product, a.data(), b.data(), two.data());
  for (int64_t j = 0; j < n; ++j) EXPECT_NEAR(one[j], two[j], 1e-5f) << j;
}

}  // namespace
}  // namespace ofl::cpu
