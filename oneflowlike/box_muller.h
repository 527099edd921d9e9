#pragma once
// The logarithm and cosine of the float32 Box-Muller transform (philox::normal_from_bits),
// written in float arithmetic that the CPU and CUDA round alike.
//
// Note [Box-Muller in float arithmetic]: a float32 normal draw is sqrt(-2 log u1) cos(2 pi u2),
// u1 = 1 - a 2^-24 in [2^-24, 1] and u2 = b 2^-24 in [0, 1) for 24-bit integers a and b. Through
// libm's logf and cosf it cost two scalar calls an element (randn at a third of PyTorch's
// speed) and CUDA's logf and cosf round differently from the host's. Here both are polynomials
// over exact reductions, made only of the operations IEEE 754 rounds once on every device:
// integer arithmetic, products, sums, fmaf and (in the caller) sqrtf. Every sum is an explicit
// fma or adds no product (a rounded product may be an fma's addend), so neither GCC's nor
// nvcc's contraction of a * b + c has anything to fuse: the x86-64, x86-64-v3 and AVX-512
// builds give the same bits (checked over every input) and the CUDA build should too (its test,
// RandomCuda, has not run on a GPU yet); the build uses no fast-math, which could reassociate.
// The loops calling them vectorise.
//  - log_of_unit(x): x = 2^e m with m in [sqrt(1/2), sqrt(2)) from x's bits, f = m - 1 exactly
//    (Sterbenz), log x = e ln2 + f - f^2/2 + f^3 P(f), ln2 split in two so that e ln2_hi is
//    exact (Cephes' split).
//  - cos_two_pi(b): the nearest quarter turn n = round(4 b 2^-24) is integer arithmetic, as is
//    the rest r = b 2^-24 - n/4 in [-1/8, 1/8] (exact as a float); cos(2 pi r) = 1 + z C(z) and
//    sin(2 pi r) = r S(z) with z = r^2, and the quarter turn picks one of them and its sign.
//    Reducing in turns rather than radians also drops libm's error in 2 pi u2 itself, which is
//    where cosf(2 pi u2) was least accurate (near its zeros).
// P, C and S are weighted least-squares fits (Lawson's iteration towards the minimax) of the
// float64 functions, rounded to float (scripts/dev/fit_box_muller.py). Largest errors against
// the float64 functions over every input each gets (2^24), in ulp of the float nearest the exact
// value: log_of_unit 0.85 (libm's logf: 0.79), cos_two_pi 0.99 (cosf(2 pi u2) was off by up to
// 6.4 ulp of 1, and by millions of ulp relative near its zeros, which cos_two_pi gives exactly),
// the normal 2.56 over 2^24 draws; tests/cpp/ops/random_test.cpp asserts bounds just above.
// The same bits on the x86-64, x86-64-v3 and x86-64-v4 builds were checked over every input.

#include <stdint.h>
#include <string.h>

#include "oneflowlike/common/host_device.h"

namespace ofl::philox {

namespace box_muller {

OFL_HOST_DEVICE OFL_INLINE uint32_t float_bits(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof(u));
  return u;
}

OFL_HOST_DEVICE OFL_INLINE float bits_float(uint32_t u) {
  float x;
  memcpy(&x, &u, sizeof(x));
  return x;
}

constexpr uint32_t kSqrtHalfBits = 0x3f3504f3u;  // sqrt(1/2) as a float
constexpr float kLn2Hi = 0.693359375f;           // 10 significant bits: e * kLn2Hi is exact
constexpr float kLn2Lo = -2.12194440e-4f;        // ln 2 - kLn2Hi
// log(1 + f) = f - f^2/2 + f^3 P(f) on [sqrt(1/2) - 1, sqrt(2) - 1]. (Scalars, not arrays:
// nvcc has no constexpr arrays in device code.)
constexpr float kP0 = 0.3333333134651184f, kP1 = -0.2500081956386566f, kP2 = 0.2000122368335724f,
                kP3 = -0.16623379290103912f, kP4 = 0.14201843738555908f,
                kP5 = -0.13160046935081482f, kP6 = 0.12760886549949646f,
                kP7 = -0.07633989304304123f;
// cos(2 pi r) = 1 + z C(z), sin(2 pi r) = r (2 pi + z S(z)), z = r^2, r in [-1/8, 1/8]; 2 pi
// in two parts, so that r 2pi_hi is rounded once.
constexpr float kC0 = -19.739208221435547f, kC1 = 64.93932342529297f, kC2 = -85.44324493408203f,
                kC3 = 59.229427337646484f;
constexpr float kTwoPiHi = 6.2831854820251465f;
constexpr float kTwoPiLo = -1.7484555314695172e-07f;
constexpr float kS0 = -41.341670989990234f, kS1 = 81.5937728881836f, kS2 = -75.44596862792969f;

}  // namespace box_muller

/// log(x) for x in [2^-24, 1] (Note [Box-Muller in float arithmetic]).
OFL_HOST_DEVICE OFL_INLINE float log_of_unit(float x) {
  using namespace box_muller;
  const uint32_t bits = float_bits(x);
  // The exponent counted from sqrt(1/2): floor division by 2^23 of a signed difference.
  const int32_t e = static_cast<int32_t>(bits - kSqrtHalfBits) >> 23;
  const float m = bits_float(bits - (static_cast<uint32_t>(e) << 23));
  const float f = m - 1.0f;
  const float ef = static_cast<float>(e);
  float p = ::fmaf(kP7, f, kP6);
  p = ::fmaf(p, f, kP5);
  p = ::fmaf(p, f, kP4);
  p = ::fmaf(p, f, kP3);
  p = ::fmaf(p, f, kP2);
  p = ::fmaf(p, f, kP1);
  p = ::fmaf(p, f, kP0);
  const float f2 = f * f;
  const float tail = ::fmaf(f2 * f, p, ef * kLn2Lo);
  return ::fmaf(ef, kLn2Hi, f + ::fmaf(-0.5f, f2, tail));
}

/// cos(2 pi b 2^-24) for an integer b in [0, 2^24) (Note [Box-Muller in float arithmetic]).
OFL_HOST_DEVICE OFL_INLINE float cos_two_pi(uint32_t b) {
  using namespace box_muller;
  const uint32_t n = (b + (1u << 21)) >> 22;  // the nearest quarter turn, 0..4
  const int32_t rest = static_cast<int32_t>(b) - static_cast<int32_t>(n << 22);
  const float r = static_cast<float>(rest) * 0x1.0p-24f;  // in [-1/8, 1/8), exact
  const float z = r * r;
  const float c = ::fmaf(::fmaf(::fmaf(kC3, z, kC2), z, kC1), z, kC0);
  const float s = ::fmaf(::fmaf(kS2, z, kS1), z, kS0);
  const float cos_r = ::fmaf(c, z, 1.0f);
  const float sin_r = ::fmaf(r, kTwoPiHi, r * ::fmaf(s, z, kTwoPiLo));
  // cos(n pi/2 + t) is cos t, -sin t, -cos t, sin t for n = 0, 1, 2, 3 (mod 4); integer
  // selects, which GCC vectorises where it would not a ?: on floats.
  const uint32_t odd = 0u - (n & 1u);
  const uint32_t picked = (float_bits(sin_r) & odd) | (float_bits(cos_r) & ~odd);
  const uint32_t negative = ((n + 1u) & 2u) << 30;
  return bits_float(picked ^ negative);
}

}  // namespace ofl::philox
