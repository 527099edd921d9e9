// CUDA kernels of the shape ops (kernels/cpu/shape_ops.cpp). They only move elements, so each
// is instantiated per element size (bits_t), not per dtype. The views are the CPU's
// (kernels/cpu/strided_view.h, Note [Strided copy]): transpose, slice and slice_grad copy
// between a contiguous tensor and a coalesced strided view of another, a transpose whose
// stride-1 input axis is not the last output axis through shared-memory tiles; concat and split
// copy rows of pieces in the widest unit (up to 16 bytes) their sizes and addresses allow.

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>

#include "oneflowlike/kernels/cpu/strided_view.h"
#include "oneflowlike/kernels/cuda/elementwise.cuh"
#include "oneflowlike/kernels/cuda/transpose_tiles.h"
#include "oneflowlike/ops/shape_ops.h"

namespace ofl::cuda_kernels {

namespace {

using cpu::StridedView;

constexpr int kMaxViewDims = 16;

// The offset of element i of a contiguous tensor in a strided view of another, computed in I:
// int32_t when every offset fits (a 64-bit division costs several times a 32-bit one).
template <class I>
struct ViewIndex {
  int ndim = 0;
  I offset = 0;
  I dims[kMaxViewDims] = {};
  I strides[kMaxViewDims] = {};

