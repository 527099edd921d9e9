#pragma once
// The slice gather and scatter-add that embedding and index_select share on CUDA, as
// kernels/cpu/index_slices.h on the CPU: a source viewed as (outer, rows, inner), n int32/int64
// indices, and the result (outer, n, inner).
//
// Note [Device index errors]: indices are data, so the CPU kernels check their range and raise
// IndexError. A kernel cannot raise: an index outside [0, rows) makes one thread printf the op,
// the position and the index (in the CPU's words) and then __trap(). The trap aborts the kernel
// and leaves the device's context with a sticky error, so the next cuda::check on that device (a
// later launch, an event, a copy back to the host) raises ofl::Error with the driver's
// "unspecified launch failure"; the printf line, on the process's stdout, says which index it
// was. The process cannot use that device again.

#include <algorithm>
#include <cstdio>
#include <type_traits>

#include "oneflowlike/kernels/cuda/elementwise.cuh"
#include "oneflowlike/kernels/cuda/reduce.cuh"

namespace ofl::cuda_kernels {

template <class I>
__device__ __forceinline__ bool index_in_range(I index, int64_t rows) {
  return index >= 0 && static_cast<int64_t>(index) < rows;
}

/// Note [Device index errors]; `what` names the bound, as the CPU message does.
static __device__ __noinline__ void trap_bad_index(const char* op, const char* what, int64_t index,
                                                   int64_t position, int64_t rows) {
  printf(
      "[%s] every index must be in [0, %s) with %s = %lld. However, got index %lld at position "
      "%lld.\n",
      op, what, what, static_cast<long long>(rows), static_cast<long long>(index),
      static_cast<long long>(position));
  __trap();
}

/// The ops that use the slice kernels. Messages need their names on the device, where a host
/// string is out of reach: device_name gives literals compiled into the kernel.
enum class SliceOp { kEmbedding, kEmbeddingGrad, kIndexSelect, kIndexSelectGrad };

inline const char* host_name(SliceOp op) {
  switch (op) {
    case SliceOp::kEmbedding:
      return "embedding";
    case SliceOp::kEmbeddingGrad:
      return "embedding_grad";
    case SliceOp::kIndexSelect:
      return "index_select";
    default:
      return "index_select_grad";
  }
}

__device__ __forceinline__ void trap_bad_slice_index(SliceOp op, int64_t index, int64_t position,
                                                     int64_t rows) {
  switch (op) {
    case SliceOp::kEmbedding:
      return trap_bad_index("embedding", "num_embeddings", index, position, rows);
    case SliceOp::kEmbeddingGrad:
      return trap_bad_index("embedding_grad", "num_embeddings", index, position, rows);
    case SliceOp::kIndexSelect:
      return trap_bad_index("index_select", "x.shape[dim]", index, position, rows);
    default:
      return trap_bad_index("index_select_grad", "x.shape[dim]", index, position, rows);
  }
}

// out (outer, n, row) = src[o, index[t], :] in units U of the row (16 bytes where the row's size
// and the addresses allow). The thread of unit 0 of an (o = 0) row checks its index; the others
// skip a bad row (never reading out of bounds) so that the one that reports it is the one that
// traps.
template <class U, class I>
__global__ void gather_slices_kernel(SliceOp op, const U* src, const I* index, U* out,
                                     int64_t outer, int64_t rows, int64_t n, int64_t row) {
  const int64_t total = outer * n * row;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < total;
       e += int64_t{blockDim.x} * gridDim.x) {
    const int64_t j = e / row;
    const int64_t c = e - j * row;
    const int64_t o = j / n, t = j - o * n;
    const I v = index[t];
    if (!index_in_range(v, rows)) {
      if (c == 0 && o == 0) trap_bad_slice_index(op, v, t, rows);
      continue;
    }
    out[e] = src[(o * rows + static_cast<int64_t>(v)) * row + c];
  }
}

template <class U, class I>
void gather_slices_in(const KernelContext& ctx, SliceOp op, const void* src, const I* index,
                      void* out, int64_t outer, int64_t rows, int64_t n, int64_t row_bytes) {
  const int64_t row = row_bytes / int64_t{sizeof(U)};
  const int64_t blocks = std::clamp<int64_t>((outer * n * row + kBlock - 1) / kBlock, 1, kMaxGrid);
  gather_slices_kernel<U, I><<<static_cast<unsigned>(blocks), kBlock, 0, stream_of(ctx)>>>(
      op, static_cast<const U*>(src), index, static_cast<U*>(out), outer, rows, n, row);
  cuda::check(cudaGetLastError(), host_name(op), device_of(ctx));
}

