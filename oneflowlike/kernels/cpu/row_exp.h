#pragma once
// Exponentials of a row against a shift, shared by the kernels that normalise rows (softmax,
// log_softmax, fused attention's online softmax).

#include <cstdint>

namespace ofl::cpu {

/// y[j] = exp(x[j] - shift) for j < n, and 0 where x[j] is -inf (a masked entry), also when
/// shift is -inf (a row with nothing unmasked); x may be y. vec_math's exp and a bit-mask select
/// for float, so GCC vectorises the loop (<cmath>'s exp never is); compiled twice, for the
/// build's target and for AVX-512 at 16 lanes, the CPU choosing at run time, the same bits
/// either way (Note [AVX-512 loops] in unary_functions.h, tested in avx512_loops_test.cpp).
void exp_shifted(const float* x, float* y, int64_t n, float shift);
void exp_shifted(const double* x, double* y, int64_t n, double shift);

/// The x86-64-v3 and x86-64-v4 copies of exp_shifted for float, for the test that compares them.
void exp_shifted_v3(const float* x, float* y, int64_t n, float shift);
void exp_shifted_v4(const float* x, float* y, int64_t n, float shift);

}  // namespace ofl::cpu
