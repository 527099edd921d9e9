// Note [AVX-512 loops] in kernels/cpu/unary_functions.h: the unary loops' copy compiled for
// x86-64-v4 against the x86-64-v3 one the library runs elsewhere, for every transcendental the
// unary kernels use, over a sweep that crosses each function's branches (tails, zero,
// infinities, NaN): the same bits. This file is compiled with the library's flags
// (tests/cpp/CMakeLists.txt), so both copies here are the ones the library has; built like the
// other tests (SSE2, no FMA) the default copy rounded differently and the comparison measured
// the test's build, not the library.

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "oneflowlike/kernels/cpu/row_exp.h"
#include "oneflowlike/kernels/cpu/unary_functions.h"

namespace ofl::cpu {
namespace {

TEST(Avx512Loops, GiveTheBitsOfTheLibrarysDefaultLoops) {
  if (!avx512_loops()) GTEST_SKIP() << "this CPU has no AVX-512 (x86-64-v4): one loop runs";
  std::vector<float> x;
  for (float v = -120.0f; v < 120.0f; v += 0.0137f) x.push_back(v);
  for (float v : {0.0f, -0.0f, std::numeric_limits<float>::infinity(),
                  -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(),
                  1e-40f, -1e-40f, 88.72f, -103.9f}) {
    x.push_back(v);
  }
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<float> narrow(n), wide(n);
  const auto same = [&](const char* name, auto f) {
    unary_loop(x.data(), narrow.data(), 0, n, f);
    unary_loop_v4(x.data(), wide.data(), 0, n, f);
    for (int64_t i = 0; i < n; ++i) {
      // A NaN's sign and payload depend on which operand an instruction passed on: any NaN
      // for a NaN.
      if (std::isnan(narrow[i]) && std::isnan(wide[i])) continue;
      ASSERT_EQ(std::bit_cast<uint32_t>(narrow[i]), std::bit_cast<uint32_t>(wide[i]))
          << name << "(" << x[i] << ")";
    }
  };
  same("exp", [](auto v) { return unary_fn::exp(v); });
  same("tanh", [](auto v) { return unary_fn::tanh(v); });
  same("sigmoid", [](auto v) { return unary_fn::sigmoid(v); });
  same("silu", [](auto v) { return unary_fn::silu(v); });
  same("gelu", [](auto v) { return unary_fn::gelu(v); });
  same("gelu_tanh", [](auto v) { return unary_fn::gelu_tanh(v); });
  same("gelu_grad",
       [](auto v) { return unary_math::gelu_grad<unary_fn::VecMath>(v, decltype(v)(0.75)); });
  same("gelu_tanh_grad",
       [](auto v) { return unary_math::gelu_tanh_grad<unary_fn::VecMath>(v, decltype(v)(0.75)); });
  same("silu_grad", [](auto v) { return unary_fn::silu_grad(v, decltype(v)(0.75)); });
}

// Softmax's and attention's exponentials (row_exp.h): the copy for x86-64-v4 gives the bits of
// the library's default one, masked entries (-inf) and a -inf shift included.
TEST(Avx512Loops, ShiftedExponentialsGiveTheBitsOfTheDefaultLoop) {
  if (!avx512_loops()) GTEST_SKIP() << "this CPU has no AVX-512 (x86-64-v4): one loop runs";
  constexpr float kInf = std::numeric_limits<float>::infinity();
  std::vector<float> x;
  for (float v = -150.0f; v < 100.0f; v += 0.0173f) x.push_back(v);
  for (float v : {0.0f, -0.0f, kInf, -kInf, std::numeric_limits<float>::quiet_NaN(), 1e-40f}) {
    x.push_back(v);
  }
  const int64_t n = static_cast<int64_t>(x.size());
  for (float shift : {0.0f, 3.5f, -20.0f, 88.0f, -kInf}) {
    std::vector<float> narrow(n), wide(n);
    exp_shifted_v3(x.data(), narrow.data(), n, shift);
    exp_shifted_v4(x.data(), wide.data(), n, shift);
    for (int64_t i = 0; i < n; ++i) {
      if (std::isnan(narrow[i]) && std::isnan(wide[i])) continue;
      ASSERT_EQ(std::bit_cast<uint32_t>(narrow[i]), std::bit_cast<uint32_t>(wide[i]))
          << "exp(" << x[i] << " - " << shift << ")";
    }
    // Masked entries are exactly 0, whatever the shift.
    EXPECT_EQ(std::bit_cast<uint32_t>(narrow[n - 3]), 0u) << shift;
  }
}

}  // namespace
}  // namespace ofl::cpu