/// out (outer, n, inner) = src (outer, rows, inner) at index along the middle axis; elements of
/// `elem_bytes` bytes (values are only moved).
template <class I>
void gather_slices(const KernelContext& ctx, SliceOp op, const void* src, const I* index, void* out,
                   int64_t outer, int64_t rows, int64_t n, int64_t inner, int64_t elem_bytes) {
  const int64_t row_bytes = inner * elem_bytes;
  if (outer * n == 0 || row_bytes == 0) return;
  const auto fits = [&](size_t unit) {
    return row_bytes % static_cast<int64_t>(unit) == 0 && is_aligned(src, unit) &&
           is_aligned(out, unit);
  };
  if (fits(16))
    return gather_slices_in<uint4, I>(ctx, op, src, index, out, outer, rows, n, row_bytes);
  if (fits(8))
    return gather_slices_in<uint64_t, I>(ctx, op, src, index, out, outer, rows, n, row_bytes);
  if (fits(4))
    return gather_slices_in<uint32_t, I>(ctx, op, src, index, out, outer, rows, n, row_bytes);
  if (fits(2))
    return gather_slices_in<uint16_t, I>(ctx, op, src, index, out, outer, rows, n, row_bytes);
  gather_slices_in<uint8_t, I>(ctx, op, src, index, out, outer, rows, n, row_bytes);
}

// Note [Deterministic slice scatter-add]: out (outer, rows, inner) = 0, then out[o, index[t], :]
// += src[o, t, :] for t in index order, in A (float32 for the 16-bit dtypes), exactly as the CPU
// sums (so float32 results are bit-identical to the CPU's), with no atomics. The columns are the
// outer * inner (o, i) pairs. Block (x, y) owns the columns of chunk x and the rows of range y:
// it walks every index in order and adds the slices whose index falls in its range, each thread
// into its own column. Every element of out has one owner thread, which adds its terms in index
// order. Each block reads all n indices (through shared memory, kIndexTile at a time); the
// ranges split the rows so that there are about kScatterTargetBlocks blocks.
constexpr int kIndexTile = 1024;
constexpr int64_t kScatterTargetBlocks = 1024;

template <class A, class T, class I>
__global__ void scatter_add_slices_kernel(SliceOp op, const T* __restrict__ src,
                                          const I* __restrict__ index, A* __restrict__ out,
                                          int64_t n, int64_t inner, int64_t columns, int64_t rows,
                                          int64_t rows_per_range) {
  __shared__ int64_t tile[kIndexTile];
  const int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  const int64_t o = c / inner, i = c - (c / inner) * inner;
  const int64_t row_begin = blockIdx.y * rows_per_range;
  const int64_t row_end = std::min(rows, row_begin + rows_per_range);
  // Block (0, 0) reports bad indices (Note [Device index errors]); the others skip them, as no
  // range holds them.
  const bool reports = blockIdx.x == 0 && blockIdx.y == 0;
  for (int64_t base = 0; base < n; base += kIndexTile) {
    const int count = static_cast<int>(std::min<int64_t>(kIndexTile, n - base));
    for (int t = threadIdx.x; t < count; t += blockDim.x) {
      const I v = index[base + t];
      if (reports && !index_in_range(v, rows)) {
        trap_bad_slice_index(op, v, base + t, rows);
      }
      tile[t] = static_cast<int64_t>(v);
    }
    __syncthreads();
    if (c < columns) {
      for (int t = 0; t < count; ++t) {
        const int64_t v = tile[t];  // the same for the whole block: no divergence
        if (v >= row_begin && v < row_end) {
          out[(o * rows + v) * inner + i] += load(src, (o * n + base + t) * inner + i);
        }
      }
    }
    __syncthreads();  // before the next tile overwrites `tile`
  }
}

/// Note [Deterministic slice scatter-add]: out (outer, rows, inner) of T from src (outer, n,
/// inner) of T; the 16-bit dtypes sum in a float32 scratch and round once.
template <class T, class I>
void scatter_add_slices(const KernelContext& ctx, SliceOp op, const Tensor& src, const I* index,
                        const Tensor& out, int64_t outer, int64_t rows, int64_t n, int64_t inner) {
  using N = native_t<T>;
  using A = compute_t<N>;
  constexpr bool kWiden = !std::is_same_v<A, N>;
  const int64_t total = out.numel();
  if (total == 0) return;
  Scratch scratch(ctx, kWiden ? total * sizeof(A) : 0);
  A* sums = kWiden ? scratch.as<A>() : reinterpret_cast<A*>(data<T>(out));
  cuda::check(cudaMemsetAsync(sums, 0, total * sizeof(A), stream_of(ctx)), host_name(op),
              device_of(ctx));
  const int64_t columns = outer * inner;
  if (n > 0) {
    const int threads =
        static_cast<int>(std::min<int64_t>(kBlock, (columns + 31) / 32 * 32));  // whole warps
    const int64_t chunks = (columns + threads - 1) / threads;
    const int64_t ranges = std::clamp<int64_t>((kScatterTargetBlocks + chunks - 1) / chunks, 1,
                                               std::min<int64_t>(rows, 65535));
    const int64_t rows_per_range = (rows + ranges - 1) / ranges;
    const dim3 grid(static_cast<unsigned>(chunks),
                    static_cast<unsigned>((rows + rows_per_range - 1) / rows_per_range));
    scatter_add_slices_kernel<A, N, I><<<grid, threads, 0, stream_of(ctx)>>>(
        op, data<T>(src), index, sums, n, inner, columns, rows, rows_per_range);
    cuda::check(cudaGetLastError(), host_name(op), device_of(ctx));
  }
  if constexpr (kWiden) {
    N* y = data<T>(out);
    const A* s = sums;
    launch_for_each(ctx, host_name(op), total, [=] __device__(int64_t j) { store(y, j, s[j]); });
  }
}

}  // namespace ofl::cuda_kernels
