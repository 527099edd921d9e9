// CPU kernels of embedding (a row gather) and embedding_grad (a scatter-add that each thread
// runs over its own columns, so the sums are race-free and deterministic).

#include "oneflowlike/ops/embedding.h"

#include <algorithm>
#include <cstring>

#include "oneflowlike/common/parallel.h"
#include "oneflowlike/kernels/cpu/widened.h"
#include "oneflowlike/op.h"

namespace ofl::cpu {

namespace {

// Indices are data, not shape, so inference cannot see them: check them here, on one thread
// (an exception must not leave a parallel region).
template <class I>
void check_indices(const char* op, const I* indices, int64_t n, int64_t num_embeddings) {
  for (int64_t i = 0; i < n; ++i) {
    OFL_CHECK_INDEX(
        indices[i] >= 0 && indices[i] < num_embeddings, "[", op,
        "] every index must be in [0, num_embeddings) with num_embeddings = ", num_embeddings,
        ". However, got index ", static_cast<int64_t>(indices[i]), " at position ", i, ".");
  }
}

template <class T, class I>
void gather_rows(const Tensor& weight, const Tensor& indices, const Tensor& out) {
  const int64_t num_embeddings = weight.shape()[0], dim = weight.shape()[1];
  const int64_t n = indices.numel();
  const I* idx = indices.data<I>();
  check_indices("embedding", idx, n, num_embeddings);
  const T* w = weight.data<T>();
  T* y = out.data<T>();
  const int64_t grain = std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(dim, 1));
  parallel_for(n, grain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      std::memcpy(y + i * dim, w + static_cast<int64_t>(idx[i]) * dim, dim * sizeof(T));
    }
  });
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

// dweight (V, D) = 0; dweight[indices[i], :] += dy[i, :] in index order, one column block per
// thread; then row padding_idx (unless -1) back to zero.
template <class T, class I>
void scatter_add_rows(const Tensor& dy, const Tensor& indices, const Tensor& dweight,
                      int64_t padding_idx) {
  const int64_t num_embeddings = dweight.shape()[0], dim = dweight.shape()[1];
  const int64_t n = indices.numel();
  const I* idx = indices.data<I>();
  check_indices("embedding_grad", idx, n, num_embeddings);
  const T* g = dy.data<T>();
  T* dw = dweight.data<T>();
  std::fill(dw, dw + dweight.numel(), T(0));
  const int64_t grain = std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(n, 1));
  parallel_for(dim, grain, [&](int64_t begin, int64_t end) {
    for (int64_t i = 0; i < n; ++i) {
      const T* src = g + i * dim;
      T* dst = dw + static_cast<int64_t>(idx[i]) * dim;
      for (int64_t c = begin; c < end; ++c) dst[c] += src[c];
    }
  });
  if (padding_idx >= 0) std::fill(dw + padding_idx * dim, dw + (padding_idx + 1) * dim, T(0));
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

OFL_REGISTER_KERNEL("embedding", kCPU, EmbeddingKernel, float, double);
OFL_REGISTER_KERNEL("embedding_grad", kCPU, EmbeddingGradKernel, float, double);

// float16 and bfloat16 through the float32 kernels (Note [Widened kernels] in widened.h).
OFL_REGISTER_WIDENED_KERNEL("embedding", EmbeddingKernel);
OFL_REGISTER_WIDENED_KERNEL("embedding_grad", EmbeddingGradKernel);

}  // namespace ofl::cpu
