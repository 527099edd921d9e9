#pragma once
// The per-element functions of the unary ops on the device, by the names kernels/cpu/
// unary_functions.h gives them on the CPU, for the unary kernels and for any kernel that
// fuses them. V is the compute type: float (also for float16 and bfloat16), double, or an
// integer type for neg and relu. The formulas beyond one call are kernels/unary_math.h's,
// shared with the CPU.

#include <type_traits>

#include "oneflowlike/kernels/unary_math.h"

namespace ofl::cuda_kernels {

/// The transcendental functions unary_math's formulas call, from the CUDA math library.
/// normcdf keeps its relative accuracy in the lower tail, as vec_math::normal_cdf does.
struct DeviceMath {
  template <class V>
  __device__ static V tanh(V x) {
    if constexpr (std::is_same_v<V, float>) {
      return ::tanhf(x);
    } else {
      return ::tanh(x);
    }
  }
  template <class V>
  __device__ static V normal_cdf(V x) {
    if constexpr (std::is_same_v<V, float>) {
      return ::normcdff(x);
    } else {
      return ::normcdf(x);
    }
  }
  /// sigmoid(x) and sigmoid(-x), each with its relative accuracy, from one exponential.
  template <class V>
  __device__ static void sigmoids(V x, V* s, V* rest) {
    V e;
    if constexpr (std::is_same_v<V, float>) {
      e = ::expf(-::fabsf(x));
    } else {
      e = ::exp(-::fabs(x));
    }
    // As vec_math::sigmoids: float multiplies by the reciprocal, double divides.
    if constexpr (std::is_same_v<V, float>) {
      const V inv = V(1) / (V(1) + e);
      *s = (x < V(0) ? e : V(1)) * inv;
      *rest = (x < V(0) ? V(1) : e) * inv;
    } else {
      *s = (x < V(0) ? e : V(1)) / (V(1) + e);
      *rest = (x < V(0) ? V(1) : e) / (V(1) + e);
    }
  }
  /// e^(-x^2/2) / sqrt(2 pi).
  template <class V>
  __device__ static V normal_pdf(V x) {
    constexpr V kInvSqrt2Pi = V(0.39894228040143267793994605993438);
    if constexpr (std::is_same_v<V, float>) {
      return kInvSqrt2Pi * ::expf(-0.5f * x * x);
    } else {
      return kInvSqrt2Pi * ::exp(-0.5 * x * x);
    }
  }
};

namespace unary_fn {

template <class V>
__device__ __forceinline__ V neg(V x) {
  return unary_math::neg(x);
}
template <class V>
__device__ __forceinline__ V abs(V x) {
  return unary_math::abs(x);
}
template <class V>
__device__ __forceinline__ V exp(V x) {
  if constexpr (std::is_same_v<V, float>) {
    return ::expf(x);
  } else {
    return ::exp(x);
  }
}
template <class V>
__device__ __forceinline__ V log(V x) {
  if constexpr (std::is_same_v<V, float>) {
    return ::logf(x);
  } else {
    return ::log(x);
  }
}
template <class V>
__device__ __forceinline__ V sqrt(V x) {
  if constexpr (std::is_same_v<V, float>) {
    return ::sqrtf(x);
  } else {
    return ::sqrt(x);
  }
}
/// 1 / sqrt(x) as the CPU computes it (rsqrtf is faster but not correctly rounded).
template <class V>
__device__ __forceinline__ V rsqrt(V x) {
  return V(1) / unary_fn::sqrt(x);
}
template <class V>
__device__ __forceinline__ V tanh(V x) {
  return DeviceMath::tanh(x);
}
template <class V>
__device__ __forceinline__ V relu(V x) {
  return unary_math::relu(x);
}
/// 1 / (1 + e^-x); for float as e / (1 + e) with e = e^x when x < 0, as vec_math::sigmoid, so
/// that tiny results keep their relative accuracy instead of flushing to 0.
template <class V>
__device__ __forceinline__ V sigmoid(V x) {
  if constexpr (std::is_same_v<V, float>) {
    const float e = ::expf(-::fabsf(x));
    return (x < 0.0f ? e : 1.0f) / (1.0f + e);
  } else {
    return V(1) / (V(1) + ::exp(-x));
  }
}
template <class V>
__device__ __forceinline__ V silu(V x) {
  return unary_math::silu_from_sigmoid(x, unary_fn::sigmoid(x));
}
template <class V>
__device__ __forceinline__ V silu_grad(V x, V dy) {
  return unary_math::silu_grad_from_sigmoid(x, unary_fn::sigmoid(x), dy);
}
template <class V>
__device__ __forceinline__ V gelu(V x) {
  return unary_math::gelu<DeviceMath>(x);
}
template <class V>
__device__ __forceinline__ V gelu_tanh(V x) {
  return unary_math::gelu_tanh<DeviceMath>(x);
}

}  // namespace unary_fn

}  // namespace ofl::cuda_kernels