  __device__ int64_t operator()(int64_t element) const {
    I i = static_cast<I>(element);
    I at = offset;
    for (int d = ndim - 1; d >= 0; --d) {
      const I coord = i % dims[d];
      i /= dims[d];
      at += coord * strides[d];
    }
    return at;
  }
};

template <class I>
ViewIndex<I> view_index(const char* op, const StridedView& view) {
  const int ndim = static_cast<int>(view.dims.size());
  OFL_CHECK(ndim <= kMaxViewDims, "[", op, "] the CUDA kernel takes views of at most ",
            kMaxViewDims, " axes (after merging adjacent ones). However, got ", ndim, ".");
  ViewIndex<I> index;
  index.ndim = ndim;
  index.offset = static_cast<I>(view.offset);
  for (int d = 0; d < ndim; ++d) {
    index.dims[d] = static_cast<I>(view.dims[d]);
    index.strides[d] = static_cast<I>(view.strides[d]);
  }
  return index;
}

// Copies between contiguous `flat` and the view of `strided` (same element order): gather when
// kGather (strided -> flat), scatter otherwise (flat -> strided). A view never holds an
// element twice (steps >= 1, a permutation), so the scatter has no races.
template <bool kGather, class B, class I>
struct StridedCopy {
  ViewIndex<I> index;
  B* strided;
  B* flat;
  __device__ void operator()(int64_t i) const {
    if constexpr (kGather) {
      flat[i] = strided[index(i)];
    } else {
      strided[index(i)] = flat[i];
    }
  }
};

// The view in units of U instead of B when its last axis is a run (stride 1) whose bytes, the
// other strides' and the offset's, and both tensors' addresses are multiples of sizeof(U).
template <class U, class B>
std::optional<StridedView> in_units(const StridedView& view, const B* strided, const B* flat) {
  static_assert(sizeof(U) % sizeof(B) == 0);
  constexpr int64_t kRatio = sizeof(U) / sizeof(B);
  const size_t last = view.dims.size() - 1;
  if (kRatio == 1 || view.strides[last] != 1 || view.dims[last] % kRatio != 0 ||
      view.offset % kRatio != 0 || reinterpret_cast<uintptr_t>(strided) % sizeof(U) != 0 ||
      reinterpret_cast<uintptr_t>(flat) % sizeof(U) != 0) {
    return std::nullopt;
  }
  StridedView wide = view;
  for (size_t d = 0; d < last; ++d) {
    if (view.strides[d] % kRatio != 0) return std::nullopt;
    wide.strides[d] = view.strides[d] / kRatio;
  }
  wide.dims[last] = view.dims[last] / kRatio;
  wide.offset = view.offset / kRatio;
  return wide;
}

template <bool kGather, class B>
void strided_copy_as(const KernelContext& ctx, const char* what, const StridedView& view,
                     B* strided, B* flat) {
  const int64_t n = cpu::numel_of(view.dims);
  // The largest offset the view reaches, and n, decide the index type.
  int64_t reach = view.offset + 1;
  for (size_t d = 0; d < view.dims.size(); ++d) reach += (view.dims[d] - 1) * view.strides[d];
  if (std::max(n, reach) <= std::numeric_limits<int32_t>::max()) {
    const StridedCopy<kGather, B, int32_t> copy{view_index<int32_t>(what, view), strided, flat};
    launch_for_each(ctx, what, n, copy);
  } else {
    const StridedCopy<kGather, B, int64_t> copy{view_index<int64_t>(what, view), strided, flat};
    launch_for_each(ctx, what, n, copy);
  }
}

// Copies a view with the widest unit (up to 16 bytes) its runs allow, one index computation
// per unit.
template <bool kGather, class B>
void strided_copy(const KernelContext& ctx, const char* what, const StridedView& view, B* strided,
                  B* flat) {
  if constexpr (sizeof(B) < 16) {
    if (auto wide = in_units<uint4>(view, strided, flat)) {
      return strided_copy_as<kGather>(ctx, what, *wide, reinterpret_cast<uint4*>(strided),
                                      reinterpret_cast<uint4*>(flat));
    }
  }
  if constexpr (sizeof(B) < 8) {
    if (auto wide = in_units<uint64_t>(view, strided, flat)) {
      return strided_copy_as<kGather>(ctx, what, *wide, reinterpret_cast<uint64_t*>(strided),
                                      reinterpret_cast<uint64_t*>(flat));
    }
  }
  if constexpr (sizeof(B) < 4) {
    if (auto wide = in_units<uint32_t>(view, strided, flat)) {
      return strided_copy_as<kGather>(ctx, what, *wide, reinterpret_cast<uint32_t*>(strided),
                                      reinterpret_cast<uint32_t*>(flat));
    }
  }
  strided_copy_as<kGather>(ctx, what, view, strided, flat);
}

// ---- transpose ----

constexpr int kTileRows = 8;  // a block is kTransposeTile x kTileRows threads

// One tile (transpose_tiles.h) at a time: read with threadIdx.x along axis k (stride 1 in the
// input), write with threadIdx.x along the last axis (stride 1 in the output). The extra
// column of `tile` puts a tile column's elements in different shared-memory banks.
template <class B>
__global__ void tiled_transpose(TransposeTiles t, const B* in, B* out) {
  constexpr int kSide = kTransposeTile;
  __shared__ B tile[kSide][kSide + 1];
  for (int64_t w = blockIdx.x; w < t.num_tiles; w += gridDim.x) {  // uniform per block
    const Tile at = tile_at(t, w);
    for (int jj = threadIdx.y; jj < kSide; jj += kTileRows) {
      const int64_t i = at.i0 + threadIdx.x, j = at.j0 + jj;
      if (i < t.rows && j < t.cols) tile[jj][threadIdx.x] = in[at.in_base + i + j * t.col_stride];
    }
    __syncthreads();
    for (int ii = threadIdx.y; ii < kSide; ii += kTileRows) {
      const int64_t i = at.i0 + ii, j = at.j0 + threadIdx.x;
      if (i < t.rows && j < t.cols) {
        out[at.out_base + i * t.out_row_stride + j] = tile[threadIdx.x][ii];
      }
    }
    __syncthreads();  // before the next tile overwrites `tile`
  }
}

template <class B>
void launch_tiled_transpose(const KernelContext& ctx, const StridedView& view, int k, const B* in,
                            B* out) {
  const TransposeTiles t = transpose_tiles(view, k);
  const int64_t blocks = std::min<int64_t>(t.num_tiles, int64_t{65535} * 8);
  tiled_transpose<B>
      <<<static_cast<unsigned>(blocks), dim3(kTransposeTile, kTileRows), 0, stream_of(ctx)>>>(t, in,
                                                                                              out);
  cuda::check(cudaGetLastError(), "transpose", device_of(ctx));
}

template <class T>
struct TransposeKernel {
  static void run(const KernelContext& ctx) {
    using B = bits_t<T>;
    const Tensor& x = ctx.in(0);
    if (x.numel() == 0) return;
    const StridedView view =
        cpu::coalesce(cpu::transpose_view(x.shape(), ctx.p<TransposeParams>().perm));
    const B* in = bits<T>(x);
    B* out = bits<T>(ctx.out(0));
    const int last = static_cast<int>(view.dims.size()) - 1;
    if (view.strides[last] != 1) {
      // The stride-1 input axis, if it survived coalescing, pairs with the last output axis.
      for (int k = 0; k < last; ++k) {
        if (view.strides[k] == 1) return launch_tiled_transpose<B>(ctx, view, k, in, out);
      }
    }
    strided_copy</*kGather=*/true>(ctx, "transpose", view, const_cast<B*>(in), out);
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
    strided_copy</*kGather=*/true>(ctx, "slice",
                                   cpu::slice_view(x.shape(), y.shape(), p.start, p.step),
                                   bits<T>(x), bits<T>(y));
  }
};

// dx = zeros (all-zero bits are 0 in every dtype), then dy scattered where slice read.
template <class T>
struct SliceGradKernel {
  static void run(const KernelContext& ctx) {
    const auto& p = ctx.p<SliceGradParams>();
    const Tensor& dy = ctx.in(0);
    const Tensor& dx = ctx.out(0);
    if (dx.numel() == 0) return;
    cuda::check(cudaMemsetAsync(dx.raw_data(), 0, dx.numel() * sizeof(T), stream_of(ctx)),
                "slice_grad", device_of(ctx));
    if (dy.numel() == 0) return;
    strided_copy</*kGather=*/false>(ctx, "slice_grad",
                                    cpu::slice_view(dx.shape(), dy.shape(), p.start, p.step),
                                    bits<T>(dx), bits<T>(dy));
  }
};

// ---- concat and split ----

constexpr int kMaxPiecesPerLaunch = 32;

// Pieces (the inputs of concat, the outputs of split) glued along an axis of the whole: row r
// of piece k (its elements at outer index r) is at r * whole_row + offset[k] in the whole.
// Lengths are in units of the copy.
struct PieceRows {
  int count = 0;
  void* data[kMaxPiecesPerLaunch] = {};
  int64_t row[kMaxPiecesPerLaunch] = {};
  int64_t offset[kMaxPiecesPerLaunch] = {};
};

// blockIdx.y picks the piece; the grid strides over its outer * row units.
template <bool kConcat, class U>
__global__ void copy_piece_rows(PieceRows pieces, U* whole, int64_t whole_row, int64_t outer) {
  const int k = blockIdx.y;
  U* piece = static_cast<U*>(pieces.data[k]);
  const int64_t row = pieces.row[k], offset = pieces.offset[k];
  const int64_t n = outer * row;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n;
       e += int64_t{blockDim.x} * gridDim.x) {
    const int64_t r = e / row;
    U* w = whole + r * whole_row + offset + (e - r * row);
    if constexpr (kConcat) {
      *w = piece[e];
    } else {
      piece[e] = *w;
    }
  }
}

// Copies between `whole` and `pieces` glued along `axis`, kMaxPiecesPerLaunch pieces a launch,
// in units of U bytes.
template <bool kConcat, class U>
void copy_pieces_in(const KernelContext& ctx, const char* what, const Tensor& whole, int axis,
                    const std::vector<Tensor>& pieces, int64_t outer, int64_t inner_bytes) {
  const int64_t whole_row = whole.shape()[axis] * inner_bytes / int64_t{sizeof(U)};
  int64_t offset = 0;
  for (size_t first = 0; first < pieces.size(); first += kMaxPiecesPerLaunch) {
    PieceRows batch;
    int64_t widest = 0;
    for (size_t k = first; k < pieces.size() && batch.count < kMaxPiecesPerLaunch; ++k) {
      const int64_t row = pieces[k].shape()[axis] * inner_bytes / int64_t{sizeof(U)};
      batch.data[batch.count] = pieces[k].raw_data();
      batch.row[batch.count] = row;
      batch.offset[batch.count] = offset;
      ++batch.count;
      offset += row;
      widest = std::max(widest, outer * row);
    }
    if (widest == 0) continue;
    const int64_t blocks = std::clamp<int64_t>((widest + kBlock - 1) / kBlock, 1, 65535);
    copy_piece_rows<kConcat, U>
        <<<dim3(static_cast<unsigned>(blocks), batch.count), kBlock, 0, stream_of(ctx)>>>(
            batch, static_cast<U*>(whole.raw_data()), whole_row, outer);
    cuda::check(cudaGetLastError(), what, device_of(ctx));
  }
}

// The widest unit (16, 8, 4, 2 or 1 bytes) that divides every row, offset and address.
template <bool kConcat>
void copy_pieces(const KernelContext& ctx, const char* what, const Tensor& whole, int axis,
                 const std::vector<Tensor>& pieces) {
  const Shape& shape = whole.shape();
  const int64_t outer = shape.count(0, axis);
  const int64_t inner_bytes =
      shape.count(axis + 1, shape.ndim()) * static_cast<int64_t>(dtype_size(whole.dtype()));
  if (outer == 0 || inner_bytes == 0) return;
  int64_t unit = 16;
  const auto fits = [&](int64_t bytes) { return bytes % unit == 0; };
  const auto fits_address = [&](const Tensor& t) {
    return is_aligned(t.raw_data(), static_cast<size_t>(unit));
  };
  while (unit > 1) {
    bool ok = fits(shape[axis] * inner_bytes) && fits_address(whole);
    for (const Tensor& p : pieces)
      ok = ok && fits(p.shape()[axis] * inner_bytes) && fits_address(p);
    if (ok) break;
    unit /= 2;
  }
  switch (unit) {
    case 16:
      return copy_pieces_in<kConcat, uint4>(ctx, what, whole, axis, pieces, outer, inner_bytes);
    case 8:
      return copy_pieces_in<kConcat, uint64_t>(ctx, what, whole, axis, pieces, outer, inner_bytes);
    case 4:
      return copy_pieces_in<kConcat, uint32_t>(ctx, what, whole, axis, pieces, outer, inner_bytes);
    case 2:
      return copy_pieces_in<kConcat, uint16_t>(ctx, what, whole, axis, pieces, outer, inner_bytes);
    default:
      return copy_pieces_in<kConcat, uint8_t>(ctx, what, whole, axis, pieces, outer, inner_bytes);
  }
}

int normalized_axis(int64_t axis, int ndim) {
  return static_cast<int>(axis < 0 ? axis + ndim : axis);
}

// T is unused: the copies are by bytes, so every dtype shares one kernel per unit.
template <class T>
struct ConcatKernel {
  static void run(const KernelContext& ctx) {
    const Tensor& y = ctx.out(0);
    const int axis = normalized_axis(ctx.p<ConcatParams>().axis, y.ndim());
    copy_pieces</*kConcat=*/true>(ctx, "concat", y, axis, ctx.inputs);
  }
};

template <class T>
struct SplitKernel {
  static void run(const KernelContext& ctx) {
    const Tensor& x = ctx.in(0);
    const int axis = normalized_axis(ctx.p<SplitParams>().axis, x.ndim());
    copy_pieces</*kConcat=*/false>(ctx, "split", x, axis, ctx.outputs);
  }
};

}  // namespace

#define OFL_SHAPE_OP_TYPES float, double, float16, bfloat16, int8_t, int32_t, int64_t, bool
OFL_REGISTER_KERNEL("transpose", kCUDA, TransposeKernel, OFL_SHAPE_OP_TYPES);
OFL_REGISTER_KERNEL("slice", kCUDA, SliceKernel, OFL_SHAPE_OP_TYPES);
OFL_REGISTER_KERNEL("slice_grad", kCUDA, SliceGradKernel, OFL_SHAPE_OP_TYPES);
OFL_REGISTER_KERNEL("concat", kCUDA, ConcatKernel, OFL_SHAPE_OP_TYPES);
OFL_REGISTER_KERNEL("split", kCUDA, SplitKernel, OFL_SHAPE_OP_TYPES);
#undef OFL_SHAPE_OP_TYPES

}  // namespace ofl::cuda_kernels
