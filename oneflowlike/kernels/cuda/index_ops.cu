// CUDA kernels of gather, gather_grad, index_select and index_select_grad, computing what
// kernels/cpu/index_ops.cpp computes. index_select and its gradient are embedding's slice
// kernels along any dim (index_slices.cuh). gather runs one thread per element; gather_grad one
// thread per line along dim, which adds its terms in index order into a line of dx of its own:
// no atomics, the CPU's sums bit for bit (float32 scratch for the 16-bit dtypes, rounded once).
// Bad indices: Note [Device index errors] in index_slices.cuh.

#include "oneflowlike/kernels/cuda/index_slices.cuh"
#include "oneflowlike/ops/index_ops.h"

namespace ofl::cuda_kernels {

namespace {

constexpr int kMaxIndexDims = 12;

// An index shaped `extent` into x (the same rank), and the strides of both.
struct Geometry {
  int ndim = 0, dim = 0;
  int64_t extent[kMaxIndexDims] = {}, index_stride[kMaxIndexDims] = {},
          x_stride[kMaxIndexDims] = {};
  int64_t rows = 1;  // x.shape[dim]
};

Geometry geometry(const char* op, const Shape& index, const Shape& x, int64_t dim) {
  OFL_CHECK(index.ndim() <= kMaxIndexDims, "[", op, "] on CUDA takes tensors of at most ",
            kMaxIndexDims, " dims. However, got index ", index.to_string(), ".");
  Geometry g;
  g.ndim = index.ndim();
  g.dim = std::max(0, normalize_axis(dim, x.ndim(), op));
  g.rows = x.ndim() == 0 ? 1 : x[g.dim];
  const std::vector<int64_t> is = index.strides(), xs = x.strides();
  for (int a = 0; a < g.ndim; ++a) {
    g.extent[a] = index[a];
    g.index_stride[a] = is[a];
    g.x_stride[a] = xs[a];
  }
  return g;
}

// The offset in x of index element e, with its dim coordinate taken as `v`.
__device__ __forceinline__ int64_t x_offset(const Geometry& g, int64_t e, int64_t v) {
  int64_t off = 0;
  for (int a = g.ndim - 1; a >= 0; --a) {
    const int64_t c = e % g.extent[a];
    e /= g.extent[a];
    off += (a == g.dim ? v : c) * g.x_stride[a];
  }
  return off;
}

template <class T, class I>
void gather(const KernelContext& ctx) {
  const Tensor &x = ctx.in(0), &index = ctx.in(1);
  const Geometry g = geometry("gather", index.shape(), x.shape(), ctx.p<IndexParams>().dim);
  const native_t<T>* src = data<T>(x);
  const I* idx = static_cast<const I*>(index.raw_data());
  native_t<T>* out = data<T>(ctx.out(0));
  launch_for_each(ctx, "gather", index.numel(), [=] __device__(int64_t e) {
    const I v = idx[e];
    if (!index_in_range(v, g.rows)) trap_bad_index("gather", "x.shape[dim]", v, e, g.rows);
    out[e] = src[x_offset(g, e, static_cast<int64_t>(v))];
  });
}

template <class T, class I>
void gather_grad(const KernelContext& ctx) {
  using N = native_t<T>;
  using A = compute_t<N>;
  constexpr bool kWiden = !std::is_same_v<A, N>;
  const Tensor &dy = ctx.in(0), &index = ctx.in(1), &dx = ctx.out(0);
  const Geometry g =
      geometry("gather_grad", index.shape(), dx.shape(), ctx.p<IndexGradParams>().dim);
  const int64_t total = dx.numel();
  if (total == 0) {  // nothing to sum into, but the indices are checked as on the CPU
    const I* idx = static_cast<const I*>(index.raw_data());
    launch_for_each(ctx, "gather_grad", index.numel(), [=] __device__(int64_t e) {
      const I v = idx[e];
      if (!index_in_range(v, g.rows)) trap_bad_index("gather_grad", "x.shape[dim]", v, e, g.rows);
    });
    return;
  }
  Scratch scratch(ctx, kWiden ? total * sizeof(A) : 0);
  A* sums = kWiden ? scratch.as<A>() : reinterpret_cast<A*>(data<T>(dx));
  cuda::check(cudaMemsetAsync(sums, 0, total * sizeof(A), stream_of(ctx)), "gather_grad",
              device_of(ctx));
  const int64_t length = g.ndim == 0 ? 1 : g.extent[g.dim];
  const int64_t lines = length == 0 ? 0 : index.numel() / length;
  const int64_t step = g.ndim == 0 ? 1 : g.index_stride[g.dim];
  const N* src = data<T>(dy);
  const I* idx = static_cast<const I*>(index.raw_data());
  // Line l: the index elements whose other coordinates are l's, as a number over the index's
  // shape without dim (first element e0), then e0 + t * step.
  launch_for_each(ctx, "gather_grad", lines, [=] __device__(int64_t l) {
    int64_t e0 = 0, rest = l;
    for (int a = g.ndim - 1; a >= 0; --a) {
      if (a == g.dim) continue;
      e0 += rest % g.extent[a] * g.index_stride[a];
      rest /= g.extent[a];
    }
    for (int64_t t = 0; t < length; ++t) {
      const int64_t e = e0 + t * step;
      const I v = idx[e];
      if (!index_in_range(v, g.rows)) trap_bad_index("gather_grad", "x.shape[dim]", v, e, g.rows);
      sums[x_offset(g, e, static_cast<int64_t>(v))] += load(src, e);
    }
  });
  if constexpr (kWiden) {
    N* y = data<T>(dx);
    launch_for_each(ctx, "gather_grad", total, [=] __device__(int64_t j) { store(y, j, sums[j]); });
  }
}

AxisExtents extents_of(const Shape& x, int64_t dim, const char* op) {
  return axis_extents(x, normalize_axis(dim, x.ndim(), op));
}

template <class T, class I>
void index_select(const KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  const AxisExtents v = extents_of(x.shape(), ctx.p<IndexParams>().dim, "index_select");
  gather_slices(ctx, SliceOp::kIndexSelect, x.raw_data(),
                static_cast<const I*>(ctx.in(1).raw_data()), ctx.out(0).raw_data(), v.outer,
                v.extent, ctx.in(1).numel(), v.inner, static_cast<int64_t>(dtype_size(x.dtype())));
}

template <class T, class I>
void index_select_grad(const KernelContext& ctx) {
  const Tensor& dx = ctx.out(0);
  const AxisExtents v = extents_of(dx.shape(), ctx.p<IndexGradParams>().dim, "index_select_grad");
  scatter_add_slices<T, I>(ctx, SliceOp::kIndexSelectGrad, ctx.in(0),
                           static_cast<const I*>(ctx.in(1).raw_data()), dx, v.outer, v.extent,
                           ctx.in(1).numel(), v.inner);
}

// Input 1 is the index: int32 or int64.
#define OFL_INDEX_KERNEL(Name, fn)                                           \
  template <class T>                                                         \
  struct Name {                                                              \
    static void run(const KernelContext& ctx) {                              \
      if (ctx.in(1).dtype() == DataType::kInt32) return fn<T, int32_t>(ctx); \
      fn<T, int64_t>(ctx);                                                   \
    }                                                                        \
  }

OFL_INDEX_KERNEL(GatherKernel, gather);
OFL_INDEX_KERNEL(GatherGradKernel, gather_grad);
OFL_INDEX_KERNEL(IndexSelectKernel, index_select);
OFL_INDEX_KERNEL(IndexSelectGradKernel, index_select_grad);
#undef OFL_INDEX_KERNEL

}  // namespace

// The CPU's dtypes. The gathers move values (16-bit ones as their bits); the scatter-adds of
// float16 and bfloat16 sum in float32 and round once, as the CPU's widened kernels.
OFL_REGISTER_KERNEL("gather", kCUDA, GatherKernel, float, double, float16, bfloat16, int8_t,
                    int32_t, int64_t, bool);
OFL_REGISTER_KERNEL("index_select", kCUDA, IndexSelectKernel, float, double, float16, bfloat16,
                    int8_t, int32_t, int64_t, bool);
OFL_REGISTER_KERNEL("gather_grad", kCUDA, GatherGradKernel, float, double, float16, bfloat16);
OFL_REGISTER_KERNEL("index_select_grad", kCUDA, IndexSelectGradKernel, float, double, float16,
                    bfloat16);

}  // namespace ofl::cuda_kernels
