// CPU kernels of the shape ops. They only move elements, so one template serves every dtype.
//
// Note [Strided copy]: transpose, slice and slice_grad are all "copy between a contiguous
// tensor and a strided view of another". The view is described by per-axis extents and
// strides; adjacent axes that stay adjacent in memory are coalesced first, so that e.g. a
// permute (0, 2, 1, 3) becomes a copy of contiguous rows and an identity permute one memcpy.
// Kernels read every extent from their tensors (never from params), so they also run on the
// per-rank pieces of split tensors.

#include "oneflowlike/ops/shape_ops.h"

#include <algorithm>
#include <cstring>

#include "oneflowlike/common/parallel.h"
#include "oneflowlike/kernels/cpu/strided_view.h"
#include "oneflowlike/op.h"

namespace ofl::cpu {

namespace {

// Copies between contiguous `flat` and the strided `view` of `strided` (same element order):
// gather when kGather (strided -> flat), scatter otherwise (flat -> strided).
template <class T, bool kGather>
void strided_copy(const StridedView& view, T* strided, T* flat) {
  const int nd = static_cast<int>(view.dims.size());
  const int64_t inner = view.dims.back();
  const int64_t inner_stride = view.strides.back();
  const int64_t rows = numel_of(view.dims) / std::max<int64_t>(inner, 1);
  if (inner == 0 || rows == 0) return;
  const int64_t grain = std::max<int64_t>(1, kParallelGrain / inner);
  parallel_for(rows, grain, [&](int64_t begin, int64_t end) {
    // Multi-index of row `begin` over the outer axes, and its offset in the view.
    std::vector<int64_t> index(nd, 0);
    int64_t offset = view.offset;
    for (int64_t r = begin, a = nd - 2; a >= 0; --a) {
      index[a] = r % view.dims[a];
      r /= view.dims[a];
      offset += index[a] * view.strides[a];
    }
    for (int64_t r = begin; r < end; ++r) {
      T* s = strided + offset;
      T* f = flat + r * inner;
      if (inner_stride == 1) {
        if constexpr (kGather) {
          std::copy(s, s + inner, f);
        } else {
          std::copy(f, f + inner, s);
        }
      } else {
        for (int64_t i = 0; i < inner; ++i) {
          if constexpr (kGather) {
            f[i] = s[i * inner_stride];
          } else {
            s[i * inner_stride] = f[i];
          }
        }
      }
      for (int a = nd - 2; a >= 0; --a) {  // odometer step to the next row
        offset += view.strides[a];
        if (++index[a] < view.dims[a]) break;
        offset -= index[a] * view.strides[a];
        index[a] = 0;
      }
    }
  });
}

// ---- transpose ----

constexpr int64_t kTile = 32;

// out (contiguous) = the view of `in`, where the view's axis k has stride 1 and its last axis
// does not: a (batched) matrix transpose between axes k and last, done in kTile x kTile blocks
// so that both the reads and the writes stay within a few cache lines.
template <class T>
void blocked_transpose(const StridedView& view, int k, const T* in, T* out) {
  const int nd = static_cast<int>(view.dims.size());
  const int last = nd - 1;
  std::vector<int64_t> out_strides(nd);
  for (int64_t a = nd - 1, s = 1; a >= 0; --a) {
    out_strides[a] = s;
    s *= view.dims[a];
  }
  // Outer axes: every axis but k and last.
  std::vector<int> outer_axes;
  for (int a = 0; a < last; ++a) {
    if (a != k) outer_axes.push_back(a);
  }
  int64_t outer = 1;
  for (int a : outer_axes) outer *= view.dims[a];
  const int64_t rows = view.dims[k], cols = view.dims[last];
  const int64_t row_tiles = (rows + kTile - 1) / kTile;
  const int64_t col_stride = view.strides[last], out_row_stride = out_strides[k];
  const int64_t grain = std::max<int64_t>(1, kParallelGrain / (kTile * cols));
  parallel_for(outer * row_tiles, grain, [&](int64_t begin, int64_t end) {
    for (int64_t w = begin; w < end; ++w) {
      int64_t o = w / row_tiles;
      const int64_t i0 = (w % row_tiles) * kTile, i1 = std::min(rows, i0 + kTile);
      int64_t in_offset = view.offset, out_offset = 0;
      for (int b = static_cast<int>(outer_axes.size()) - 1; b >= 0; --b) {
        const int a = outer_axes[b];
        const int64_t i = o % view.dims[a];
        o /= view.dims[a];
        in_offset += i * view.strides[a];
        out_offset += i * out_strides[a];
      }
      const T* src = in + in_offset;
      T* dst = out + out_offset;
      for (int64_t j0 = 0; j0 < cols; j0 += kTile) {
        const int64_t j1 = std::min(cols, j0 + kTile);
        for (int64_t i = i0; i < i1; ++i) {
          T* d = dst + i * out_row_stride;
          const T* s = src + i;
          for (int64_t j = j0; j < j1; ++j) d[j] = s[j * col_stride];
        }
      }
    }
  });
}

template <class T>
struct TransposeKernel {
  static void run(const KernelContext& ctx) {
    const Tensor& x = ctx.in(0);
    if (x.numel() == 0) return;
    const StridedView view = coalesce(transpose_view(x.shape(), ctx.p<TransposeParams>().perm));
    const T* in = x.data<T>();
    T* out = ctx.out(0).data<T>();
    const int last = static_cast<int>(view.dims.size()) - 1;
    if (view.strides[last] != 1) {
      // The stride-1 input axis, if it survived coalescing, pairs with the last output axis.
      for (int k = 0; k < last; ++k) {
        if (view.strides[k] == 1) return blocked_transpose<T>(view, k, in, out);
      }
    }
    strided_copy<T, /*kGather=*/true>(view, const_cast<T*>(in), out);
  }
};

// ---- slice and slice_grad ----

template <class T>
struct SliceKernel {
  static void run(const KernelContext& ctx) {
    const auto& p = ctx.p<SliceParams>();
    const Tensor& x = ctx.in(0);
    const Tensor& y = ctx.out(0);
    if (y.numel() == 0) return;
    strided_copy<T, /*kGather=*/true>(slice_view(x.shape(), y.shape(), p.start, p.step),
                                      x.data<T>(), y.data<T>());
  }
};

template <class T>
struct SliceGradKernel {
  static void run(const KernelContext& ctx) {
    const auto& p = ctx.p<SliceGradParams>();
    const Tensor& dy = ctx.in(0);
    const Tensor& dx = ctx.out(0);
    T* out = dx.data<T>();
    parallel_for(dx.numel(), kParallelGrain,
                 [&](int64_t begin, int64_t end) { std::fill(out + begin, out + end, T(0.0f)); });
    if (dy.numel() == 0) return;
    strided_copy<T, /*kGather=*/false>(slice_view(dx.shape(), dy.shape(), p.start, p.step), out,
                                       dy.data<T>());
  }
};

// ---- concat and split ----

// Runs fn(row, piece, piece_offset_along_axis) for every (row of the outer axes, piece): the
// pieces are the inputs of concat or the outputs of split, glued along `axis` of `whole`.
template <class F>
void for_each_piece_row(const Shape& whole, int axis, const std::vector<Tensor>& pieces, F fn) {
  const int64_t outer = whole.count(0, axis);
  const int64_t row_elems = whole.count(axis, whole.ndim());
  if (outer == 0 || row_elems == 0) return;
  const int64_t grain = std::max<int64_t>(1, kParallelGrain / row_elems);
  parallel_for(outer, grain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      int64_t offset = 0;
      for (size_t k = 0; k < pieces.size(); ++k) {
        fn(r, k, offset);
        offset += pieces[k].shape()[axis];
      }
    }
  });
}

