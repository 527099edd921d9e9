// Note [bfloat16 tile products] in kernels/cpu/bf16_tiles.h: against the float64 product of the
// same bfloat16 values, for shapes off every block edge (rows not a multiple of 8, columns not
// of 16 or 32, odd k), both packings, and alpha and beta.

#include "oneflowlike/kernels/cpu/bf16_tiles.h"

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <iostream>
#include <limits>
#include <random>
#include <utility>
#include <vector>

namespace ofl::cpu {
namespace {

std::vector<bfloat16> random_bf16(int64_t n, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<bfloat16> v(n);
  for (auto& x : v) x = bfloat16(dist(gen));
  return v;
}

TEST(Bf16Tiles, ProductsEqualTheFloat64ProductOfTheSameValues) {
  if (!bf16_tiles::available()) {
    GTEST_SKIP() << "this CPU has no AVX512-BF16 (or OFL_BF16_TILES=0): the kernels that use "
                    "these products take their float32 path";
  }
  struct Case {
    int64_t m, n, k;
  };
  bf16_tiles::PackedB packed;  // reused across shapes, as the kernels do
  std::vector<float> c;
  // Every engine this CPU has (Note [AMX tile products]).
  std::vector<std::pair<const char*, decltype(&bf16_tiles::product)>> engines = {
      {"AVX512-BF16", &bf16_tiles::product_avx512}};
  if (bf16_tiles::amx_available()) {
    engines.emplace_back("AMX", &bf16_tiles::product_amx);
  } else {
    std::cout << "[   NOTE   ] no AMX tiles on this CPU (or OFL_BF16_AMX=0): the AMX engine is "
                 "not tested here\n";
  }
  for (const auto& [engine, product] : engines)
    for (const Case s :
         {Case{1, 1, 1}, Case{8, 16, 2}, Case{64, 128, 64}, Case{13, 37, 9}, Case{5, 17, 64},
          Case{9, 33, 1}, Case{64, 64, 127}, Case{3, 48, 3}, Case{40, 40, 40}, Case{33, 80, 70},
          // AMX reads A in place (whole tiles) with one row tile and one column tile at the
          // edges.
          Case{48, 40, 64}, Case{16, 17, 32}}) {
      for (bool transposed : {false, true}) {
        for (float beta : {0.0f, 1.0f}) {
          SCOPED_TRACE(testing::Message()
                       << engine << ": m " << s.m << ", n " << s.n << ", k " << s.k
                       << (transposed ? ", B given transposed" : "") << ", beta " << beta);
          const int64_t lda = s.k + 3, ldb = (transposed ? s.k : s.n) + 2, ldc = s.n + 5;
          const std::vector<bfloat16> a = random_bf16(s.m * lda, 1);
          // B (k, n) as given: x = B (k rows of n), or x = B^T (n rows of k).
          const std::vector<bfloat16> x = random_bf16((transposed ? s.n : s.k) * ldb, 2);
          const auto b = [&](int64_t p, int64_t j) {
            return static_cast<double>(
                static_cast<float>(transposed ? x[j * ldb + p] : x[p * ldb + j]));
          };
          if (transposed) {
            bf16_tiles::pack_transposed(x.data(), ldb, s.n, s.k, &packed);
          } else {
            bf16_tiles::pack(x.data(), ldb, s.k, s.n, &packed);
          }
          // What beta 1 adds, and what must stay past each row's n; under beta 0, NaN: C must not
          // be read.
          const float fill = beta == 0.0f ? std::numeric_limits<float>::quiet_NaN() : 0.5f;
          c.assign(s.m * ldc, fill);
          product(s.m, a.data(), lda, packed, 0.75f, beta, c.data(), ldc);
          for (int64_t i = 0; i < s.m; ++i) {
            for (int64_t j = 0; j < ldc; ++j) {
              if (j >= s.n) {
                ASSERT_TRUE(beta == 0.0f ? std::isnan(c[i * ldc + j]) : c[i * ldc + j] == 0.5f)
                    << "wrote past column " << s.n << " of row " << i;
                continue;
              }
              double want = 0, scale = 0;
              for (int64_t p = 0; p < s.k; ++p) {
                const double t = static_cast<float>(a[i * lda + p]) * b(p, j);
                want += t;
                scale += std::abs(t);
              }
              want = 0.75 * want + beta * 0.5;
              ASSERT_NEAR(c[i * ldc + j], want, 1e-6 * (scale + 1))
                  << "C(" << i << ", " << j << ")";
            }
          }
        }
      }
    }
}

TEST(Bf16Tiles, RoundingGivesRowsOrTheTranspose) {
  if (!bf16_tiles::available()) {
    GTEST_SKIP() << "this CPU has no AVX512-BF16 (or OFL_BF16_TILES=0)";
  }
  const std::vector<float> x{1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f};  // (2, 3)
  std::vector<bfloat16> out;
  bf16_tiles::round_to(x.data(), 3, 2, 3, /*transpose=*/false, &out);
  ASSERT_EQ(out.size(), 6u);
  EXPECT_EQ(static_cast<float>(out[5]), 6.0f);
  bf16_tiles::round_to(x.data(), 3, 3, 2, /*transpose=*/true, &out);  // x^T (3, 2)
  EXPECT_EQ(static_cast<float>(out[1]), 4.0f);
  EXPECT_EQ(static_cast<float>(out[4]), 3.0f);
  bf16_tiles::round_to(std::vector<float>{1.00390625f}.data(), 1, 1, 1, false, &out);
  EXPECT_EQ(static_cast<float>(out[0]), 1.0f);  // 1 + 2^-8 rounds to even
  // Off every 16-lane edge, both ways, bit for bit the scalar rounding (bfloat16(float)).
  std::mt19937_64 gen(3);
  std::normal_distribution<float> dist(0.0f, 100.0f);
  // Whole 16 x 16 blocks (transposed in registers) and edges in both directions.
  for (const auto [rows, cols, ld] :
       {std::array<int64_t, 3>{37, 29, 31}, std::array<int64_t, 3>{70, 50, 53},
        std::array<int64_t, 3>{64, 128, 128}}) {
    std::vector<float> y(rows * ld);
    for (float& v : y) v = dist(gen);
    bf16_tiles::round_to(y.data(), ld, rows, cols, false, &out);
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = 0; j < cols; ++j) {
        ASSERT_EQ(out[i * cols + j].bits, bfloat16(y[i * ld + j]).bits) << i << ", " << j;
      }
    }
    bf16_tiles::round_to(y.data(), ld, cols, rows, true, &out);  // (cols, rows) = y^T
    for (int64_t i = 0; i < cols; ++i) {
      for (int64_t j = 0; j < rows; ++j) {
        ASSERT_EQ(out[i * rows + j].bits, bfloat16(y[j * ld + i]).bits) << i << ", " << j;
      }
    }
  }
}

}  // namespace
}  // namespace ofl::cpu
