#pragma once
// Float32 exp, tanh, sigmoid, erf, erfc and the normal distribution written so that GCC
// vectorises the loops that call them, which it never does for <cmath> (errno, no vector libm
// without -ffast-math). See Note [Vectorisable math].

#include <bit>
#include <cmath>
#include <cstdint>
#include <numbers>

namespace ofl::cpu::vec_math {

// Note [Vectorisable math]: inlined into every loop, whatever GCC's size heuristics say.
#define OFL_VEC_MATH [[gnu::always_inline]] inline

// Note [Vectorisable math]
// ~~~~~~~~~~~~~~~~~~~~~~~~
// Each float function is always inlined (a loop calling one out of line does not vectorise:
// GCC had left normal_cdf out of line in the one-thread instantiation of the GELU kernel, which
// then ran 8x slower than on two threads, 4.2 ms against 0.5 ms for 512 K elements) and
// branch-free: every path is computed and the result picked
// with bit-mask selects (detail::select), float-to-int conversions are bit tricks (never UB,
// even for NaN), and the clamps let NaN through so that NaN in gives NaN out.
// The double overloads call <cmath>: float64 only runs in gradient checks.
//
// Largest errors over all 2^32 float inputs against the double <cmath> functions, in ulp of
// the float result (denormal spacing below FLT_MIN), built with FMA as the kernels are
// (-march=x86-64-v3) / without FMA as the tests are; tests/cpp/ops/vec_math_test.cpp asserts
// bounds just above these on a 2M-point sweep:
//   exp         1.02 / 0.99 ulp, denormal results (x below -87.34) included. inf from
//               88.7228394 up, 0 below -103.972084.
//   tanh        1.33 / 1.33 ulp. Exactly +-1 from |x| = 9.0109139 up, as for the exact
//               tanh rounded; tanh(-0) = -0.
//   sigmoid     2.40 / 2.40 ulp, also where the result is tiny or denormal.
//   sigmoids    2.53 ulp each of sigmoid(x) and sigmoid(-x) (the reciprocal's rounding on top).
//   erf         7.4e-8 / 8.8e-8 absolute (1.24 / 1.48 ulp), worst just above |x| = 1 where
//               it switches to 1 - erfc.
//   erfc        6.24 / 6.64 ulp, relative down to the last denormal (0 from x = 10.057).
//   normal_cdf  6.49 / 7.34 ulp, relative also in the lower tail.
//   normal_pdf  3.66 / 3.66 ulp.
// The (1 + |x|/2)^-1 substitution, e^(-x^2) and their products give erfc its extra ulp.

namespace detail {

/// c ? a : b as bit masks. GCC does not if-convert a ?: (or std::min) on floats under the
/// default -ftrapping-math, and a branch in the loop body stops vectorisation.
OFL_VEC_MATH float select(bool c, float a, float b) {
  const uint32_t mask = 0u - static_cast<uint32_t>(c);
  return std::bit_cast<float>((std::bit_cast<uint32_t>(a) & mask) |
                              (std::bit_cast<uint32_t>(b) & ~mask));
}
/// min(x, hi) and max(x, lo) that return x when it is NaN.
OFL_VEC_MATH float at_most(float x, float hi) { return select(hi < x, hi, x); }
OFL_VEC_MATH float at_least(float x, float lo) { return select(x < lo, lo, x); }

/// e^c for c in [-104, 88.8] or NaN, the range exp clamps x to; callers that know their range
/// skip the clamp. Cephes' expf: n = round(c / ln 2), r = c - n ln 2 (Cody-Waite, two
/// constants), e^r by a degree-7 polynomial, times 2^n. 2^n is applied as two factors 2^(n/2)
/// so that denormal results are rounded once and n = 128 still overflows to inf; with
/// kNormalResult the caller promises c in [-87, 88] and one factor is enough.
template <bool kNormalResult = false>
OFL_VEC_MATH float exp_in_range(float c) {
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const float shifted = c * 1.44269504088896341f + kRound;
  const float n = shifted - kRound;
  const float r = (c - n * 0.693359375f) + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  // n from the low bits of `shifted`; unsigned arithmetic because NaN gives garbage bits.
  const auto ni =
      std::bit_cast<int32_t>(std::bit_cast<uint32_t>(shifted) - std::bit_cast<uint32_t>(kRound));
  if constexpr (kNormalResult) {
    return p * std::bit_cast<float>(static_cast<uint32_t>(ni + 127) << 23);
  } else {
    const int32_t n1 = ni >> 1;
    const int32_t n2 = ni - n1;
    const float scale1 = std::bit_cast<float>(static_cast<uint32_t>(n1 + 127) << 23);
    const float scale2 = std::bit_cast<float>(static_cast<uint32_t>(n2 + 127) << 23);
    return p * scale1 * scale2;
  }
}

}  // namespace detail

/// exp(x) for float: inf above 88.72, correctly rounded denormals down to -103.97, 0 below.
OFL_VEC_MATH float exp(float x) {
  // Beyond the clamp the result is inf or 0 anyway.
  return detail::exp_in_range(detail::at_most(detail::at_least(x, -104.0f), 88.8f));
}

/// tanh(x) for float: Cephes' tanhf. x + x^3 P(x^2) for |x| < 0.625, else
/// 1 - 2 / (e^(2|x|) + 1) with the sign of x, which reaches exactly 1 (and stays there once
/// e^(2|x|) overflows).
OFL_VEC_MATH float tanh(float x) {
  const float a = std::fabs(x);
  const float z = x * x;
  float p = -5.70498872745e-3f;
  p = p * z + 2.06390887954e-2f;
  p = p * z - 5.37397155531e-2f;
  p = p * z + 1.33314422036e-1f;
  p = p * z - 3.33332819422e-1f;
  const float small = x + x * z * p;
  // e^88 = 1.7e38 already makes `large` exactly 1.
  const float e = detail::exp_in_range</*kNormalResult=*/true>(detail::at_most(2.0f * a, 88.0f));
  const float large = 1.0f - 2.0f / (e + 1.0f);
  // The sign last: tanh is odd, and it keeps tanh(-0) = -0.
  return std::copysign(detail::select(a < 0.625f, small, large), x);
}

/// 1 / (1 + e^-x) for float, as e / (1 + e) with e = e^x for x < 0 so that tiny results keep
/// their relative accuracy instead of flushing to 0.
OFL_VEC_MATH float sigmoid(float x) {
  const float e = detail::exp_in_range(detail::at_least(-std::fabs(x), -104.0f));
  return detail::select(x < 0.0f, e, 1.0f) / (1.0f + e);
}

/// sigmoid(x) and sigmoid(-x) = 1 - sigmoid(x), each with its relative accuracy (neither as
/// 1 minus the other), from one e^-|x| and one division.
OFL_VEC_MATH void sigmoids(float x, float* s, float* rest) {
  const float e = detail::exp_in_range(detail::at_least(-std::fabs(x), -104.0f));
  const float inv = 1.0f / (1.0f + e);
  *s = detail::select(x < 0.0f, e, 1.0f) * inv;
  *rest = detail::select(x < 0.0f, 1.0f, e) * inv;
}
inline void sigmoids(double x, double* s, double* rest) {
  const double e = std::exp(-std::fabs(x));
  *s = (x < 0 ? e : 1.0) / (1.0 + e);
  *rest = (x < 0 ? 1.0 : e) / (1.0 + e);
}

namespace detail {

/// Below these |x|, erf and erfc use erf_small, above them erfc_tail. erfc switches earlier
/// because 1 - erf(x) loses relative accuracy as erf(x) nears 1.
constexpr float kErfSplit = 1.0f;
constexpr float kErfcSplit = 0.5f;
/// erfc(x) is below the smallest denormal beyond this.
constexpr float kErfcZero = 10.1f;

/// erf(x) for |x| <= 1 as x + x P(x^2), P of degree 6 (minimax relative error 1.2e-9 before
/// rounding to float; fitted with mpmath). Adding x last keeps the rounding error of P, which
/// is at most 0.16, small against the result.
OFL_VEC_MATH float erf_small(float x) {
  const float z = x * x;
  float p = 7.85388e-5f;
  p = p * z - 8.0101995e-4f;
  p = p * z + 5.1883287e-3f;
  p = p * z - 2.6853813e-2f;
  p = p * z + 1.12835854e-1f;
  p = p * z - 3.7612626e-1f;
  p = p * z + 1.2837917e-1f;
  return x + x * p;
}

/// a * a = hi + lo exactly (Dekker's product; checked for every float in [0.25, 15], and exact
/// wherever lo does not underflow). The split masks off the low 12 bits of the significand
/// rather than Veltkamp's 4097 a trick, which FMA contraction would break.
struct ExactSquare {
  float hi, lo;
};
OFL_VEC_MATH ExactSquare exact_square(float a) {
  const float top = std::bit_cast<float>(std::bit_cast<uint32_t>(a) & 0xFFFFF000u);
  const float bottom = a - top;
  const float hi = a * a;
  return {hi, ((top * top - hi) + 2.0f * top * bottom) + bottom * bottom};
}

/// erfc(a) for a in [0.5, 10.1], given a^2 = square.hi + square.lo exactly:
/// e^(-a^2) t Q(t) with t = 1 / (1 + a/2) and Q of degree 9 (minimax relative error 2.5e-9
/// before rounding). e^(-hi - lo) = e^-hi (1 - lo) as |lo| <= 2^-24 hi keeps the relative error
/// small even where a^2 is large.
OFL_VEC_MATH float erfc_tail(float a, ExactSquare square) {
  const float t = 1.0f / (1.0f + 0.5f * a);
  float q = -3.0349843e-2f;
  q = q * t + 6.682967e-2f;
  q = q * t + 6.297361e-2f;
  q = q * t - 2.7179414e-1f;
  q = q * t + 1.5207978e-1f;
  q = q * t + 1.8592807e-2f;
  q = q * t + 1.9300194e-1f;
  q = q * t + 2.4423042e-1f;
  q = q * t + 2.8232124e-1f;
  q = q * t + 2.8208637e-1f;
  return (q * t) * (exp_in_range(-square.hi) * (1.0f - square.lo));  // hi <= 102
}

}  // namespace detail

/// erf(x) for float; absolute error below 1e-7 (see Note [Vectorisable math]).
OFL_VEC_MATH float erf(float x) {
  const float a = detail::at_most(std::fabs(x), detail::kErfcZero);
  const float tail = detail::erfc_tail(a, detail::exact_square(a));
  return detail::select(a < detail::kErfSplit, detail::erf_small(x), std::copysign(1.0f - tail, x));
}

/// erfc(x) = 1 - erf(x) for float, with relative accuracy also where it is tiny.
OFL_VEC_MATH float erfc(float x) {
  const float a = detail::at_most(std::fabs(x), detail::kErfcZero);
  const float tail = detail::erfc_tail(a, detail::exact_square(a));
  return detail::select(a < detail::kErfcSplit, 1.0f - detail::erf_small(x),
                        detail::select(x < 0.0f, 2.0f - tail, tail));
}

/// Phi(x) = erfc(-x / sqrt 2) / 2, the standard normal CDF, for float. e^(-x^2/2) comes from x
/// itself rather than the rounded x / sqrt 2, so the lower tail keeps its relative accuracy.
OFL_VEC_MATH float normal_cdf(float x) {
  constexpr float kInvSqrt2 = static_cast<float>(1.0 / std::numbers::sqrt2);
  const float z = x * kInvSqrt2;
  const float a = detail::at_most(std::fabs(z), detail::kErfcZero);
  const detail::ExactSquare x2 = detail::exact_square(
      detail::at_most(std::fabs(x), detail::kErfcZero * std::numbers::sqrt2_v<float>));
  const float tail = 0.5f * detail::erfc_tail(a, {0.5f * x2.hi, 0.5f * x2.lo});
  return detail::select(a < detail::kErfcSplit, 0.5f + 0.5f * detail::erf_small(z),
                        detail::select(x < 0.0f, tail, 1.0f - tail));
}

/// phi(x) = e^(-x^2/2) / sqrt(2 pi), the standard normal density, for float.
OFL_VEC_MATH float normal_pdf(float x) {
  constexpr float kInvSqrt2Pi = static_cast<float>(std::numbers::inv_sqrtpi / std::numbers::sqrt2);
  // e^(-x^2/2) is 0 in float beyond |x| = 14.42; the clamp keeps x^2 / 2 <= 104.
  const detail::ExactSquare x2 = detail::exact_square(detail::at_most(std::fabs(x), 14.42f));
  return kInvSqrt2Pi * (detail::exp_in_range(-0.5f * x2.hi) * (1.0f - 0.5f * x2.lo));
}

inline double exp(double x) { return std::exp(x); }
inline double tanh(double x) { return std::tanh(x); }
inline double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
inline double erf(double x) { return std::erf(x); }
inline double erfc(double x) { return std::erfc(x); }
inline double normal_cdf(double x) { return 0.5 * std::erfc(-x / std::numbers::sqrt2); }
inline double normal_pdf(double x) {
  return std::numbers::inv_sqrtpi / std::numbers::sqrt2 * std::exp(-0.5 * x * x);
}

}  // namespace ofl::cpu::vec_math

#undef OFL_VEC_MATH
