#pragma once
// The per-element math of the optimizer updates (ops/optimizer.h), shared by the CPU kernels
// (kernels/cpu/optimizer.cpp) and the CUDA ones (kernels/cuda/optimizer.cu), so that the CPU
// tests check what the GPU computes. Formulas follow torch.optim (single-tensor path) step for
// step. T is float or double; the per-step coefficients are computed in double, then rounded.

#include "oneflowlike/common/host_device.h"
#include "oneflowlike/ops/optimizer.h"

namespace ofl::optimizer_update {

/// What an SGD step multiplies by, in T.
template <class T>
struct SgdCoefficients {
  T momentum;
  T keep;  // 1 - dampening
  T weight_decay;
  bool use_momentum;
  bool nesterov;
};

template <class T>
SgdCoefficients<T> sgd_coefficients(const SgdParams& p) {
  return {static_cast<T>(p.momentum), static_cast<T>(1.0 - p.dampening),
          static_cast<T>(p.weight_decay), p.momentum != 0, p.nesterov};
}

/// One element of torch.optim.SGD's step: param and its momentum buffer, in place.
template <class T>
OFL_HOST_DEVICE inline void sgd_element(const SgdCoefficients<T>& c, T lr, T grad, T& param,
                                        T& buffer) {
  T d = grad;
  if (c.weight_decay != T(0)) d += c.weight_decay * param;
  if (c.use_momentum) {
    const T b = c.momentum * buffer + c.keep * d;
    buffer = b;
    d = c.nesterov ? d + c.momentum * b : b;
  }
  param -= lr * d;
}

/// The hyperparameters of an Adam step: AdamParams without its registry machinery, so that
/// a kernel can take it by value.
struct AdamHyperparameters {
  double beta1;
  double beta2;
  double epsilon;
  double weight_decay;
  bool decoupled_weight_decay;
};

inline AdamHyperparameters adam_hyperparameters(const AdamParams& p) {
  return {p.beta1, p.beta2, p.epsilon, p.weight_decay, p.decoupled_weight_decay};
}

/// What an Adam step multiplies by, in T; depends on lr and the step count, which live in
/// tensors (on the GPU, in device memory, so the kernel computes these itself).
template <class T>
struct AdamCoefficients {
  T step_size;  // lr / (1 - beta1^step)
  T bias_correction2_sqrt;
  T one_minus_beta1;
  T beta2;
  T one_minus_beta2;
  T epsilon;
  T weight_decay;
  T decay_factor;  // 1 - lr * weight_decay (AdamW)
  bool use_weight_decay;
  bool decoupled;
};

/// The coefficients of step `step` (1-based) with learning rate lr, computed in double.
template <class T>
OFL_HOST_DEVICE inline AdamCoefficients<T> adam_coefficients(const AdamHyperparameters& h,
                                                             double lr, double step) {
  const double bias_correction1 = 1.0 - host_device::pow(h.beta1, step);
  const double bias_correction2 = 1.0 - host_device::pow(h.beta2, step);
  AdamCoefficients<T> c;
  c.step_size = static_cast<T>(lr / bias_correction1);
  c.bias_correction2_sqrt = static_cast<T>(host_device::sqrt(bias_correction2));
  c.one_minus_beta1 = static_cast<T>(1.0 - h.beta1);
  c.beta2 = static_cast<T>(h.beta2);
  c.one_minus_beta2 = static_cast<T>(1.0 - h.beta2);
  c.epsilon = static_cast<T>(h.epsilon);
  c.weight_decay = static_cast<T>(h.weight_decay);
  c.decay_factor = static_cast<T>(1.0 - lr * h.weight_decay);
  c.use_weight_decay = h.weight_decay != 0;
  c.decoupled = h.decoupled_weight_decay;
  return c;
}

/// One element of torch.optim.Adam's (AdamW's when decoupled) step: param and its two moment
/// estimates, in place.
template <class T>
OFL_HOST_DEVICE inline void adam_element(const AdamCoefficients<T>& c, T grad, T& param, T& exp_avg,
                                         T& exp_avg_sq) {
  T g = grad;
  T x = param;
  if (c.use_weight_decay) {
    if (c.decoupled) {
      x *= c.decay_factor;
    } else {
      g += c.weight_decay * x;
    }
  }
  const T m = exp_avg + c.one_minus_beta1 * (g - exp_avg);
  const T v = c.beta2 * exp_avg_sq + c.one_minus_beta2 * g * g;
  exp_avg = m;
  exp_avg_sq = v;
  const T denom = host_device::sqrt(v) / c.bias_correction2_sqrt + c.epsilon;
  param = x - c.step_size * (m / denom);
}

/// Note [Dynamic loss scaling] in ops/optimizer.h: the scale, the count of good steps in a row
/// and the count of steps applied after a step that found `found` inf or nan gradient elements.
OFL_HOST_DEVICE inline void loss_scale_element(float growth_factor, float backoff_factor,
                                               float growth_interval, float found, float& scale,
                                               float& good_steps, float& steps) {
  if (found > 0) {
    scale *= backoff_factor;
    good_steps = 0;
    return;
  }
  steps += 1;
  good_steps += 1;
  if (good_steps >= growth_interval) {
    scale *= growth_factor;
    good_steps = 0;
  }
}

}  // namespace ofl::optimizer_update
