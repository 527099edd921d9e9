#pragma once
// The per-element math of the unary ops and their gradients, written once for the CPU kernels
// (kernels/cpu/unary_functions.h) and the CUDA kernels (kernels/cuda/unary_functions.cuh), so
// that the CPU tests check the formulas the GPU runs (GPU.md, "Make the untested part small").
// Transcendental functions come from a `Math` policy with static tanh, normal_cdf, normal_pdf
// and sigmoids: vec_math on the CPU (loops that vectorise), the CUDA math library on the
// device.

#include <numbers>

#include "oneflowlike/common/host_device.h"

namespace ofl::unary_math {

template <class T>
inline constexpr T kGeluCubic = T(0.044715);
template <class T>
inline constexpr T kSqrt2OverPi = T(std::numbers::sqrt2* std::numbers::inv_sqrtpi);  // sqrt(2/pi)

template <class T>
OFL_HOST_DEVICE OFL_INLINE T neg(T x) {
  return static_cast<T>(-x);
}
template <class T>
OFL_HOST_DEVICE OFL_INLINE T abs(T x) {
  return x < T(0) ? static_cast<T>(-x) : x;
}
template <class T>
OFL_HOST_DEVICE OFL_INLINE T relu(T x) {
  return x > T(0) ? x : T(0);
}

/// gelu(x) = x * Phi(x), Phi the standard normal CDF.
template <class Math, class T>
OFL_HOST_DEVICE OFL_INLINE T gelu(T x) {
  return x * Math::normal_cdf(x);
}
// Note [GELU's tanh form as a sigmoid]: PyTorch's approximate="tanh" is
// x (1 + tanh(u)) / 2 with u = sqrt(2/pi) (x + 0.044715 x^3), and (1 + tanh(u)) / 2 is exactly
// sigmoid(2u). Written so, it takes one exponential and one division where tanh took a
// polynomial, an exponential, a division and a select (the CPU kernels' gelu and its gradient
// ran about 1 ns an element), and it keeps its relative accuracy where x is very negative,
// where 1 + tanh(u) cancels. The gradient needs sigmoid(-2u) = 1 - sigmoid(2u) too, which
// Math::sigmoids gives from the same exponential, again without the cancellation.

/// 2u of the tanh form: 2 sqrt(2/pi) (x + 0.044715 x^3).
template <class T>
OFL_HOST_DEVICE OFL_INLINE T gelu_tanh_argument(T x) {
  return T(2) * kSqrt2OverPi<T> * (x + kGeluCubic<T> * x * x * x);
}
/// Phi(x) ~ (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3))) / 2 = sigmoid(2u).
template <class Math, class T>
OFL_HOST_DEVICE OFL_INLINE T gelu_tanh(T x) {
  T s, rest;
  Math::sigmoids(gelu_tanh_argument(x), &s, &rest);
  return x * s;
}

/// silu(x) = x * sigmoid(x), given s = sigmoid(x) (each side computes its own sigmoid).
template <class T>
OFL_HOST_DEVICE OFL_INLINE T silu_from_sigmoid(T x, T s) {
  return x * s;
}
/// d/dx [x s(x)] = s + x s (1 - s) = s (1 + x (1 - s)), given s = sigmoid(x).
template <class T>
OFL_HOST_DEVICE OFL_INLINE T silu_grad_from_sigmoid(T x, T s, T dy) {
  return dy * s * (T(1) + x * (T(1) - s));
}

// The backward ops: dx from the saved forward value (y for tanh, sigmoid and relu; x for abs
// and gelu) and dy.
template <class T>
OFL_HOST_DEVICE OFL_INLINE T tanh_grad(T y, T dy) {
  return dy * (T(1) - y * y);
}
template <class T>
OFL_HOST_DEVICE OFL_INLINE T sigmoid_grad(T y, T dy) {
  return dy * y * (T(1) - y);
}
template <class T>
OFL_HOST_DEVICE OFL_INLINE T relu_grad(T y, T dy) {
  return y > T(0) ? dy : T(0);
}
template <class T>
OFL_HOST_DEVICE OFL_INLINE T abs_grad(T x, T dy) {
  return x > T(0) ? dy : (x < T(0) ? static_cast<T>(-dy) : T(0));
}
/// d/dx [x Phi(x)] = Phi(x) + x phi(x).
template <class Math, class T>
OFL_HOST_DEVICE OFL_INLINE T gelu_grad(T x, T dy) {
  return dy * (Math::normal_cdf(x) + x * Math::normal_pdf(x));
}
/// With u = k (x + c x^3), s = sigmoid(2u) and 1 - s = sigmoid(-2u):
/// d/dx [x s] = s + x s (1 - s) 2 du/dx = s + 2 k (t + 3 c t x^2), t = x s (1 - s).
template <class Math, class T>
OFL_HOST_DEVICE OFL_INLINE T gelu_tanh_grad(T x, T dy) {
  T s, rest;
  Math::sigmoids(gelu_tanh_argument(x), &s, &rest);
  // du/dx = k (1 + 3 c x^2) is never formed: it overflows for |x| above 5e19 in float (and 2 x
  // du above 1.2e13), where s (1 - s) is already exactly 0, making 0 * inf. t carries that 0
  // into both terms (t x x is 0 for every finite x), so far out the gradient is 0 or dy, as the
  // function's slope; t x x cannot overflow where t is not 0 (|x| under 11 in float, 20 in
  // double).
  const T t = x * (s * rest);
  return dy * (s + T(2) * kSqrt2OverPi<T> * (t + T(3) * kGeluCubic<T> * t * x * x));
}

}  // namespace ofl::unary_math
