// CUDA kernel of cumsum, adding in the CPU kernel's order (Note [Running sums] in ops/scan.h):
// one thread per line along dim, its running sum in double (int64 for integers), each output
// rounded once. Neighbouring threads take neighbouring inner columns, so the loads coalesce
// when dim is not the last axis; a scan along the last axis walks each line alone (a block-wide
// scan would be faster but would add in another order; nothing here has a GPU to measure it).

#include <type_traits>

#include "oneflowlike/kernels/cuda/common.cuh"
#include "oneflowlike/ops/index_ops.h"
#include "oneflowlike/ops/scan.h"

namespace ofl::cuda_kernels {

namespace {

template <class N>
struct RunningSum {
  using Sum = std::conditional_t<std::is_integral_v<N>, int64_t, double>;
  const N* x;
  N* out;
  int64_t extent, inner;
  bool reverse;
  __device__ void operator()(int64_t line) const {
    const int64_t o = line / inner, c = line % inner;
    Sum sum = 0;
    for (int64_t s = 0; s < extent; ++s) {
      const int64_t at = (o * extent + (reverse ? extent - 1 - s : s)) * inner + c;
      sum += static_cast<Sum>(load(x, at));
      if constexpr (std::is_integral_v<N>) {
        out[at] = static_cast<N>(sum);
      } else {
        store(out, at, static_cast<compute_t<N>>(sum));  // 16-bit through float32, as the CPU
      }
    }
  }
};

template <class T>
struct CumsumKernel {
  static void run(const KernelContext& ctx) {
    using N = native_t<T>;
    const auto& p = ctx.p<CumsumParams>();
    const Tensor& x = ctx.in(0);
    if (x.numel() == 0) return;
    const AxisExtents v = axis_extents(x.shape(), normalize_axis(p.dim, x.ndim(), "cumsum"));
    launch_for_each(ctx, "cumsum", v.outer * v.inner,
                    RunningSum<N>{data<T>(x), data<T>(ctx.out(0)), v.extent, v.inner, p.reverse});
  }
};

}  // namespace

OFL_REGISTER_KERNEL("cumsum", kCUDA, CumsumKernel, float, double, float16, bfloat16, int32_t,
                    int64_t);

}  // namespace ofl::cuda_kernels
