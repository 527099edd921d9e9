#pragma once
// embedding: rows of a (num_embeddings, embedding_dim) table picked by integer indices, and its
// backward embedding_grad (a deterministic scatter-add into a zero table).

#include <cstdint>

#include "oneflowlike/params.h"
#include "oneflowlike/tensor.h"

namespace ofl {

/// padding_idx: a row of the table that gets no gradient (torch's padding_idx), -1 for none.
struct EmbeddingParams {
  int64_t padding_idx = -1;
  OFL_PARAMS(EmbeddingParams, padding_idx)
};

struct EmbeddingGradParams {
  int64_t num_embeddings = 0;  // logical rows of the table the gradient is for
  int64_t padding_idx = -1;    // a row left zero, -1 for none
  OFL_PARAMS(EmbeddingGradParams, num_embeddings, padding_idx)
};

namespace functional {
/// weight (V, D), indices (...) int32/int64 -> (..., D). Raises IndexError for an index outside
/// [0, V). Row padding_idx (in [0, V), or -1 for none) gets no gradient.
Tensor embedding(const Tensor& weight, const Tensor& indices, int64_t padding_idx = -1);
/// dy (..., D), indices (...) -> dweight (num_embeddings, D): dweight[indices[n]] += dy[n], then
/// row padding_idx (unless -1) set to zero.
Tensor embedding_grad(const Tensor& dy, const Tensor& indices, int64_t num_embeddings,
                      int64_t padding_idx = -1);
}  // namespace functional

}  // namespace ofl
