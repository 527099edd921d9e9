#pragma once
// What the reduction-shaped CUDA kernels share (reduce, softmax, layer_norm, cross_entropy):
// warp and block reductions of any small value type, rows handed out one per warp (short rows)
// or one per block (long rows), column reductions in two passes, and scratch memory.
//
// Note [Deterministic reductions]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// No atomics: every partial result is combined in an order fixed by the launch shape, which
// is a function of the tensor shapes only (not of the device), so a float sum is the same bit
// for bit from run to run. A thread folds a strided part of a row (c = rank, rank + size, ...),
// lanes combine in a shuffle tree, warps through shared memory in warp order, and partial
// results of split rows or columns in a second pass in split order.

#include <cstring>
#include <type_traits>

#include "oneflowlike/kernels/cuda/common.cuh"
#include "oneflowlike/kernels/online_softmax.h"

namespace ofl::cuda_kernels {

constexpr int kWarp = 32;
constexpr unsigned kFullMask = 0xffffffffu;

/// __shfl_*_sync for any trivially copyable value (float, double, int64_t, bool, small structs
/// such as OnlineSoftmax), one 32-bit word at a time.
template <class V>
__device__ __forceinline__ V shuffle_down(V v, unsigned delta) {
  static_assert(std::is_trivially_copyable_v<V>);
  constexpr int kWords = (sizeof(V) + 3) / 4;
  unsigned words[kWords] = {};
  memcpy(words, &v, sizeof(V));
#pragma unroll
  for (int k = 0; k < kWords; ++k) words[k] = __shfl_down_sync(kFullMask, words[k], delta);
  memcpy(&v, words, sizeof(V));
  return v;
}
template <class V>
__device__ __forceinline__ V shuffle_from(V v, int lane) {
  static_assert(std::is_trivially_copyable_v<V>);
  constexpr int kWords = (sizeof(V) + 3) / 4;
  unsigned words[kWords] = {};
  memcpy(words, &v, sizeof(V));
#pragma unroll
  for (int k = 0; k < kWords; ++k) words[k] = __shfl_sync(kFullMask, words[k], lane);
  memcpy(&v, words, sizeof(V));
  return v;
}

/// The combination of the 32 lanes' values, returned in every lane. All 32 lanes must call it.
/// Lane 0 folds a fixed tree and broadcasts, so every lane holds the same bits even for an op
/// that is commutative only up to rounding (Note [Deterministic reductions]).
template <class V, class Op>
__device__ __forceinline__ V warp_all_reduce(V v, Op op) {
#pragma unroll
  for (unsigned delta = kWarp / 2; delta > 0; delta /= 2) v = op(v, shuffle_down(v, delta));
  return shuffle_from(v, 0);
}

/// The combination of the values of all threads of a 1-d block (blockDim.x a multiple of 32),
/// returned in every thread. Every thread of the block must call it: it synchronises.
template <class V, class Op>
__device__ __forceinline__ V block_all_reduce(V v, Op op) {
  __shared__ V warp_results[kWarp];  // V is trivial: no dynamic initialisation of __shared__
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  v = warp_all_reduce(v, op);
  if (lane == 0) warp_results[warp] = v;
  __syncthreads();
  V result = warp_results[0];
  for (int w = 1; w < static_cast<int>(blockDim.x / kWarp); ++w)
    result = op(result, warp_results[w]);
  __syncthreads();  // the next call may overwrite warp_results
  return result;
}

/// In a 2-d block of (32, ny) threads, ny <= 32: thread (x, y) gets the combination of the
/// values of threads (x, 0..ny-1), folded in y order. Every thread must call it.
template <class V, class Op>
__device__ __forceinline__ V column_all_reduce(V v, Op op) {
  __shared__ V partial[kWarp][kWarp + 1];  // [y][x], padded against bank conflicts
  partial[threadIdx.y][threadIdx.x] = v;
  __syncthreads();
  V result = partial[0][threadIdx.x];
  for (int y = 1; y < static_cast<int>(blockDim.y); ++y)
    result = op(result, partial[y][threadIdx.x]);
  __syncthreads();
  return result;
}

struct Sum {
  template <class V>
  __device__ __forceinline__ V operator()(V a, V b) const {
    return a + b;
  }
};

/// Combines Note [Online softmax] states (softmax, cross-entropy).
struct CombineSoftmax {
  template <class V>
  __device__ __forceinline__ OnlineSoftmax<V> operator()(OnlineSoftmax<V> a,
                                                         OnlineSoftmax<V> b) const {
    return OnlineSoftmax<V>::combine(a, b);
  }
};

/// Two sums reduced together (layer norm's statistics and parameter gradients).
template <class V>
struct SumPair {
  V first, second;
  __device__ __forceinline__ SumPair operator+(SumPair o) const {
    return {first + o.first, second + o.second};
  }
};

// --- Rows ---------------------------------------------------------------------------------
//
// A row kernel is a functor `template <class Team> __device__ void operator()(const Team&,
// int64_t row) const` that handles one row with the threads of `team`: thread team.rank() of
// team.size() takes elements rank, rank + size, ... and team.all_reduce combines across the
// team. The team is a warp for rows of up to kWarpRowMax elements, else a block.

constexpr int64_t kWarpRowMax = 1024;
constexpr int kRowsBlock = 128;  // threads of a block of warp teams: 4 rows at a time
constexpr int kRowBlock = 512;   // threads of a block team
constexpr int64_t kMaxGrid = int64_t{65535} * 8;
// Every kernel here runs blocks of at most this many threads; __launch_bounds__ keeps the
// compiler to registers that let such a block launch.
constexpr int kMaxBlockThreads = 512;

struct WarpTeam {
  __device__ __forceinline__ int rank() const { return threadIdx.x % kWarp; }
  __device__ __forceinline__ int size() const { return kWarp; }
  __device__ __forceinline__ int64_t first_row() const {
    return int64_t{blockIdx.x} * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  }
  __device__ __forceinline__ int64_t row_stride() const {
    return int64_t{gridDim.x} * (blockDim.x / kWarp);
  }
  template <class V, class Op>
  __device__ __forceinline__ V all_reduce(V v, Op op) const {
    return warp_all_reduce(v, op);
  }
};

struct BlockTeam {
  __device__ __forceinline__ int rank() const { return threadIdx.x; }
  __device__ __forceinline__ int size() const { return blockDim.x; }
  __device__ __forceinline__ int64_t first_row() const { return blockIdx.x; }
  __device__ __forceinline__ int64_t row_stride() const { return gridDim.x; }
  template <class V, class Op>
  __device__ __forceinline__ V all_reduce(V v, Op op) const {
    return block_all_reduce(v, op);
  }
};

// A row belongs to one warp (or one block), so the loop is uniform over the team and every
// thread of it reaches its all_reduce calls.
template <class Team, class Row>
__global__ void __launch_bounds__(kMaxBlockThreads) for_each_row_kernel(int64_t rows, Row row) {
  const Team team{};
  for (int64_t r = team.first_row(); r < rows; r += team.row_stride()) row(team, r);
}

/// Runs row(team, r) for r in [0, rows), rows of `length` elements, on the context's stream;
/// raises naming `what` on a launch error.
template <class Row>
void launch_rows(const KernelContext& ctx, const char* what, int64_t rows, int64_t length,
                 Row row) {
  if (rows == 0) return;
  const cudaStream_t stream = stream_of(ctx);
  if (length <= kWarpRowMax) {
    const int64_t per_block = kRowsBlock / kWarp;
    const int64_t blocks = std::min((rows + per_block - 1) / per_block, kMaxGrid);
    for_each_row_kernel<WarpTeam>
        <<<static_cast<unsigned>(blocks), kRowsBlock, 0, stream>>>(rows, row);
  } else {
    const int64_t blocks = std::min(rows, kMaxGrid);
    for_each_row_kernel<BlockTeam>
        <<<static_cast<unsigned>(blocks), kRowBlock, 0, stream>>>(rows, row);
  }
  cuda::check(cudaGetLastError(), what, device_of(ctx));
}

// --- Lines along any axis ---------------------------------------------------------------
//
// A tensor viewed as (outer, extent, inner) has outer * inner lines of `extent` elements along
// its middle axis, element j of a line at base + j * stride. A line kernel is a functor
// `template <class Team> __device__ void operator()(const Team&, Line) const`. For inner = 1
// the lines are contiguous rows (launch_rows); otherwise a block of (32, kColumnRows) threads
// takes 32 adjacent lines (coalesced across threadIdx.x) and its rows of threads walk the
// extent; threads whose line is past the end hold an inactive line and still take part in the
// team's all_reduce calls.

struct Line {
  int64_t base = 0, stride = 1;
  bool active = true;
  __device__ __forceinline__ int64_t at(int64_t j) const { return base + j * stride; }
};

struct AxisView {
  int64_t outer = 1, extent = 1, inner = 1;
};

constexpr int kColumnRows = 16;
static_assert(kRowBlock <= kMaxBlockThreads && kWarp * kColumnRows <= kMaxBlockThreads &&
              kBlock <= kMaxBlockThreads);

/// The threads of one column of a (32, ny) block.
struct ColumnTeam {
  __device__ __forceinline__ int rank() const { return threadIdx.y; }
  __device__ __forceinline__ int size() const { return blockDim.y; }
  template <class V, class Op>
  __device__ __forceinline__ V all_reduce(V v, Op op) const {
    return column_all_reduce(v, op);
  }
};

template <class F>
struct RowsAsLines {
  F f;
  int64_t length;
  template <class Team>
  __device__ __forceinline__ void operator()(const Team& team, int64_t row) const {
    f(team, Line{row * length, 1, true});
  }
};

template <class F>
__global__ void __launch_bounds__(kMaxBlockThreads) for_each_line_tile_kernel(AxisView v, F f) {
  const ColumnTeam team{};
  const int64_t tiles_per_outer = (v.inner + kWarp - 1) / kWarp;
  const int64_t tiles = v.outer * tiles_per_outer;
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {  // uniform over the block
    const int64_t o = tile / tiles_per_outer;
    const int64_t i = (tile % tiles_per_outer) * kWarp + threadIdx.x;
    f(team, Line{o * v.extent * v.inner + i, v.inner, i < v.inner});
  }
}

/// Runs f(team, line) for every line along the middle axis of v.
template <class F>
void launch_lines(const KernelContext& ctx, const char* what, AxisView v, F f) {
  if (v.inner == 1) {
    launch_rows(ctx, what, v.outer, v.extent, RowsAsLines<F>{f, v.extent});
    return;
  }
  const int64_t tiles = v.outer * ((v.inner + kWarp - 1) / kWarp);
  if (tiles == 0) return;
  const dim3 block(kWarp, kColumnRows);
  for_each_line_tile_kernel<<<static_cast<unsigned>(std::min(tiles, kMaxGrid)), block, 0,
                              stream_of(ctx)>>>(v, f);
  cuda::check(cudaGetLastError(), what, device_of(ctx));
}

// --- Scratch --------------------------------------------------------------------------------

// Note [Kernel scratch]
// ~~~~~~~~~~~~~~~~~~~~~
// Partial results live in device memory from the device's caching allocator, which goes back
// to the cache when the Scratch dies, right after the launches that use it were queued and
// before they have run. That is safe for the same reason eager outputs may be freed early: all
// kernels and copies of a device run in order on its compute stream, so whatever reuses the
// block next is queued behind them.
class Scratch {
 public:
  Scratch(const KernelContext& ctx, size_t bytes)
      : storage_(bytes, cuda::allocator(device_of(ctx))) {}
  template <class V>
  V* as() const {
    return static_cast<V*>(storage_.data());
  }