int normalized_axis(int64_t axis, int ndim) {
  return static_cast<int>(axis < 0 ? axis + ndim : axis);
}

template <class T>
struct ConcatKernel {
  static void run(const KernelContext& ctx) {
    const Tensor& y = ctx.out(0);
    const int axis = normalized_axis(ctx.p<ConcatParams>().axis, y.ndim());
    const int64_t inner = y.shape().count(axis + 1, y.ndim());
    const int64_t out_row = y.shape()[axis] * inner;
    T* out = y.data<T>();
    for_each_piece_row(y.shape(), axis, ctx.inputs, [&](int64_t r, size_t k, int64_t offset) {
      const Tensor& x = ctx.inputs[k];
      const int64_t n = x.shape()[axis] * inner;
      const T* src = x.data<T>() + r * n;
      std::copy(src, src + n, out + r * out_row + offset * inner);
    });
  }
};

template <class T>
struct SplitKernel {
  static void run(const KernelContext& ctx) {
    const Tensor& x = ctx.in(0);
    const int axis = normalized_axis(ctx.p<SplitParams>().axis, x.ndim());
    const int64_t inner = x.shape().count(axis + 1, x.ndim());
    const int64_t in_row = x.shape()[axis] * inner;
    const T* in = x.data<T>();
    for_each_piece_row(x.shape(), axis, ctx.outputs, [&](int64_t r, size_t k, int64_t offset) {
      const Tensor& y = ctx.outputs[k];
      const int64_t n = y.shape()[axis] * inner;
      const T* src = in + r * in_row + offset * inner;
      std::copy(src, src + n, y.data<T>() + r * n);
    });
  }
};

}  // namespace

#define OFL_SHAPE_OP_TYPES float, double, float16, bfloat16, int8_t, int32_t, int64_t, bool
OFL_REGISTER_KERNEL("transpose", kCPU, TransposeKernel, OFL_SHAPE_OP_TYPES);
OFL_REGISTER_KERNEL("slice", kCPU, SliceKernel, OFL_SHAPE_OP_TYPES);
OFL_REGISTER_KERNEL("slice_grad", kCPU, SliceGradKernel, OFL_SHAPE_OP_TYPES);
OFL_REGISTER_KERNEL("concat", kCPU, ConcatKernel, OFL_SHAPE_OP_TYPES);
OFL_REGISTER_KERNEL("split", kCPU, SplitKernel, OFL_SHAPE_OP_TYPES);
#undef OFL_SHAPE_OP_TYPES

}  // namespace ofl::cpu
