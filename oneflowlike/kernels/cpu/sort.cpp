// CPU kernels of max_dim, min_dim, topk and sort (Note [Orders and ties] in ops/sort.h). x is
// viewed as (outer, extent, inner) around dim; each of the outer * inner lines along dim is
// handled by one thread. topk and sort are one kernel: order the line's positions by (value,
// position) and keep the first k, so ties follow the position and the order is stable.

#include "oneflowlike/ops/sort.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <type_traits>
#include <vector>

#include "oneflowlike/common/parallel.h"
#include "oneflowlike/kernels/cpu/widened.h"
#include "oneflowlike/op.h"
#include "oneflowlike/ops/index_ops.h"

namespace ofl::cpu {

namespace {

// Values are compared as compute_of<T> (16-bit floats' as float32, exactly: Note [Native bfloat16
// loops] in widened.h) and copied as they are.
template <class T>
bool is_nan(T v) {
  if constexpr (std::is_floating_point_v<compute_of<T>>) {
    return std::isnan(static_cast<compute_of<T>>(v));
  } else {
    return false;
  }
}

template <class T>
bool value_less(T a, T b) {
  return static_cast<compute_of<T>>(a) < static_cast<compute_of<T>>(b);
}

// The order of sort and topk: NaN after every number.
template <class T>
bool order_less(T a, T b) {
  return (!is_nan(a) && is_nan(b)) || value_less(a, b);
}

AxisExtents view_of(const Tensor& x, int64_t dim, const char* op) {
  return axis_extents(x.shape(), normalize_axis(dim, x.ndim(), op));
}

// values and indices of the maximum (kMax) or minimum of each line; NaN wins, then the first.
template <class T, bool kMax>
void dim_reduce(const KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  const AxisExtents v = view_of(x, ctx.p<DimReduceParams>().dim, kMax ? "max_dim" : "min_dim");
  const T* src = x.data<T>();
  T* values = ctx.out(0).data<T>();
  int64_t* indices = ctx.out(1).data<int64_t>();
  parallel_for(v.outer * v.inner, items_per_grain(v.extent), [&](int64_t begin, int64_t end) {
    for (int64_t line = begin; line < end; ++line) {
      const int64_t o = line / v.inner, i = line % v.inner;
      const T* p = src + o * v.extent * v.inner + i;
      T best = p[0];
      int64_t at = 0;
      for (int64_t t = 1; t < v.extent && !is_nan(best); ++t) {
        const T c = p[t * v.inner];
        if (is_nan(c) || (kMax ? value_less(best, c) : value_less(c, best))) {
          best = c;
          at = t;
        }
      }
      values[line] = best;
      indices[line] = at;
    }
  });
}

template <class T>
struct MaxDimKernel {
  static void run(const KernelContext& ctx) { dim_reduce<T, true>(ctx); }
};
template <class T>
struct MinDimKernel {
  static void run(const KernelContext& ctx) { dim_reduce<T, false>(ctx); }
};

// The first k positions of each line in (value, position) order, descending values if asked;
// values (outer, k, inner) and indices alike.
template <class T>
void order_lines(const KernelContext& ctx, int64_t dim, int64_t k, bool descending,
                 const char* op) {
  const Tensor& x = ctx.in(0);
  const AxisExtents v = view_of(x, dim, op);
  const T* src = x.data<T>();
  T* values = ctx.out(0).data<T>();
  int64_t* indices = ctx.out(1).data<int64_t>();
  if (k == 0) return;
  parallel_for(v.outer * v.inner, items_per_grain(v.extent * 8), [&](int64_t begin, int64_t end) {
    std::vector<int64_t> order(v.extent);
    for (int64_t line = begin; line < end; ++line) {
      const int64_t o = line / v.inner, i = line % v.inner;
      const T* p = src + o * v.extent * v.inner + i;
      std::iota(order.begin(), order.end(), int64_t{0});
      const auto before = [&](int64_t a, int64_t b) {
        const T va = p[a * v.inner], vb = p[b * v.inner];
        const bool less = descending ? order_less(vb, va) : order_less(va, vb);
        const bool more = descending ? order_less(va, vb) : order_less(vb, va);
        return less || (!more && a < b);
      };
      if (k == v.extent) {
        std::sort(order.begin(), order.end(), before);
      } else {
        std::partial_sort(order.begin(), order.begin() + k, order.end(), before);
      }
      const int64_t base = o * k * v.inner + i;
      for (int64_t t = 0; t < k; ++t) {
        values[base + t * v.inner] = p[order[t] * v.inner];
        indices[base + t * v.inner] = order[t];
      }
    }
  });
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

OFL_REGISTER_KERNEL("max_dim", kCPU, MaxDimKernel, float, double, bfloat16, float16, int8_t,
                    int32_t, int64_t);
OFL_REGISTER_KERNEL("min_dim", kCPU, MinDimKernel, float, double, bfloat16, float16, int8_t,
                    int32_t, int64_t);
OFL_REGISTER_KERNEL("topk", kCPU, TopkKernel, float, double, bfloat16, float16, int8_t, int32_t,
                    int64_t);
OFL_REGISTER_KERNEL("sort", kCPU, SortKernel, float, double, bfloat16, float16, int8_t, int32_t,
                    int64_t);

}  // namespace ofl::cpu