 private:
  Storage storage_;
};

// --- Columns --------------------------------------------------------------------------------
//
// Note [Column reductions]
// ~~~~~~~~~~~~~~~~~~~~~~~~
// out[o, i] = op over m < middle of value(o, m, i), for a tensor viewed as (outer, middle,
// inner) and reduced over its middle axis (reduce over leading axes, layer norm's parameter
// gradients). A block of (32, kColumnRows) threads takes 32 adjacent i of one o (coalesced
// loads), its rows of threads walk the middle axis with stride kColumnRows, and
// column_all_reduce folds them. When there are too few such tiles to fill the GPU, the middle
// axis is cut into `chunks` pieces, grid.y of them: pass 1 writes each piece's partial result,
// pass 2 folds the pieces of each output in piece order.

constexpr int64_t kColumnTargetBlocks = 1024;
constexpr int64_t kColumnMinChunk = 256;  // middle-axis rows per piece at least

struct ColumnShape {
  int64_t outer = 1, middle = 1, inner = 1;
  __host__ __device__ int64_t tiles_per_outer() const { return (inner + kWarp - 1) / kWarp; }
  __host__ __device__ int64_t tiles() const { return outer * tiles_per_outer(); }
  __host__ __device__ int64_t outputs() const { return outer * inner; }
};

// finish(j, acc) stores output j = o * inner + i; with `partial`, pass 1 stores acc at
// partial[chunk * outputs + j] instead.
template <class Acc, class Value, class Op, class Finish>
__global__ void __launch_bounds__(kMaxBlockThreads)
    reduce_columns_kernel(ColumnShape s, int64_t chunk_rows, Acc identity, Value value, Op op,
                          Finish finish, Acc* partial) {
  const int64_t tiles_per_outer = s.tiles_per_outer(), tiles = s.tiles();
  const int64_t m_begin = int64_t{blockIdx.y} * chunk_rows;
  const int64_t m_end = std::min(s.middle, m_begin + chunk_rows);
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {  // uniform over the block
    const int64_t o = tile / tiles_per_outer;
    const int64_t i = (tile % tiles_per_outer) * kWarp + threadIdx.x;
    Acc acc = identity;
    if (i < s.inner) {
      for (int64_t m = m_begin + threadIdx.y; m < m_end; m += blockDim.y) {
        acc = op(acc, value(o, m, i));
      }
    }
    acc = column_all_reduce(acc, op);
    if (threadIdx.y == 0 && i < s.inner) {
      const int64_t j = o * s.inner + i;
      if (partial != nullptr) {
        partial[int64_t{blockIdx.y} * s.outputs() + j] = acc;
      } else {
        finish(j, acc);
      }
    }
  }
}

template <class Acc, class Op, class Finish>
__global__ void __launch_bounds__(kMaxBlockThreads)
    fold_chunks_kernel(int64_t outputs, int64_t chunks, const Acc* partial, Op op, Finish finish) {
  for (int64_t j = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; j < outputs;
       j += int64_t{blockDim.x} * gridDim.x) {
    Acc acc = partial[j];
    for (int64_t k = 1; k < chunks; ++k) acc = op(acc, partial[k * outputs + j]);
    finish(j, acc);
  }
}

/// Note [Column reductions]: calls finish(j, acc) once for each output j < s.outputs(), with
/// acc the op-fold of value(o, m, i) over m (identity for an empty middle axis).
template <class Acc, class Value, class Op, class Finish>
void reduce_columns(const KernelContext& ctx, const char* what, ColumnShape s, Acc identity,
                    Value value, Op op, Finish finish) {
  if (s.outputs() == 0) return;
  const int64_t tiles = s.tiles();
  int64_t chunks = 1;
  if (tiles < kColumnTargetBlocks) {
    chunks = std::min((kColumnTargetBlocks + tiles - 1) / tiles,
                      (s.middle + kColumnMinChunk - 1) / kColumnMinChunk);
    chunks = std::max<int64_t>(chunks, 1);
  }
  const int64_t chunk_rows = (s.middle + chunks - 1) / std::max<int64_t>(chunks, 1);
  if (chunk_rows > 0) chunks = (s.middle + chunk_rows - 1) / chunk_rows;  // no empty piece
  chunks = std::max<int64_t>(chunks, 1);

  const cudaStream_t stream = stream_of(ctx);
  const int device = device_of(ctx);
  const dim3 grid(static_cast<unsigned>(std::min(tiles, kMaxGrid)), static_cast<unsigned>(chunks));
  const dim3 block(kWarp, kColumnRows);
  if (chunks == 1) {
    reduce_columns_kernel<<<grid, block, 0, stream>>>(s, std::max<int64_t>(chunk_rows, 1), identity,
                                                      value, op, finish,
                                                      static_cast<Acc*>(nullptr));
    cuda::check(cudaGetLastError(), what, device);
    return;
  }
  Scratch scratch(ctx, static_cast<size_t>(chunks * s.outputs()) * sizeof(Acc));
  Acc* partial = scratch.as<Acc>();
  reduce_columns_kernel<<<grid, block, 0, stream>>>(s, chunk_rows, identity, value, op, finish,
                                                    partial);
  cuda::check(cudaGetLastError(), what, device);
  const int64_t blocks = std::min((s.outputs() + kBlock - 1) / kBlock, kMaxGrid);
  fold_chunks_kernel<<<static_cast<unsigned>(blocks), kBlock, 0, stream>>>(s.outputs(), chunks,
                                                                           partial, op, finish);
  cuda::check(cudaGetLastError(), what, device);
}

}  // namespace ofl::cuda_kernels
