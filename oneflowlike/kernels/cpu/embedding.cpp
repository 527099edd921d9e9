// CPU kernels of embedding (a row gather) and embedding_grad (a scatter-add that each thread
// runs over its own columns, so the sums are race-free and deterministic): the slice kernels
// index_select uses too (index_slices.h), with one slice per table row.

#include "oneflowlike/ops/embedding.h"

#include <algorithm>

#include "oneflowlike/kernels/cpu/index_slices.h"
#include "oneflowlike/op.h"

namespace ofl::cpu {

namespace {

// weight (V, D) is (outer 1, rows V, inner D) for the shared slice kernels.
template <class T, class I>
void gather_rows(const Tensor& weight, const Tensor& indices, const Tensor& out) {
  const SliceView v{1, weight.shape()[0], weight.shape()[1]};
  gather_slices("embedding", "num_embeddings", weight.data<T>(), v, indices.data<I>(),
                indices.numel(), out.data<T>());
}

template <class T>
struct EmbeddingKernel {
  static void run(const KernelContext& ctx) {
    if (ctx.in(1).dtype() == DataType::kInt32) {
      gather_rows<T, int32_t>(ctx.in(0), ctx.in(1), ctx.out(0));
    } else {
      gather_rows<T, int64_t>(ctx.in(0), ctx.in(1), ctx.out(0));
    }
  }
};

// dweight (V, D) = 0; dweight[indices[i], :] += dy[i, :] in index order; then row padding_idx
// (unless -1) back to zero.
template <class T, class I>
void scatter_add_rows(const Tensor& dy, const Tensor& indices, const Tensor& dweight,
                      int64_t padding_idx) {
  const SliceView v{1, dweight.shape()[0], dweight.shape()[1]};
  T* dw = dweight.data<T>();
  scatter_add_slices("embedding_grad", "num_embeddings", dy.data<T>(), v, indices.data<I>(),
                     indices.numel(), dw);
  if (padding_idx >= 0)
    std::fill(dw + padding_idx * v.inner, dw + (padding_idx + 1) * v.inner, T(0.0f));
}

template <class T>
struct EmbeddingGradKernel {
  static void run(const KernelContext& ctx) {
    const int64_t padding_idx = ctx.p<EmbeddingGradParams>().padding_idx;
    if (ctx.in(1).dtype() == DataType::kInt32) {
      scatter_add_rows<T, int32_t>(ctx.in(0), ctx.in(1), ctx.out(0), padding_idx);
    } else {
      scatter_add_rows<T, int64_t>(ctx.in(0), ctx.in(1), ctx.out(0), padding_idx);
    }
  }
};

}  // namespace

// The lookup copies rows, so 16-bit tables are copied as they are: the Widened kernel's bits
// without a float32 copy of the whole table on every call.
OFL_REGISTER_KERNEL("embedding", kCPU, EmbeddingKernel, float, double, float16, bfloat16);
// The gradient's sums in float32 for float16 and bfloat16, each rounded once (Note [16-bit
// scatter-adds] in index_slices.h).
OFL_REGISTER_KERNEL("embedding_grad", kCPU, EmbeddingGradKernel, float, double, float16, bfloat16);

}  // namespace ofl::cpu
