#pragma once
// embedding: rows of a (num_embeddings, embedding_dim) table picked by integer indices, and its
// backward embedding_grad (a deterministic scatter-add into a zero table).

#include <cstdint>

#include "oneflowlike/params.h"
#include "oneflowlike/tensor.h"

namespace ofl {

struct EmbeddingGradParams {
  int64_t num_embeddings = 0;  // logical rows of the table the gradient is for
  OFL_PARAMS(EmbeddingGradParams, num_embeddings)
};

namespace functional {
/// weight (V, D), indices (...) int32/int64 -> (..., D). Raises IndexError for an index outside
/// [0, V).
Tensor embedding(const Tensor& weight, const Tensor& indices);
/// dy (..., D), indices (...) -> dweight (num_embeddings, D): dweight[indices[n]] += dy[n].
Tensor embedding_grad(const Tensor& dy, const Tensor& indices, int64_t num_embeddings);
}  // namespace functional

}  // namespace ofl
