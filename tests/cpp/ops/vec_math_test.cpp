// The vectorisable float32 math of kernels/cpu/vec_math.h against the double <cmath> functions,
// over a dense sweep and the special values, and the float32 kernels built on it.

#include "oneflowlike/kernels/cpu/vec_math.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numbers>
#include <sstream>
#include <string>
#include <vector>

#include "oneflowlike/ops/unary.h"
#include "tests/cpp/ops/test_util.h"

namespace ofl {
namespace {

namespace vm = cpu::vec_math;
namespace F = functional;
using testing::make_tensor;
using testing::values_of;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kDenormMin = std::numeric_limits<float>::denorm_min();
constexpr float kFloatMin = std::numeric_limits<float>::min();

// |actual - expected| in float spacings at `expected` (the denormal spacing below FLT_MIN).
// Results beyond FLT_MAX count as 2^128, so inf next to FLT_MAX is a finite error; NaN must
// meet NaN.
double ulp_error(float actual, double expected) {
  if (std::isnan(expected) || std::isnan(actual)) {
    return std::isnan(expected) && std::isnan(actual) ? 0.0 : kInf;
  }
  const double cap = std::ldexp(1.0, 128);
  const double a = std::isinf(actual) ? std::copysign(cap, actual) : actual;
  const double e = std::clamp(expected, -cap, cap);
  int exponent = 0;
  std::frexp(e, &exponent);  // |e| in [2^(exponent-1), 2^exponent)
  const double spacing = std::ldexp(1.0, std::clamp(exponent - 24, -149, 104));
  return std::fabs(a - e) / spacing;
}

double abs_error(float actual, double expected) {
  if (std::isnan(expected) || std::isnan(actual)) {
    return std::isnan(expected) && std::isnan(actual) ? 0.0 : kInf;
  }
  return actual == expected ? 0.0 : std::fabs(actual - expected);
}

// 2^20 + 1 evenly spaced points over [-100, 100]; every 4099th bit pattern (all magnitudes,
// denormals included, both signs); 64 floats either side of each place where a function
// switches method or saturates; and the special values.
const std::vector<float>& sweep_inputs() {
  static const std::vector<float> inputs = [] {
    std::vector<float> xs;
    constexpr int kSteps = 1 << 20;
    for (int i = 0; i <= kSteps; ++i) xs.push_back(static_cast<float>(-100.0 + 200.0 * i / kSteps));
    for (uint64_t bits = 0; bits < (uint64_t{1} << 32); bits += 4099) {
      const float x = std::bit_cast<float>(static_cast<uint32_t>(bits));
      if (!std::isnan(x)) xs.push_back(x);
    }
    const float boundaries[] = {
        88.7228317f,  // largest x with finite exp(x)
        87.3365479f,  // exp(-x) = FLT_MIN: below it exp gives denormals
        103.972076f,  // exp(-x) = the smallest denormal
        104.0f,       // exp's lower clamp
        88.8f,        // exp's upper clamp
        0.625f,       // tanh: polynomial / exp
        9.01091385f,  // tanh reaches 1
        1.0f,         // erf: polynomial / erfc tail
        0.5f,         // erfc: polynomial / erfc tail
        3.9192059f,   // erf reaches 1
        10.1f,        // erfc's clamp
        14.2836561f,  // normal_cdf's clamp
        14.42f,       // normal_pdf's clamp
        16.6355324f,  // sigmoid reaches 1
    };
    for (const float b : boundaries) {
      for (const float s : {b, -b}) {
        float lo = s, hi = s;
        for (int i = 0; i < 64; ++i) {
          xs.push_back(lo);
          xs.push_back(hi);
          lo = std::nextafter(lo, -kInf);
          hi = std::nextafter(hi, kInf);
        }
      }
    }
    for (const float x : {0.0f, -0.0f, kInf, -kInf, kNaN, -kNaN, kDenormMin, -kDenormMin, 1e-40f,
                          -1e-40f, kFloatMin, -kFloatMin, kFloatMin / 2, 1e-30f,
                          std::numeric_limits<float>::max(), -std::numeric_limits<float>::max()}) {
      xs.push_back(x);
    }
    return xs;
  }();
  return inputs;
}

double normal_cdf(double x) { return 0.5 * std::erfc(-x / std::numbers::sqrt2); }
double normal_pdf(double x) {
  return std::numbers::inv_sqrtpi / std::numbers::sqrt2 * std::exp(-0.5 * x * x);
}
double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

struct Worst {
  double error = 0;
  float at = 0;
};

// The largest error of f against the double reference over the sweep. f runs in a plain loop
// over an array, as in the kernels, so that the vectorised code is what gets checked.
template <class Fn, class Ref, class Err>
Worst worst_error(Fn f, Ref reference, Err error) {
  const std::vector<float>& xs = sweep_inputs();
  std::vector<float> ys(xs.size());
  for (size_t i = 0; i < xs.size(); ++i) ys[i] = f(xs[i]);
  Worst worst;
  for (size_t i = 0; i < xs.size(); ++i) {
    const double e = error(ys[i], reference(static_cast<double>(xs[i])));
    if (!(e <= worst.error)) worst = {e, xs[i]};
  }
  return worst;
}

std::string where(const Worst& w) {
  std::ostringstream out;
  out.precision(9);
  out << "worst error " << w.error << " at x = " << w.at << " (bits 0x" << std::hex
      << std::bit_cast<uint32_t>(w.at) << ")";
  return out.str();
}

// Bounds are the errors measured over all floats (Note [Vectorisable math]) rounded up.
TEST(VecMath, ExpIsWithinOneAndAHalfUlpOfDoubleExp) {
  const Worst w = worst_error([](float x) { return vm::exp(x); },
                              [](double x) { return std::exp(x); }, ulp_error);
  EXPECT_LE(w.error, 1.5) << where(w);
}

TEST(VecMath, TanhIsWithinOneAndAHalfUlpOfDoubleTanh) {
  const Worst w = worst_error([](float x) { return vm::tanh(x); },
                              [](double x) { return std::tanh(x); }, ulp_error);
  EXPECT_LE(w.error, 1.5) << where(w);
}

TEST(VecMath, SigmoidIsWithinTwoAndAHalfUlpEvenWhereItIsTiny) {
  const Worst w = worst_error([](float x) { return vm::sigmoid(x); }, sigmoid, ulp_error);
  EXPECT_LE(w.error, 2.5) << where(w);
}

// sigmoids gives sigmoid(x) and sigmoid(-x) from one exponential and one division, each
// within 3 ulp (2.53 measured: the reciprocal's rounding on top of sigmoid's).
TEST(VecMath, SigmoidsAreBothWithinThreeUlp) {
  const Worst s = worst_error(
      [](float x) {
        float a, b;
        vm::sigmoids(x, &a, &b);
        return a;
      },
      sigmoid, ulp_error);
  EXPECT_LE(s.error, 3.0) << where(s);
  const Worst rest = worst_error(
      [](float x) {
        float a, b;
        vm::sigmoids(x, &a, &b);
        return b;
      },
      [](double x) { return sigmoid(-x); }, ulp_error);
  EXPECT_LE(rest.error, 3.0) << where(rest);
}

TEST(VecMath, ErfIsWithin1e7AbsoluteAndTwoUlpOfDoubleErf) {
  const auto f = [](float x) { return vm::erf(x); };
  const auto reference = [](double x) { return std::erf(x); };
  const Worst absolute = worst_error(f, reference, abs_error);
  EXPECT_LE(absolute.error, 1e-7) << where(absolute);
  const Worst ulp = worst_error(f, reference, ulp_error);
  EXPECT_LE(ulp.error, 2.0) << where(ulp);
}

TEST(VecMath, ErfcIsWithinSevenUlpIntoTheFarTail) {
  const Worst w = worst_error([](float x) { return vm::erfc(x); },
                              [](double x) { return std::erfc(x); }, ulp_error);
  EXPECT_LE(w.error, 7.0) << where(w);
}

TEST(VecMath, NormalCdfAndPdfAreWithinEightUlp) {
  const Worst cdf = worst_error([](float x) { return vm::normal_cdf(x); }, normal_cdf, ulp_error);
  EXPECT_LE(cdf.error, 8.0) << where(cdf);
  const Worst pdf = worst_error([](float x) { return vm::normal_pdf(x); }, normal_pdf, ulp_error);
  EXPECT_LE(pdf.error, 4.0) << where(pdf);
}

TEST(VecMath, SpecialValuesSaturateAndNaNPropagates) {
  for (const float nan : {kNaN, -kNaN}) {
    EXPECT_TRUE(std::isnan(vm::exp(nan)));
    EXPECT_TRUE(std::isnan(vm::tanh(nan)));
    EXPECT_TRUE(std::isnan(vm::sigmoid(nan)));
    EXPECT_TRUE(std::isnan(vm::erf(nan)));
    EXPECT_TRUE(std::isnan(vm::erfc(nan)));
    EXPECT_TRUE(std::isnan(vm::normal_cdf(nan)));
    EXPECT_TRUE(std::isnan(vm::normal_pdf(nan)));
  }
  EXPECT_EQ(vm::exp(0.0f), 1.0f);
  EXPECT_EQ(vm::exp(-0.0f), 1.0f);
  EXPECT_EQ(vm::exp(kDenormMin), 1.0f);
  EXPECT_EQ(vm::exp(kInf), kInf);
  EXPECT_EQ(vm::exp(89.0f), kInf);
  EXPECT_EQ(vm::exp(-kInf), 0.0f);
  EXPECT_EQ(vm::exp(-104.0f), 0.0f);
  EXPECT_EQ(vm::exp(-95.0f), static_cast<float>(std::exp(-95.0)));  // a denormal
  EXPECT_LT(vm::exp(88.7228317f), kInf);
  EXPECT_EQ(vm::exp(88.7228394f), kInf);

  EXPECT_TRUE(std::signbit(vm::tanh(-0.0f)));
  EXPECT_EQ(vm::tanh(-0.0f), 0.0f);
  EXPECT_EQ(vm::tanh(kDenormMin), kDenormMin);
  for (const float x : {9.1f, 20.0f, 100.0f, 1e30f, kInf}) {
    EXPECT_EQ(vm::tanh(x), 1.0f) << x;
    EXPECT_EQ(vm::tanh(-x), -1.0f) << x;
  }

  EXPECT_EQ(vm::sigmoid(0.0f), 0.5f);
  EXPECT_EQ(vm::sigmoid(-0.0f), 0.5f);
  EXPECT_EQ(vm::sigmoid(20.0f), 1.0f);
  EXPECT_EQ(vm::sigmoid(kInf), 1.0f);
  EXPECT_EQ(vm::sigmoid(-kInf), 0.0f);
  EXPECT_GT(vm::sigmoid(-100.0f), 0.0f);  // 3.7e-44, a denormal rather than 0

  EXPECT_TRUE(std::signbit(vm::erf(-0.0f)));
  EXPECT_EQ(vm::erf(kInf), 1.0f);
  EXPECT_EQ(vm::erf(-kInf), -1.0f);
  EXPECT_EQ(vm::erf(4.0f), 1.0f);
  EXPECT_EQ(vm::erfc(kInf), 0.0f);
  EXPECT_EQ(vm::erfc(-kInf), 2.0f);
  EXPECT_EQ(vm::erfc(0.0f), 1.0f);
  EXPECT_GT(vm::erfc(10.0f), 0.0f);  // 2.1e-45
  EXPECT_EQ(vm::normal_cdf(kInf), 1.0f);
  EXPECT_EQ(vm::normal_cdf(-kInf), 0.0f);
  EXPECT_EQ(vm::normal_cdf(0.0f), 0.5f);
  EXPECT_EQ(vm::normal_pdf(kInf), 0.0f);
  EXPECT_EQ(vm::normal_pdf(-kInf), 0.0f);
}

TEST(VecMath, DoubleOverloadsAreCmath) {
  for (const double x : {-3.5, -0.25, 0.0, 0.7, 12.0}) {
    EXPECT_EQ(vm::exp(x), std::exp(x));
    EXPECT_EQ(vm::tanh(x), std::tanh(x));
    EXPECT_EQ(vm::erf(x), std::erf(x));
    EXPECT_EQ(vm::erfc(x), std::erfc(x));
    EXPECT_EQ(vm::sigmoid(x), sigmoid(x));
    EXPECT_EQ(vm::normal_cdf(x), normal_cdf(x));
  }
}

// The library is compiled with other flags than this test (-march=x86-64-v3, so with FMA):
// check the float32 kernels themselves on the same sweep, finite inputs only.
std::vector<double> finite_sweep() {
  std::vector<double> xs;
  for (const float x : sweep_inputs()) {
    if (std::isfinite(x) && std::fabs(x) < 1e6f) xs.push_back(x);
  }
  return xs;
}

// error(actual, expected, x) of the kernel's output y for the inputs xs.
template <class Ref, class Err>
Worst worst_kernel_error(const Tensor& y, const std::vector<double>& xs, Ref reference, Err error) {
  const std::vector<double> ys = values_of(y);
  Worst worst;
  for (size_t i = 0; i < xs.size(); ++i) {
    const double e = error(static_cast<float>(ys[i]), reference(xs[i]), xs[i]);
    if (!(e <= worst.error)) worst = {e, static_cast<float>(xs[i])};
  }
  return worst;
}

TEST(VecMath, Float32KernelsKeepTheBoundsAsBuilt) {
  const std::vector<double> xs = finite_sweep();
  const Shape shape({static_cast<int64_t>(xs.size())});
  const Tensor x = make_tensor(xs, shape);
  const auto std_exp = [](double v) { return std::exp(v); };
  const auto std_tanh = [](double v) { return std::tanh(v); };
  const auto gelu = [](double v) { return v * normal_cdf(v); };
  const auto ulp = [](float actual, double expected, double) {
    return ulp_error(actual, expected);
  };
  // Below x = -13, Phi(x) is a denormal float and gelu = x Phi(x) is near one: count its error
  // in units of FLT_MIN there.
  const auto gelu_error = [](float actual, double expected, double v) {
    return v < -13 ? abs_error(actual, expected) / kFloatMin : ulp_error(actual, expected);
  };
  Worst w = worst_kernel_error(F::exp(x), xs, std_exp, ulp);
  EXPECT_LE(w.error, 1.5) << "exp: " << where(w);
  w = worst_kernel_error(F::tanh(x), xs, std_tanh, ulp);
  EXPECT_LE(w.error, 1.5) << "tanh: " << where(w);
  w = worst_kernel_error(F::sigmoid(x), xs, sigmoid, ulp);
  EXPECT_LE(w.error, 2.5) << "sigmoid: " << where(w);
  w = worst_kernel_error(F::gelu(x), xs, gelu, gelu_error);
  EXPECT_LE(w.error, 9.0) << "gelu: " << where(w);
}

// gelu's tanh form and the gelu gradients cancel (1 + tanh(u) as tanh(u) nears -1, and
// Phi(x) + x phi(x) crosses 0), so they are held to an absolute bound scaled by max(1, |x|),
// which is what the formulas allow in float32.
TEST(VecMath, Float32GeluTanhAndGeluGradientsAreWithinAbsoluteBounds) {
  const std::vector<double> xs = finite_sweep();
  const Shape shape({static_cast<int64_t>(xs.size())});
  const Tensor x = make_tensor(xs, shape);
  const Tensor ones = make_tensor(std::vector<double>(xs.size(), 1.0), shape);
  const double k = std::sqrt(2 / std::numbers::pi);
  const auto gelu_tanh = [k](double v) {
    return 0.5 * v * (1 + std::tanh(k * (v + 0.044715 * v * v * v)));
  };
  const auto gelu_tanh_grad = [k](double v) {
    const double t = std::tanh(k * (v + 0.044715 * v * v * v));
    return 0.5 * (1 + t) + 0.5 * v * (1 - t * t) * k * (1 + 3 * 0.044715 * v * v);
  };
  const auto gelu_grad = [](double v) { return normal_cdf(v) + v * normal_pdf(v); };
  const auto scaled = [](float actual, double expected, double v) {
    return abs_error(actual, expected) / std::max(1.0, std::fabs(v));
  };
  Worst w = worst_kernel_error(F::gelu(x, "tanh"), xs, gelu_tanh, scaled);
  EXPECT_LE(w.error, 3e-7) << "gelu tanh: " << where(w);
  // Note [GELU's tanh form as a sigmoid]: x sigmoid(2u) keeps its relative accuracy where
  // 1 + tanh(u) would cancel (the reference is the same sigmoid in double, which does not
  // cancel either); in ulp of the result, down to where it underflows, per unit of |2u| + 1:
  // e^-2u multiplies 2u's own rounding by |2u|, which no formula in float avoids.
  const auto two_u = [k](double v) { return 2 * k * (v + 0.044715 * v * v * v); };
  const auto gelu_sigmoid = [&](double v) { return v / (1 + std::exp(-two_u(v))); };
  const auto relative = [&](float actual, double expected, double v) {
    const double ulps = std::fabs(expected) < kFloatMin ? abs_error(actual, expected) / kFloatMin
                                                        : ulp_error(actual, expected);
    return ulps / (1 + std::fabs(two_u(v)));
  };
  w = worst_kernel_error(F::gelu(x, "tanh"), xs, gelu_sigmoid, relative);
  EXPECT_LE(w.error, 4.0) << "gelu tanh, relative: " << where(w);
  // Far out the gradient is 0 or dy, not 0 * inf: 2 x du overflows beyond |x| = 1.2e13, du
  // itself beyond 5e19, and x^2 beyond 1.8e19.
  for (DataType dtype : {DataType::kFloat32, DataType::kBFloat16, DataType::kFloat64}) {
    const Tensor far =
        make_tensor({-3e38, -1e20, -1e15, -1e13, 1e13, 1e15, 1e20, 3e38}, Shape({8}), dtype);
    const Tensor dy = make_tensor(std::vector<double>(8, 0.75), Shape({8}), dtype);
    EXPECT_EQ(values_of(F::gelu_grad(far, dy, "tanh")),
              (std::vector<double>{0, 0, 0, 0, 0.75, 0.75, 0.75, 0.75}))
        << dtype_name(dtype);
  }
  w = worst_kernel_error(F::gelu_grad(x, ones), xs, gelu_grad, scaled);
  EXPECT_LE(w.error, 3e-7) << "gelu_grad: " << where(w);
  w = worst_kernel_error(F::gelu_grad(x, ones, "tanh"), xs, gelu_tanh_grad, scaled);
  EXPECT_LE(w.error, 3e-7) << "gelu_grad tanh: " << where(w);
}

}  // namespace
}  // namespace ofl
