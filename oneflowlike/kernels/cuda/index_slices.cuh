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
#include <cub/device/device_radix_sort.cuh>
#include <limits>
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

/// Only the range check of the n indices, where nothing is moved (an empty result): the CPU
/// checks them all the same, and so must the GPU (Note [Device index errors]).
template <class I>
void check_slice_indices(const KernelContext& ctx, SliceOp op, const I* index, int64_t n,
                         int64_t rows) {
  if (n == 0) return;
  launch_for_each(ctx, host_name(op), n, [=] __device__(int64_t t) {
    const I v = index[t];
    if (!index_in_range(v, rows)) trap_bad_slice_index(op, v, t, rows);
  });
}

/// out (outer, n, inner) = src (outer, rows, inner) at index along the middle axis; elements of
/// `elem_bytes` bytes (values are only moved).
template <class I>
void gather_slices(const KernelContext& ctx, SliceOp op, const void* src, const I* index, void* out,
                   int64_t outer, int64_t rows, int64_t n, int64_t inner, int64_t elem_bytes) {
  const int64_t row_bytes = inner * elem_bytes;
  if (outer * n == 0 || row_bytes == 0) return check_slice_indices(ctx, op, index, n, rows);
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
// sums (so float32 results are bit-identical to the CPU's), with no atomics:
//  1. a kernel checks every index (Note [Device index errors]) and writes it as a sort key
//     beside its position t;
//  2. CUB's radix sort, which is stable, orders the (index, t) pairs by index, so each row's
//     positions form one run in increasing t;
//  3. block (x, y) owns row y's (o, i) columns of chunk x: it finds the row's run by binary
//     search and each thread adds its column's terms in t order, then writes the row once
//     (zeros for a row no index names).
// The work is the n indices sorted plus each source slice read once; the first version (every
// block scanning all n indices for the rows of its range) took 0.4 ms for a 4,096-token
// embedding gradient on an H100.
constexpr int64_t kMaxScatterRowBlocks = 65535;

template <class I>
__global__ void slice_sort_keys_kernel(SliceOp op, const I* __restrict__ index, int64_t n,
                                       int64_t rows, int64_t* __restrict__ keys,
                                       int64_t* __restrict__ positions) {
  for (int64_t t = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; t < n;
       t += int64_t{gridDim.x} * blockDim.x) {
    const I v = index[t];
    if (!index_in_range(v, rows)) trap_bad_slice_index(op, v, t, rows);
    keys[t] = static_cast<int64_t>(v);
    positions[t] = t;
  }
}

// The first of sorted[0, n) not below `row`.
__device__ __forceinline__ int64_t first_not_below(const int64_t* sorted, int64_t n, int64_t row) {
  int64_t lo = 0, hi = n;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (sorted[mid] < row) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

template <class A, class T>
__global__ void scatter_add_runs_kernel(const T* __restrict__ src,
                                        const int64_t* __restrict__ sorted_keys,
                                        const int64_t* __restrict__ positions, T* __restrict__ out,
                                        int64_t n, int64_t inner, int64_t columns, int64_t rows) {
  const int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (c >= columns) return;
  const int64_t o = c / inner, i = c - o * inner;
  for (int64_t row = blockIdx.y; row < rows; row += gridDim.y) {
    const int64_t begin = first_not_below(sorted_keys, n, row);
    const int64_t end = first_not_below(sorted_keys, n, row + 1);
    A sum = A(0);
    for (int64_t j = begin; j < end; ++j) sum += load(src, (o * n + positions[j]) * inner + i);
    store(out, (o * rows + row) * inner + i, sum);
  }
}

/// Note [Deterministic slice scatter-add]: out (outer, rows, inner) of T from src (outer, n,
/// inner) of T; the 16-bit dtypes sum in float32 and round once.
template <class T, class I>
void scatter_add_slices(const KernelContext& ctx, SliceOp op, const Tensor& src, const I* index,
                        const Tensor& out, int64_t outer, int64_t rows, int64_t n, int64_t inner) {
  using N = native_t<T>;
  using A = compute_t<N>;
  const int64_t total = out.numel();
  if (total == 0) return check_slice_indices(ctx, op, index, n, rows);
  OFL_CHECK(n <= std::numeric_limits<int>::max(), "[", host_name(op), "] at most ",
            std::numeric_limits<int>::max(), " indices on CUDA. However, got ", n, ".");
  const int device = device_of(ctx);
  const cudaStream_t stream = stream_of(ctx);
  const size_t pair_bytes = static_cast<size_t>(std::max<int64_t>(n, 1)) * sizeof(int64_t);
  Scratch keys(ctx, pair_bytes), positions(ctx, pair_bytes);
  Scratch sorted_keys(ctx, pair_bytes), sorted_positions(ctx, pair_bytes);
  if (n > 0) {
    const int threads = kBlock;
    const int64_t blocks = std::min<int64_t>((n + threads - 1) / threads, 4096);
    slice_sort_keys_kernel<I><<<static_cast<unsigned>(blocks), threads, 0, stream>>>(
        op, index, n, rows, keys.as<int64_t>(), positions.as<int64_t>());
    cuda::check(cudaGetLastError(), host_name(op), device);
    // Only the bits that can differ among indices in [0, rows).
    int end_bit = 1;
    while (end_bit < 63 && (int64_t{1} << end_bit) < rows) ++end_bit;
    size_t temp_bytes = 0;
    cuda::check(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, keys.as<int64_t>(),
                                                sorted_keys.as<int64_t>(), positions.as<int64_t>(),
                                                sorted_positions.as<int64_t>(), static_cast<int>(n),
                                                0, end_bit, stream),
                "cub::DeviceRadixSort::SortPairs", device);
    Scratch temp(ctx, std::max<size_t>(temp_bytes, 1));
    cuda::check(cub::DeviceRadixSort::SortPairs(temp.as<char>(), temp_bytes, keys.as<int64_t>(),
                                                sorted_keys.as<int64_t>(), positions.as<int64_t>(),
                                                sorted_positions.as<int64_t>(), static_cast<int>(n),
                                                0, end_bit, stream),
                "cub::DeviceRadixSort::SortPairs", device);
  }
  const int64_t columns = outer * inner;
  const int threads =
      static_cast<int>(std::min<int64_t>(kBlock, (columns + 31) / 32 * 32));  // whole warps
  const dim3 grid(static_cast<unsigned>((columns + threads - 1) / threads),
                  static_cast<unsigned>(std::min(rows, kMaxScatterRowBlocks)));
  scatter_add_runs_kernel<A, N><<<grid, threads, 0, stream>>>(
      data<T>(src), sorted_keys.as<int64_t>(), sorted_positions.as<int64_t>(), data<T>(out), n,
      inner, columns, rows);
  cuda::check(cudaGetLastError(), host_name(op), device);
}

}  // namespace ofl::cuda_kernels
