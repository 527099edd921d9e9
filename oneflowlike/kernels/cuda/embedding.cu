// CUDA kernels of embedding (a row gather) and embedding_grad (a scatter-add into a zero table),
// kernels/cpu/embedding.cpp.
//
// Note [Device index errors]: indices are data, so the CPU kernels check their range and raise
// IndexError. A kernel cannot raise: an index outside [0, num_embeddings) makes one thread
// printf the op, the position and the index (in the CPU's words) and then __trap(). The trap
// aborts the kernel and leaves the device's context with a sticky error, so the next
// cuda::check on that device (a later launch, an event, a copy back to the host) raises
// ofl::Error with the driver's "unspecified launch failure"; the printf line, on the process's
// stdout, says which index it was. The process cannot use that device again.

#include <algorithm>
#include <cstdio>

#include "oneflowlike/kernels/cuda/elementwise.cuh"
#include "oneflowlike/kernels/cuda/reduce.cuh"
#include "oneflowlike/ops/embedding.h"

namespace ofl::cuda_kernels {

namespace {

template <class I>
__device__ __forceinline__ bool in_range(I index, int64_t num_embeddings) {
  return index >= 0 && static_cast<int64_t>(index) < num_embeddings;
}

// Note [Device index errors].
__device__ __noinline__ void trap_bad_index(const char* op, int64_t index, int64_t position,
                                            int64_t num_embeddings) {
  printf(
      "[%s] every index must be in [0, num_embeddings) with num_embeddings = %lld. However, got "
      "index %lld at position %lld.\n",
      op, static_cast<long long>(num_embeddings), static_cast<long long>(index),
      static_cast<long long>(position));
  __trap();
}

// ---- embedding ----

// y (n, row) = weight[indices] in units U of the row (16 bytes where the row's size and the
// addresses allow). The thread of unit 0 of a row checks its index; the others skip a bad row
// (never reading out of bounds) so that the one that reports it is the one that traps.
template <class U, class I>
__global__ void gather_rows(const U* weight, const I* indices, U* y, int64_t n, int64_t row,
                            int64_t num_embeddings) {
  const int64_t total = n * row;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < total;
       e += int64_t{blockDim.x} * gridDim.x) {
    const int64_t i = e / row;
    const int64_t c = e - i * row;
    const I index = indices[i];
    if (!in_range(index, num_embeddings)) {
      if (c == 0) trap_bad_index("embedding", index, i, num_embeddings);
      continue;
    }
    y[e] = weight[static_cast<int64_t>(index) * row + c];
  }
}

template <class U, class I>
void gather_rows_in(const KernelContext& ctx, int64_t n, int64_t row_bytes) {
  const int64_t row = row_bytes / int64_t{sizeof(U)};
  const int64_t blocks = std::clamp<int64_t>((n * row + kBlock - 1) / kBlock, 1, 65535 * 8);
  gather_rows<U, I><<<static_cast<unsigned>(blocks), kBlock, 0, stream_of(ctx)>>>(
      static_cast<const U*>(ctx.in(0).raw_data()), static_cast<const I*>(ctx.in(1).raw_data()),
      static_cast<U*>(ctx.out(0).raw_data()), n, row, ctx.in(0).shape()[0]);
  cuda::check(cudaGetLastError(), "embedding", device_of(ctx));
}

template <class I>
void embedding(const KernelContext& ctx) {
  const Tensor& weight = ctx.in(0);
  const int64_t n = ctx.in(1).numel();
  const int64_t row_bytes = weight.shape()[1] * static_cast<int64_t>(dtype_size(weight.dtype()));
  if (n == 0 || row_bytes == 0) return;
  const auto fits = [&](size_t unit) {
    return row_bytes % static_cast<int64_t>(unit) == 0 && is_aligned(weight.raw_data(), unit) &&
           is_aligned(ctx.out(0).raw_data(), unit);
  };
  if (fits(16)) return gather_rows_in<uint4, I>(ctx, n, row_bytes);
  if (fits(8)) return gather_rows_in<uint64_t, I>(ctx, n, row_bytes);
  if (fits(4)) return gather_rows_in<uint32_t, I>(ctx, n, row_bytes);
  if (fits(2)) return gather_rows_in<uint16_t, I>(ctx, n, row_bytes);
  gather_rows_in<uint8_t, I>(ctx, n, row_bytes);
}

template <class T>
struct EmbeddingKernel {
  static void run(const KernelContext& ctx) {
    if (ctx.in(1).dtype() == DataType::kInt32) {
      embedding<int32_t>(ctx);
    } else {
      embedding<int64_t>(ctx);
    }
  }
};

// ---- embedding_grad ----

// Note [Deterministic embedding_grad]: dweight (V, D) = 0, then dweight[indices[i], :] +=
// dy[i, :] for i in index order, in T (float32 for the 16-bit dtypes), exactly as the CPU sums (so
// float32 results are bit-identical to the CPU's), with no atomics. Block (x, y) owns the columns
// of chunk x and the table rows of range y: it walks every index in order and adds the rows whose
// index falls in its range, each thread into its own column. Every element of dweight has one owner
// thread, which adds its terms in index order. Each block reads all n indices (through shared
// memory, kIndexTile at a time); the ranges split the table so that there are about
// kTargetBlocks blocks.
constexpr int kIndexTile = 1024;
constexpr int64_t kTargetBlocks = 1024;

// A: the type the sums are kept in (float for the 16-bit dtypes, as the CPU's widened kernel
// sums in float32), T: dy's.
template <class A, class T, class I>
__global__ void scatter_add_rows(const T* __restrict__ dy, const I* __restrict__ indices,
                                 A* __restrict__ dweight, int64_t n, int64_t dim,
                                 int64_t num_embeddings, int64_t rows_per_range) {
  __shared__ int64_t tile[kIndexTile];
  const int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  const int64_t row_begin = blockIdx.y * rows_per_range;
  const int64_t row_end = std::min(num_embeddings, row_begin + rows_per_range);
  // Block (0, 0) reports bad indices (Note [Device index errors]); the others skip them, as no
  // range holds them.
  const bool reports = blockIdx.x == 0 && blockIdx.y == 0;
  for (int64_t base = 0; base < n; base += kIndexTile) {
    const int count = static_cast<int>(std::min<int64_t>(kIndexTile, n - base));
    for (int t = threadIdx.x; t < count; t += blockDim.x) {
      const I index = indices[base + t];
      if (reports && !in_range(index, num_embeddings)) {
        trap_bad_index("embedding_grad", index, base + t, num_embeddings);
      }
      tile[t] = static_cast<int64_t>(index);
    }
    __syncthreads();
    if (c < dim) {
      for (int t = 0; t < count; ++t) {
        const int64_t v = tile[t];  // the same for the whole block: no divergence
        if (v >= row_begin && v < row_end) dweight[v * dim + c] += load(dy, (base + t) * dim + c);
      }
    }
    __syncthreads();  // before the next tile overwrites `tile`
  }
}

template <class T, class I>
void embedding_grad(const KernelContext& ctx) {
  using N = native_t<T>;
  using A = compute_t<N>;  // float for the 16-bit dtypes: sums in a float32 scratch, rounded once
  constexpr bool kWiden = !std::is_same_v<A, N>;
  const Tensor& out = ctx.out(0);
  const int64_t num_embeddings = out.shape()[0], dim = out.shape()[1];
  const int64_t n = ctx.in(1).numel();
  if (out.numel() == 0) return;
  Scratch scratch(ctx, kWiden ? out.numel() * sizeof(A) : 0);
  A* dweight = kWiden ? scratch.as<A>() : reinterpret_cast<A*>(data<T>(out));
  cuda::check(cudaMemsetAsync(dweight, 0, out.numel() * sizeof(A), stream_of(ctx)),
              "embedding_grad", device_of(ctx));
  if (n == 0 && !kWiden) return;
  const int threads =
      static_cast<int>(std::min<int64_t>(kBlock, (dim + 31) / 32 * 32));  // whole warps
  const int64_t chunks = (dim + threads - 1) / threads;
  const int64_t ranges = std::clamp<int64_t>((kTargetBlocks + chunks - 1) / chunks, 1,
                                             std::min<int64_t>(num_embeddings, 65535));
  const int64_t rows_per_range = (num_embeddings + ranges - 1) / ranges;
  const dim3 grid(static_cast<unsigned>(chunks),
                  static_cast<unsigned>((num_embeddings + rows_per_range - 1) / rows_per_range));
  if (n > 0) {
    scatter_add_rows<A, N, I><<<grid, threads, 0, stream_of(ctx)>>>(
        data<T>(ctx.in(0)), static_cast<const I*>(ctx.in(1).raw_data()), dweight, n, dim,
        num_embeddings, rows_per_range);
    cuda::check(cudaGetLastError(), "embedding_grad", device_of(ctx));
  }
  if (const int64_t padding_idx = ctx.p<EmbeddingGradParams>().padding_idx; padding_idx >= 0) {
    cuda::check(cudaMemsetAsync(dweight + padding_idx * dim, 0, dim * sizeof(A), stream_of(ctx)),
                "embedding_grad", device_of(ctx));
  }
  if constexpr (kWiden) {
    N* y = data<T>(out);
    const A* sums = dweight;
    launch_for_each(ctx, "embedding_grad", out.numel(),
                    [=] __device__(int64_t i) { store(y, i, sums[i]); });
  }
}

template <class T>
struct EmbeddingGradKernel {
  static void run(const KernelContext& ctx) {
    if (ctx.in(1).dtype() == DataType::kInt32) {
      embedding_grad<T, int32_t>(ctx);
    } else {
      embedding_grad<T, int64_t>(ctx);
    }
  }
};

}  // namespace

// The CPU's dtypes: float16 and bfloat16 sum in float32 and round once, as the CPU's widened
// kernels (Note [Widened kernels] in kernels/cpu/widened.h).
OFL_REGISTER_KERNEL("embedding", kCUDA, EmbeddingKernel, float, double, float16, bfloat16);
OFL_REGISTER_KERNEL("embedding_grad", kCUDA, EmbeddingGradKernel, float, double, float16, bfloat16);

}  // namespace ofl::cuda_kernels
