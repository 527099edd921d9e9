#pragma once
// OFL_HOST_DEVICE marks arithmetic written once for the CPU and the CUDA kernels (GPU.md, "Make
// the untested part small"): __host__ __device__ under nvcc, nothing for the host compiler, so
// the CPU tests run the same code the GPU does. Such functions call only what both sides have:
// operators and the math functions below, never std:: functions that are host-only.

#include <math.h>  // the C functions in the global namespace, which nvcc also declares for devices

#ifndef OFL_HOST_DEVICE
#if defined(__CUDACC__)
#define OFL_HOST_DEVICE __host__ __device__
#else
#define OFL_HOST_DEVICE
#endif
#endif

// OFL_INLINE: inlined wherever it is called, for the per-element functions of the kernels: a
// call GCC leaves out of line stops the vectorisation of the loop around it (Note
// [Vectorisable math] in kernels/cpu/vec_math.h).
#ifndef OFL_INLINE
#if defined(__CUDACC__)
#define OFL_INLINE __forceinline__
#else
#define OFL_INLINE [[gnu::always_inline]] inline
#endif
#endif

/// Float and double overloads of the C math functions, for templates over the float type. Each
/// calls the C function of its precision (sqrtf, sqrt): the host's libm on the CPU, CUDA's on
/// the GPU. sqrt and fma are correctly rounded on both, so they agree bit for bit; log, cos and
/// pow may differ in the last ulp or two (CUDA's bounds: logf 1 ulp, cosf 2 ulp, pow 2 ulp).
namespace ofl::host_device {

OFL_HOST_DEVICE inline float sqrt(float x) { return ::sqrtf(x); }
OFL_HOST_DEVICE inline double sqrt(double x) { return ::sqrt(x); }
OFL_HOST_DEVICE inline float log(float x) { return ::logf(x); }
OFL_HOST_DEVICE inline double log(double x) { return ::log(x); }
OFL_HOST_DEVICE inline float cos(float x) { return ::cosf(x); }
OFL_HOST_DEVICE inline double cos(double x) { return ::cos(x); }
OFL_HOST_DEVICE inline float pow(float x, float y) { return ::powf(x, y); }
OFL_HOST_DEVICE inline double pow(double x, double y) { return ::pow(x, y); }
/// a * b + c with one rounding.
OFL_HOST_DEVICE inline float fma(float a, float b, float c) { return ::fmaf(a, b, c); }
OFL_HOST_DEVICE inline double fma(double a, double b, double c) { return ::fma(a, b, c); }

}  // namespace ofl::host_device
