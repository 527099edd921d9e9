// CPU kernels of gather, gather_grad, index_select and index_select_grad. index_select and its
// gradient are embedding's slice kernels (index_slices.h) along any dim. gather walks lines
// along dim: every coordinate but dim's picks a line of index (and of out, dy) and the line of x
// (dx) at the same coordinates, so the scatter-add of one line writes a line of its own: the
// threads split lines, race-free, and each sum runs in index order (deterministic).

#include "oneflowlike/ops/index_ops.h"

#include <vector>

#include "oneflowlike/common/parallel.h"
#include "oneflowlike/kernels/cpu/index_slices.h"
#include "oneflowlike/kernels/cpu/wide_rows.h"
#include "oneflowlike/op.h"

namespace ofl::cpu {

namespace {

// Lines along dim of an index shaped `index` into a tensor shaped `x` (the same rank).
struct Lines {
  int dim = 0;
  int64_t count = 0, length = 1;                        // lines and elements per line
  int64_t index_step = 1, x_step = 1;                   // strides of dim in index and in x
  std::vector<int64_t> extent, index_stride, x_stride;  // the other axes, outermost first

  Lines(const Shape& index, const Shape& x, int d) : dim(d) {
    if (index.ndim() == 0) {
      count = index.numel();
      return;
    }
    const std::vector<int64_t> is = index.strides(), xs = x.strides();
    length = index[d];
    index_step = is[d];
    x_step = xs[d];
    count = length == 0 ? 0 : index.numel() / length;
    for (int a = 0; a < index.ndim(); ++a) {
      if (a == d) continue;
      extent.push_back(index[a]);
      index_stride.push_back(is[a]);
      x_stride.push_back(xs[a]);
    }
  }
  // Offsets of line l's first element in index and in x.
  void bases(int64_t l, int64_t* index_base, int64_t* x_base) const {
    int64_t ib = 0, xb = 0;
    for (int a = static_cast<int>(extent.size()) - 1; a >= 0; --a) {
      const int64_t c = l % extent[a];
      l /= extent[a];
      ib += c * index_stride[a];
      xb += c * x_stride[a];
    }
    *index_base = ib;
    *x_base = xb;
  }
  // fn(index_base, x_base) for lines [begin, end).
  template <class F>
  void walk(int64_t begin, int64_t end, F&& fn) const {
    for (int64_t l = begin; l < end; ++l) {
      int64_t ib = 0, xb = 0;
      bases(l, &ib, &xb);
      fn(ib, xb);
    }
  }
};

const char* const kDimBound = "x.shape[dim]";

template <class T, class I>
void gather(const KernelContext& ctx) {
  const Tensor &x = ctx.in(0), &index = ctx.in(1);
  const int dim = std::max(0, normalize_axis(ctx.p<IndexParams>().dim, x.ndim(), "gather"));
  const Lines lines(index.shape(), x.shape(), dim);
  const I* idx = index.data<I>();
  check_slice_indices("gather", kDimBound, idx, index.numel(), x.ndim() == 0 ? 1 : x.shape()[dim]);
  const T* src = x.data<T>();
  T* out = ctx.out(0).data<T>();
  parallel_for(lines.count, items_per_grain(lines.length), [&](int64_t begin, int64_t end) {
    lines.walk(begin, end, [&](int64_t ib, int64_t xb) {
      for (int64_t t = 0; t < lines.length; ++t) {
        const int64_t at = ib + t * lines.index_step;
        out[at] = src[xb + static_cast<int64_t>(idx[at]) * lines.x_step];
      }
    });
  });
}

template <class T, class I>
void gather_grad(const KernelContext& ctx) {
  const Tensor &dy = ctx.in(0), &index = ctx.in(1), &dx = ctx.out(0);
  const int dim =
      std::max(0, normalize_axis(ctx.p<IndexGradParams>().dim, dx.ndim(), "gather_grad"));
  const Lines lines(index.shape(), dx.shape(), dim);
  const I* idx = index.data<I>();
  check_slice_indices("gather_grad", kDimBound, idx, index.numel(),
                      dx.ndim() == 0 ? 1 : dx.shape()[dim]);
  const T* g = dy.data<T>();
  T* out = dx.data<T>();
  std::fill(out, out + dx.numel(), T(0.0f));
  if constexpr (is_16bit_float<T>) {
    // Each line's sums in a float32 line of scratch, rounded once (Note [16-bit scatter-adds]
    // in index_slices.h): the Widened kernel's bits without a float32 copy of dx.
    const int64_t extent = dx.ndim() == 0 ? 1 : dx.shape()[dim];
    parallel_for(lines.count, items_per_grain(lines.length), [&](int64_t begin, int64_t end) {
      float* acc = WideRows::row(0, extent);
      lines.walk(begin, end, [&](int64_t ib, int64_t xb) {
        std::fill(acc, acc + extent, 0.0f);
        for (int64_t t = 0; t < lines.length; ++t) {
          const int64_t at = ib + t * lines.index_step;
          acc[static_cast<int64_t>(idx[at])] += static_cast<float>(g[at]);
        }
        for (int64_t j = 0; j < extent; ++j) out[xb + j * lines.x_step] = T(acc[j]);
      });
      WideRows::trim();
    });
  } else {
    parallel_for(lines.count, items_per_grain(lines.length), [&](int64_t begin, int64_t end) {
      lines.walk(begin, end, [&](int64_t ib, int64_t xb) {
        for (int64_t t = 0; t < lines.length; ++t) {
          const int64_t at = ib + t * lines.index_step;
          out[xb + static_cast<int64_t>(idx[at]) * lines.x_step] += g[at];
        }
      });
    });
  }
}

// x (or dx) viewed around dim for the slice kernels.
SliceView slice_view(const Shape& x, int64_t dim) {
  const AxisExtents e = axis_extents(x, normalize_axis(dim, x.ndim(), "index_select"));
  return {e.outer, e.extent, e.inner};
}

template <class T, class I>
void index_select(const KernelContext& ctx) {
  gather_slices("index_select", kDimBound, ctx.in(0).data<T>(),
                slice_view(ctx.in(0).shape(), ctx.p<IndexParams>().dim), ctx.in(1).data<I>(),
                ctx.in(1).numel(), ctx.out(0).data<T>());
}

template <class T, class I>
void index_select_grad(const KernelContext& ctx) {
  scatter_add_slices("index_select_grad", kDimBound, ctx.in(0).data<T>(),
                     slice_view(ctx.out(0).shape(), ctx.p<IndexGradParams>().dim),
                     ctx.in(1).data<I>(), ctx.in(1).numel(), ctx.out(0).data<T>());
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

// The gathers only move values: every dtype natively, 16-bit ones included.
OFL_REGISTER_KERNEL("gather", kCPU, GatherKernel, float, double, float16, bfloat16, int8_t, int32_t,
                    int64_t, bool);
OFL_REGISTER_KERNEL("index_select", kCPU, IndexSelectKernel, float, double, float16, bfloat16,
                    int8_t, int32_t, int64_t, bool);
// The scatter-adds sum: float16 and bfloat16 in float32, rounded once (Note [16-bit
// scatter-adds] in index_slices.h).
OFL_REGISTER_KERNEL("gather_grad", kCPU, GatherGradKernel, float, double, float16, bfloat16);
OFL_REGISTER_KERNEL("index_select_grad", kCPU, IndexSelectGradKernel, float, double, float16,
                    bfloat16);

}  // namespace ofl::cpu
