#pragma once
// What the CUDA kernels share: the native types behind the low-precision dtypes, loads that
// compute in float32 (as the CPU kernels do), the stream a kernel launches on, and launches of
// grid-stride loops over the elements.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "oneflowlike/cuda/check.h"
#include "oneflowlike/cuda/device.h"
#include "oneflowlike/half.h"
#include "oneflowlike/op.h"

namespace ofl::cuda_kernels {

/// The CUDA type of a registry type: ofl::float16 and ofl::bfloat16 are bit-compatible
/// storage types; kernels read them as __half and __nv_bfloat16.
template <class T>
struct Native {
  using type = T;
};
template <>
struct Native<float16> {
  using type = __half;
};
template <>
struct Native<bfloat16> {
  using type = __nv_bfloat16;
};
template <class T>
using native_t = typename Native<T>::type;

/// The type arithmetic happens in: float for the 16-bit types.
template <class T>
struct Compute {
  using type = T;
};
template <>
struct Compute<__half> {
  using type = float;
};
template <>
struct Compute<__nv_bfloat16> {
  using type = float;
};
template <class T>
using compute_t = typename Compute<T>::type;

template <class T>
__device__ __forceinline__ compute_t<T> load(const T* p, int64_t i) {
  return static_cast<compute_t<T>>(p[i]);
}
template <>
__device__ __forceinline__ float load(const __half* p, int64_t i) {
  return __half2float(p[i]);
}
template <>
__device__ __forceinline__ float load(const __nv_bfloat16* p, int64_t i) {
  return __bfloat162float(p[i]);
}

/// Stores with round-to-nearest-even, as the CPU's float16/bfloat16 conversions do.
template <class T, class V>
__device__ __forceinline__ void store(T* p, int64_t i, V v) {
  p[i] = static_cast<T>(v);
}
template <class V>
__device__ __forceinline__ void store(__half* p, int64_t i, V v) {
  p[i] = __float2half_rn(static_cast<float>(v));
}
template <class V>
__device__ __forceinline__ void store(__nv_bfloat16* p, int64_t i, V v) {
  p[i] = __float2bfloat16_rn(static_cast<float>(v));
}

template <class T>
native_t<T>* data(const Tensor& t) {
  return static_cast<native_t<T>*>(t.raw_data());
}

/// The compute stream of the device holding output 0: kernels of one device run in launch order
/// there (Note [Event-gated acts] in actor/act_stream.h).
inline cudaStream_t stream_of(const KernelContext& ctx) {
  const Tensor& t = ctx.outputs.empty() ? ctx.in(0) : ctx.out(0);
  return static_cast<cudaStream_t>(
      cuda::stream(t.device().index, cuda::StreamKind::kCompute).native());
}

inline int device_of(const KernelContext& ctx) {
  return (ctx.outputs.empty() ? ctx.in(0) : ctx.out(0)).device().index;
}

constexpr int kBlock = 256;

template <class F>
__global__ void for_each_index(int64_t n, F f) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{blockDim.x} * gridDim.x) {
    f(i);
  }
}

/// Runs f(i) for i in [0, n) on the context's stream; raises naming `what` on a launch error.
template <class F>
void launch_for_each(const KernelContext& ctx, const char* what, int64_t n, F f) {
  if (n == 0) return;
  const int64_t blocks = std::min<int64_t>((n + kBlock - 1) / kBlock, int64_t{65535} * 8);
  for_each_index<<<static_cast<unsigned>(blocks), kBlock, 0, stream_of(ctx)>>>(n, f);
  cuda::check(cudaGetLastError(), what, device_of(ctx));
}

}  // namespace ofl::cuda_kernels
