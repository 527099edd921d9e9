#pragma once
// The per-element functions of the unary ops, shared by their kernels and by the fused
// elementwise kernel so both compute the same values. The formulas beyond one call are in
// kernels/unary_math.h, which the CUDA kernels share.

#include <cmath>
#include <numbers>

#include "oneflowlike/common/parallel.h"
#include "oneflowlike/kernels/cpu/vec_math.h"
#include "oneflowlike/kernels/cpu/widened.h"
#include "oneflowlike/kernels/unary_math.h"
#include "oneflowlike/op.h"

namespace ofl::cpu {

/// y[i] = f(x[i]) over input 0 and output 0, split over the cores when large; f computes in
/// compute_of<T> (Note [Native bfloat16 loops] in widened.h). The loop flattens f into itself
/// (Note [Vectorisable math] in vec_math.h: left out of line, f stops the vectorisation).
template <class T, class F>
[[gnu::flatten]] void unary_loop(const T* x, T* y, int64_t begin, int64_t end, const F& f) {
  using C = compute_of<T>;
  for (int64_t i = begin; i < end; ++i) y[i] = static_cast<T>(f(static_cast<C>(x[i])));
}

// Note [AVX-512 loops]: the library targets x86-64-v3 (8 float lanes); the unary ops' loops
// (and their backward ops', the fused elementwise chains' steps, and the exponentials of
// softmax rows and of the fused attention's softmax steps, row_exp.h) also have a copy compiled
// for x86-64-v4, which runs where the CPU has AVX-512 (avx512_loops()): gelu's forward 1.9x
// (float32) to 2.2x (bf16) faster here. GCC's x86-64-v4 still prefers 256-bit vectors, so those
// copies also ask for prefer-vector-width=512 (16 lanes: gelu's tanh form a further 1.15x in
// float32 and 1.4x in bf16 on the Sapphire Rapids VM). Each element's arithmetic is the same in
// both copies (vec_math's branch-free formulas, FMA in both): with this compiler (GCC 12) the
// copies give the same bits for every transcendental the kernels use, tested with the library's
// own flags (tests/cpp/ops/avx512_loops_test.cpp), so results do not depend on whether a CPU
// has AVX-512 (a NaN's sign and payload excepted: they follow which operand an instruction
// passed on). A compiler that vectorised the formulas differently for 16 lanes could break
// that; the test would say so.
bool avx512_loops();

template <class T, class F>
[[gnu::flatten, gnu::target("arch=x86-64-v4,prefer-vector-width=512")]] void unary_loop_v4(
    const T* x, T* y, int64_t begin, int64_t end, const F& f) {
  using C = compute_of<T>;
  for (int64_t i = begin; i < end; ++i) y[i] = static_cast<T>(f(static_cast<C>(x[i])));
}

template <class T, class F>
void unary_kernel(const KernelContext& ctx, int64_t grain, F f) {
  const T* x = ctx.in(0).data<T>();
  T* y = ctx.out(0).data<T>();
  const bool wide = avx512_loops();
  parallel_for(ctx.out(0).numel(), grain, [&](int64_t begin, int64_t end) {
    if constexpr (std::is_same_v<T, float16>) {  // Note [float16 blocks] in widened.h
      float16_blocks<1>({x}, y, begin, end, [&](auto& v, int64_t n) {
        if (wide) {
          unary_loop_v4(v[0], v[0], 0, n, f);
        } else {
          unary_loop(v[0], v[0], 0, n, f);
        }
      });
    } else if (wide) {
      unary_loop_v4(x, y, begin, end, f);
    } else {
      unary_loop(x, y, begin, end, f);
    }
  });
}

}  // namespace ofl::cpu

namespace ofl::cpu::unary_fn {

/// The transcendental functions unary_math's formulas call, as vec_math has them. Everything
/// here is always inlined (Note [Vectorisable math] in vec_math.h: a call left out of line
/// stops the loop's vectorisation).
struct VecMath {
  template <class T>
  [[gnu::always_inline]] static T tanh(T x) {
    return vec_math::tanh(x);
  }
  template <class T>
  [[gnu::always_inline]] static T normal_cdf(T x) {
    return vec_math::normal_cdf(x);
  }
  template <class T>
  [[gnu::always_inline]] static T normal_pdf(T x) {
    return vec_math::normal_pdf(x);
  }
  template <class T>
  [[gnu::always_inline]] static void sigmoids(T x, T* s, T* rest) {
    vec_math::sigmoids(x, s, rest);
  }
};

template <class T>
[[gnu::always_inline]] inline T neg(T x) {
  return unary_math::neg(x);
}
template <class T>
[[gnu::always_inline]] inline T exp(T x) {
  return vec_math::exp(x);
}
template <class T>
[[gnu::always_inline]] inline T log(T x) {
  return std::log(x);
}
template <class T>
[[gnu::always_inline]] inline T sqrt(T x) {
  return std::sqrt(x);
}
template <class T>
[[gnu::always_inline]] inline T rsqrt(T x) {
  return T(1) / std::sqrt(x);
}
template <class T>
[[gnu::always_inline]] inline T tanh(T x) {
  return vec_math::tanh(x);
}
template <class T>
[[gnu::always_inline]] inline T relu(T x) {
  return unary_math::relu(x);
}
template <class T>
[[gnu::always_inline]] inline T sigmoid(T x) {
  return vec_math::sigmoid(x);
}
template <class T>
[[gnu::always_inline]] inline T silu(T x) {
  return unary_math::silu_from_sigmoid(x, vec_math::sigmoid(x));
}
template <class T>
[[gnu::always_inline]] inline T silu_grad(T x, T dy) {
  return unary_math::silu_grad_from_sigmoid(x, vec_math::sigmoid(x), dy);
}
/// gelu(x) = x * Phi(x), Phi the standard normal CDF.
template <class T>
[[gnu::always_inline]] inline T gelu(T x) {
  return unary_math::gelu<VecMath>(x);
}
/// Phi(x) ~ (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3))) / 2.
template <class T>
[[gnu::always_inline]] inline T gelu_tanh(T x) {
  return unary_math::gelu_tanh<VecMath>(x);
}

}  // namespace ofl::cpu::unary_fn
