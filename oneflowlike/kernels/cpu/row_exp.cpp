// Exponentials of a row against a shift (row_exp.h).

#include "oneflowlike/kernels/cpu/row_exp.h"

#include <cmath>
#include <limits>

#include "oneflowlike/kernels/cpu/unary_functions.h"
#include "oneflowlike/kernels/cpu/vec_math.h"

namespace ofl::cpu {

namespace {

[[gnu::always_inline]] inline void exp_shifted_body(const float* x, float* y, int64_t n,
                                                    float shift) {
  constexpr float kHidden = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < n; ++j) {
    const float v = x[j];
    y[j] = vec_math::detail::select(v == kHidden, 0.0f, vec_math::exp(v - shift));
  }
}

}  // namespace

[[gnu::flatten]] void exp_shifted_v3(const float* x, float* y, int64_t n, float shift) {
  exp_shifted_body(x, y, n, shift);
}

[[gnu::flatten, gnu::target("arch=x86-64-v4,prefer-vector-width=512")]] void exp_shifted_v4(
    const float* x, float* y, int64_t n, float shift) {
  exp_shifted_body(x, y, n, shift);
}

void exp_shifted(const float* x, float* y, int64_t n, float shift) {
  if (avx512_loops()) {
    exp_shifted_v4(x, y, n, shift);
  } else {
    exp_shifted_v3(x, y, n, shift);
  }
}

void exp_shifted(const double* x, double* y, int64_t n, double shift) {
  for (int64_t j = 0; j < n; ++j) {
    y[j] = x[j] == -std::numeric_limits<double>::infinity() ? 0.0 : std::exp(x[j] - shift);
  }
}

}  // namespace ofl::cpu
