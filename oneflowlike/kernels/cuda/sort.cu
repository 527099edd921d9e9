// CUDA kernels of max_dim, min_dim, topk and sort, computing what kernels/cpu/sort.cpp computes
// (Note [Orders and ties] in ops/sort.h). max_dim and min_dim are line reductions
// (launch_lines in reduce.cuh) of (value, index) pairs whose combination picks NaN, then the
// better value, then the smaller index: a fixed function of the values, so the result does not
// depend on the launch. topk and sort give each line along dim to one thread, which merge-sorts
// the line's positions by (value, position) in scratch memory and keeps the first k: correct
// and deterministic, but slow for long lines (a block-wide sort is the next step where that
// matters; nothing here has a GPU to measure it).

#include "oneflowlike/kernels/cuda/reduce.cuh"
#include "oneflowlike/ops/index_ops.h"
#include "oneflowlike/ops/sort.h"

namespace ofl::cuda_kernels {

namespace {

template <class A>
__device__ __forceinline__ bool is_nan(A v) {
  return v != v;  // false for integers
}

// NaN after every number (sort and topk).
template <class A>
__device__ __forceinline__ bool order_less(A a, A b) {
  return (!is_nan(a) && is_nan(b)) || a < b;
}

template <class A>
struct Candidate {
  A value;
  int64_t index;  // -1: none (an idle thread's identity)
};

template <bool kMax>
struct PickExtremum {
  template <class A>
  __device__ __forceinline__ Candidate<A> operator()(Candidate<A> a, Candidate<A> b) const {
    if (a.index < 0) return b;
    if (b.index < 0) return a;
    const bool a_nan = is_nan(a.value), b_nan = is_nan(b.value);
    if (a_nan != b_nan) return a_nan ? a : b;
    if (!a_nan) {
      if (kMax ? b.value > a.value : b.value < a.value) return b;
      if (kMax ? a.value > b.value : a.value < b.value) return a;
    }
    return b.index < a.index ? b : a;
  }
};

template <class N, bool kMax>
struct ExtremumLine {
  using A = compute_t<N>;
  const N* x;
  N* values;
  int64_t* indices;
  AxisView v;
  template <class Team>
  __device__ void operator()(const Team& team, Line line) const {
    Candidate<A> best{A(0), -1};
    if (line.active) {
      for (int64_t j = team.rank(); j < v.extent; j += team.size()) {
        best = PickExtremum<kMax>{}(best, Candidate<A>{load(x, line.at(j)), j});
      }
    }
    best = team.all_reduce(best, PickExtremum<kMax>{});
    if (line.active && team.rank() == 0) {
      const int64_t out = line.base / (v.extent * v.inner) * v.inner + line.base % v.inner;
      values[out] = x[line.at(best.index)];  // the element's bits (a NaN's sign and payload)
      indices[out] = best.index;
    }
  }
};

template <class T, bool kMax>
void dim_reduce(const KernelContext& ctx) {
  using N = native_t<T>;
  const char* op = kMax ? "max_dim" : "min_dim";
  const Tensor& x = ctx.in(0);
  const AxisExtents e =
      axis_extents(x.shape(), normalize_axis(ctx.p<DimReduceParams>().dim, x.ndim(), op));
  const AxisView v{e.outer, e.extent, e.inner};
  if (ctx.out(0).numel() == 0) return;
  launch_lines(ctx, op, v,
               ExtremumLine<N, kMax>{data<T>(x), data<T>(ctx.out(0)),
                                     static_cast<int64_t*>(ctx.out(1).raw_data()), v});
}

template <class T>
struct MaxDimKernel {
  static void run(const KernelContext& ctx) { dim_reduce<T, true>(ctx); }
};
template <class T>
struct MinDimKernel {
  static void run(const KernelContext& ctx) { dim_reduce<T, false>(ctx); }
};

// One thread per line: a bottom-up merge sort of the line's positions (order, through tmp),
// by (value, position), then the first k written out.
template <class N>
__global__ void order_lines_kernel(const N* x, N* values, int64_t* indices, AxisView v, int64_t k,
                                   bool descending, int64_t* scratch) {
  const int64_t lines = v.outer * v.inner;
  for (int64_t line = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; line < lines;
       line += int64_t{blockDim.x} * gridDim.x) {
    const int64_t o = line / v.inner, i = line % v.inner;
    const int64_t base = o * v.extent * v.inner + i;
    const int64_t n = v.extent;
    int64_t* order = scratch + line * 2 * n;
    int64_t* tmp = order + n;
    for (int64_t t = 0; t < n; ++t) order[t] = t;
    const auto before = [&](int64_t a, int64_t b) {
      const auto va = load(x, base + a * v.inner), vb = load(x, base + b * v.inner);
      const bool less = descending ? order_less(vb, va) : order_less(va, vb);
      const bool more = descending ? order_less(va, vb) : order_less(vb, va);
      return less || (!more && a < b);
    };
    for (int64_t width = 1; width < n; width *= 2) {
      for (int64_t lo = 0; lo < n; lo += 2 * width) {
        const int64_t mid = std::min(lo + width, n), hi = std::min(lo + 2 * width, n);
        int64_t p = lo, q = mid, w = lo;
        while (p < mid && q < hi) tmp[w++] = before(order[q], order[p]) ? order[q++] : order[p++];
        while (p < mid) tmp[w++] = order[p++];
        while (q < hi) tmp[w++] = order[q++];
      }
      int64_t* swap = order;
      order = tmp;
      tmp = swap;
    }
    const int64_t out = o * k * v.inner + i;
    for (int64_t t = 0; t < k; ++t) {
      values[out + t * v.inner] = x[base + order[t] * v.inner];
      indices[out + t * v.inner] = order[t];
    }
  }
}

template <class T>
void order_lines(const KernelContext& ctx, int64_t dim, int64_t k, bool descending,
                 const char* op) {
  using N = native_t<T>;
  const Tensor& x = ctx.in(0);
  const AxisExtents e = axis_extents(x.shape(), normalize_axis(dim, x.ndim(), op));
  const AxisView v{e.outer, e.extent, e.inner};
  const int64_t lines = v.outer * v.inner;
  if (k == 0 || lines == 0) return;
  Scratch scratch(ctx, static_cast<size_t>(lines * 2 * v.extent) * sizeof(int64_t));
  const int64_t blocks = std::clamp<int64_t>((lines + kBlock - 1) / kBlock, 1, kMaxGrid);
  order_lines_kernel<N><<<static_cast<unsigned>(blocks), kBlock, 0, stream_of(ctx)>>>(
      data<T>(x), data<T>(ctx.out(0)), static_cast<int64_t*>(ctx.out(1).raw_data()), v, k,
      descending, scratch.as<int64_t>());
  cuda::check(cudaGetLastError(), op, device_of(ctx));
}

template <class T>
struct TopkKernel {
  static void run(const KernelContext& ctx) {
    const auto& p = ctx.p<TopkParams>();
    order_lines<T>(ctx, p.dim, p.k, p.largest, "topk");
  }
};

template <class T>
struct SortKernel {
  static void run(const KernelContext& ctx) {
    const auto& p = ctx.p<SortParams>();
    const Tensor& x = ctx.in(0);
    const int64_t n = x.ndim() == 0 ? 1 : x.shape()[normalize_axis(p.dim, x.ndim(), "sort")];
    order_lines<T>(ctx, p.dim, n, p.descending, "sort");
  }
};

}  // namespace

// The CPU's dtypes; float16 and bfloat16 compare in float32 (exact) and move their values as
// they are.
OFL_REGISTER_KERNEL("max_dim", kCUDA, MaxDimKernel, float, double, float16, bfloat16, int8_t,
                    int32_t, int64_t);
OFL_REGISTER_KERNEL("min_dim", kCUDA, MinDimKernel, float, double, float16, bfloat16, int8_t,
                    int32_t, int64_t);
OFL_REGISTER_KERNEL("topk", kCUDA, TopkKernel, float, double, float16, bfloat16, int8_t, int32_t,
                    int64_t);
OFL_REGISTER_KERNEL("sort", kCUDA, SortKernel, float, double, float16, bfloat16, int8_t, int32_t,
                    int64_t);

}  // namespace ofl::cuda_kernels
