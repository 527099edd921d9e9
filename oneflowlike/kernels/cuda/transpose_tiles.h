#pragma once
// The tiles of the CUDA transpose kernel (shape_ops.cu), in plain C++ so that the CPU tests
// check the addressing the GPU runs (GPU.md, "Make the untested part small"; the test is
// Transpose.CudaTileAddressingCoversEveryElementOnce in tests/cpp/ops/shape_ops_test.cpp).
//
// out (contiguous) = a coalesced view of `in` whose axis k has stride 1 and whose last axis
// does not: a (batched) matrix transpose between axes k and last, the CPU's blocked_transpose.
// Tile w covers rows [i0, i0 + kTransposeTile) of axis k and columns [j0, j0 +
// kTransposeTile) of the last axis, at one index of the other ("outer") axes. Element (i, j)
// of the tile is in[in_base + i + j * col_stride] and out[out_base + i * out_row_stride + j].

#include <cstdint>

#include "oneflowlike/common/error.h"
#include "oneflowlike/common/host_device.h"
#include "oneflowlike/kernels/cpu/strided_view.h"

namespace ofl::cuda_kernels {

constexpr int kTransposeTile = 32;
constexpr int kMaxTransposeDims = 16;

struct TransposeTiles {
  int64_t rows = 0, cols = 0;  // extents of axis k and of the last axis
  int64_t col_stride = 0;      // input stride of the last axis
  int64_t out_row_stride = 0;  // output stride of axis k
  int64_t row_tiles = 0, col_tiles = 0, num_tiles = 0;
  int64_t in_offset = 0;
  int num_outer = 0;  // every axis but k and last
  int64_t outer_dims[kMaxTransposeDims] = {};
  int64_t outer_in_strides[kMaxTransposeDims] = {};
  int64_t outer_out_strides[kMaxTransposeDims] = {};
};

inline TransposeTiles transpose_tiles(const cpu::StridedView& view, int k) {
  const int nd = static_cast<int>(view.dims.size());
  const int last = nd - 1;
  OFL_CHECK(nd <= kMaxTransposeDims, "[transpose] the CUDA kernel takes at most ",
            kMaxTransposeDims, " axes (after merging adjacent ones). However, got ", nd, ".");
  std::vector<int64_t> out_strides(nd);
  for (int64_t a = nd - 1, s = 1; a >= 0; --a) {
    out_strides[a] = s;
    s *= view.dims[a];
  }
  TransposeTiles t;
  t.rows = view.dims[k];
  t.cols = view.dims[last];
  t.col_stride = view.strides[last];
  t.out_row_stride = out_strides[k];
  t.row_tiles = (t.rows + kTransposeTile - 1) / kTransposeTile;
  t.col_tiles = (t.cols + kTransposeTile - 1) / kTransposeTile;
  t.in_offset = view.offset;
  int64_t outer = 1;
  for (int a = 0; a < last; ++a) {
    if (a == k) continue;
    t.outer_dims[t.num_outer] = view.dims[a];
    t.outer_in_strides[t.num_outer] = view.strides[a];
    t.outer_out_strides[t.num_outer] = out_strides[a];
    ++t.num_outer;
    outer *= view.dims[a];
  }
  t.num_tiles = outer * t.row_tiles * t.col_tiles;
  return t;
}

/// Where tile w starts. Consecutive tiles run along the last axis, so consecutive blocks write
/// neighbouring stretches of the output.
struct Tile {
  int64_t in_base = 0, out_base = 0;
  int64_t i0 = 0, j0 = 0;
};

OFL_HOST_DEVICE inline Tile tile_at(const TransposeTiles& t, int64_t w) {
  Tile tile;
  const int64_t col_tile = w % t.col_tiles;
  const int64_t rest = w / t.col_tiles;
  const int64_t row_tile = rest % t.row_tiles;
  int64_t o = rest / t.row_tiles;
  tile.in_base = t.in_offset;
  for (int b = t.num_outer - 1; b >= 0; --b) {
    const int64_t coord = o % t.outer_dims[b];
    o /= t.outer_dims[b];
    tile.in_base += coord * t.outer_in_strides[b];
    tile.out_base += coord * t.outer_out_strides[b];
  }
  tile.i0 = row_tile * kTransposeTile;
  tile.j0 = col_tile * kTransposeTile;
  return tile;
}

}  // namespace ofl::cuda_kernels
