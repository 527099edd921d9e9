// CUDA kernels of embedding (a row gather) and embedding_grad (a scatter-add into a zero table),
// kernels/cpu/embedding.cpp: the slice kernels index_select uses too (index_slices.cuh), with
// one slice per table row. Bad indices: Note [Device index errors] there.

#include "oneflowlike/kernels/cuda/index_slices.cuh"
#include "oneflowlike/ops/embedding.h"

namespace ofl::cuda_kernels {

namespace {

template <class I>
void embedding(const KernelContext& ctx) {
  const Tensor& weight = ctx.in(0);
  gather_slices(ctx, SliceOp::kEmbedding, weight.raw_data(),
                static_cast<const I*>(ctx.in(1).raw_data()), ctx.out(0).raw_data(), /*outer=*/1,
                weight.shape()[0], ctx.in(1).numel(), weight.shape()[1],
                static_cast<int64_t>(dtype_size(weight.dtype())));
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

// Note [Deterministic slice scatter-add] (index_slices.cuh): bit-identical to the CPU's sums in
// float32, no atomics.
template <class T, class I>
void embedding_grad(const KernelContext& ctx) {
  const Tensor& out = ctx.out(0);
  scatter_add_slices<T, I>(ctx, SliceOp::kEmbeddingGrad, ctx.in(0),
                           static_cast<const I*>(ctx.in(1).raw_data()), out, /*outer=*/1,
                           out.shape()[0], ctx.in(1).numel(), out.shape()[1]);
  // Row padding_idx gets no gradient: zero it afterwards, on the same stream (zero bits in every
  // float dtype).
  if (const int64_t padding_idx = ctx.p<EmbeddingGradParams>().padding_idx; padding_idx >= 0) {
    const size_t row_bytes = out.shape()[1] * dtype_size(out.dtype());
    cuda::check(cudaMemsetAsync(static_cast<char*>(out.raw_data()) + padding_idx * row_bytes, 0,
                                row_bytes, stream_of(ctx)),
                "embedding_grad", device_of(ctx));
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
