// CUDA kernel of rotary_embedding, computing what kernels/cpu/rotary.cpp computes: one thread
// per pair, in float32 for float32 and the 16-bit dtypes (Note [Rotary embedding]).

#include "oneflowlike/kernels/cuda/common.cuh"
#include "oneflowlike/kernels/rotary_math.h"
#include "oneflowlike/ops/rotary.h"

namespace ofl::cuda_kernels {

namespace {

template <class N>
struct RotatePair {
  using V = compute_t<N>;
  const N* x;
  const N* cos;
  const N* sin;
  N* y;
  RotaryDims d;
  bool interleaved;
  V sign;

  __device__ void operator()(int64_t k) const {
    const int64_t half = d.head_dim / 2;
    const int64_t r = k / half, i = k % half;
    const int64_t t = d.position(r);
    const auto [a, b] = rotary_math::pair_offsets(i, d.head_dim, interleaved);
    const int64_t row = r * d.head_dim;
    V y1, y2;
    rotary_math::rotate<V>(load(x, row + a), load(x, row + b), load(cos, t * half + i),
                           sign * load(sin, t * half + i), &y1, &y2);
    store(y, row + a, y1);
    store(y, row + b, y2);
  }
};

template <class T>
struct RotaryKernel {
  static void run(const KernelContext& ctx) {
    using N = native_t<T>;
    const RotaryParams& p = ctx.p<RotaryParams>();
    const RotaryDims d = rotary_dims(ctx.in(0).shape(), p.seq_axis);
    launch_for_each(ctx, "rotary_embedding", d.rows() * (d.head_dim / 2),
                    RotatePair<N>{data<T>(ctx.in(0)), data<T>(ctx.in(1)), data<T>(ctx.in(2)),
                                  data<T>(ctx.out(0)), d, p.interleaved,
                                  p.inverse ? compute_t<N>(-1) : compute_t<N>(1)});
  }
};

}  // namespace

OFL_REGISTER_KERNEL("rotary_embedding", kCUDA, RotaryKernel, float, float16, bfloat16, double);

}  // namespace ofl::cuda_kernels
