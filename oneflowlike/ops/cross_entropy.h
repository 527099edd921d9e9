#pragma once
// sparse_softmax_cross_entropy: the per-sample loss logsumexp(logits) - logits[label] over the
// last (class) axis, fused so that the softmax is never materialised; and its backward
// sparse_softmax_cross_entropy_grad. The reduction over samples (mean, sum) is left to the
// reduce ops (flow.nn.functional.cross_entropy composes them).

#include "oneflowlike/tensor.h"

namespace ofl {

namespace functional {
/// logits (..., C) float, labels (...) int32/int64 -> loss (...). Raises IndexError for a label
/// outside [0, C).
Tensor sparse_softmax_cross_entropy(const Tensor& logits, const Tensor& labels);
/// dlogits (..., C) = (softmax(logits) - onehot(labels)) * dloss[..., None].
Tensor sparse_softmax_cross_entropy_grad(const Tensor& logits, const Tensor& labels,
                                         const Tensor& dloss);
}  // namespace functional

}  // namespace ofl
