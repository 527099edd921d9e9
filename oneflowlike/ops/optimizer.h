#pragma once
// Fused optimizer updates that write param and their state in place (TMutatedInputs) and have
// no outputs. lr and step are scalar tensors, not parameters, so that a schedule changes values
// and not the op (a compiled plan keeps one op for every step).
//
// Note [SGD first step]: torch.optim.SGD sets the momentum buffer to d_p on the first step and
// to momentum * buffer + (1 - dampening) * d_p later. With a zero buffer and dampening = 0 the
// second formula gives d_p, so flow.optim.SGD passes dampening = 0 on the first step and the op
// needs no step count.

#include "oneflowlike/params.h"
#include "oneflowlike/tensor.h"

namespace ofl {

struct SgdParams {
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
  OFL_PARAMS(SgdParams, momentum, dampening, weight_decay, nesterov)
};

struct AdamParams {
  double beta1 = 0.9;
  double beta2 = 0.999;
  double epsilon = 1e-8;
  double weight_decay = 0.0;
  bool decoupled_weight_decay = false;  // true: AdamW
  OFL_PARAMS(AdamParams, beta1, beta2, epsilon, weight_decay, decoupled_weight_decay)
};

/// Note [Dynamic loss scaling]: float16 training multiplies the loss by a scale so that small
/// gradients survive float16's range, divides the gradients by it, and skips a step whose
/// gradients hold an inf or nan (the scale was too large), as torch.amp.GradScaler does:
///  - count_nonfinite(x): the number of inf and nan elements of x, a float32 scalar (a split x
///    gives partial counts: S -> P);
///  - sgd_update_skippable / adam_update_skippable: the updates with a last scalar input `skip`;
///    nonzero leaves param and state untouched;
///  - loss_scale_update(scale, good_steps, steps, found): after a step with found > 0 the scale
///    is multiplied by backoff_factor and good_steps restarts; after growth_interval good steps
///    in a row it is multiplied by growth_factor. `steps` counts the steps applied (Adam's step
///    count in a graph, which a skipped step does not advance, as in torch).
struct LossScaleParams {
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  OFL_PARAMS(LossScaleParams, growth_factor, backoff_factor, growth_interval)
};

/// Note [Multi-tensor updates]: a compiled step updates every parameter of a group (one
/// placement, layout, dtype and parameter group) with one op, as torch's fused and foreach
/// optimizers and apex's multi_tensor_apply do: an op, an act and (on a GPU) a launch per
/// parameter made the host, not the device, set a GPU step's time (docs/benchmarks.md, "Where
/// the GPU step's time goes"). Each element's math is the single-tensor update's
/// (kernels/optimizer_update.h), so results equal the ops above (up to the rounding of a
/// multiply-add the compiler may fuse where the gradient is scaled):
///  - multi_tensor_sum_squares(x[0], ..., x[n-1]): sum_i sum(x[i] * x[i]), a scalar of x's dtype
///    (clip_grad_norm_'s total before its square root; a split x gives partial sums: S -> P);
///  - multi_tensor_count_nonfinite(x[0], ..., x[n-1]): count_nonfinite of them all, float32;
///  - multi_tensor_sgd_update(lr, [grad_scale], [skip], then param, grad, momentum_buffer for
///    each tensor) and multi_tensor_adam_update(lr, step, [grad_scale], [skip], then param,
///    grad, exp_avg, exp_avg_sq for each tensor): every tensor's update in place, its gradient
///    multiplied by grad_scale first (the clipping coefficient: a gradient clipped in the update
///    instead of by its own multiply and copy), none of them when skip is nonzero (Note [Dynamic
///    loss scaling]). `scaled` and `skippable` say which optional scalars are there.
struct MultiSgdParams {
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
  bool scaled = false;
  bool skippable = false;
  OFL_PARAMS(MultiSgdParams, momentum, dampening, weight_decay, nesterov, scaled, skippable)

  SgdParams sgd() const { return {momentum, dampening, weight_decay, nesterov}; }
};

struct MultiAdamParams {
  double beta1 = 0.9;
  double beta2 = 0.999;
  double epsilon = 1e-8;
  double weight_decay = 0.0;
  bool decoupled_weight_decay = false;
  bool scaled = false;
  bool skippable = false;
  OFL_PARAMS(MultiAdamParams, beta1, beta2, epsilon, weight_decay, decoupled_weight_decay, scaled,
             skippable)

  AdamParams adam() const { return {beta1, beta2, epsilon, weight_decay, decoupled_weight_decay}; }
};

/// Where a multi-tensor update's inputs are (Note [Multi-tensor updates]): the scalars first,
/// then `per_tensor` inputs for each tensor.
struct MultiUpdateInputs {
  int lr = 0;
  int step = -1;        // Adam's step count; -1 for SGD
  int grad_scale = -1;  // -1 when not scaled
  int skip = -1;        // -1 when not skippable
  int scalars = 1;
  int per_tensor = 3;

  static MultiUpdateInputs of(const MultiSgdParams& p) {
    return make(false, p.scaled, p.skippable);
  }
  static MultiUpdateInputs of(const MultiAdamParams& p) {
    return make(true, p.scaled, p.skippable);
  }
  int num_tensors(int num_inputs) const { return (num_inputs - scalars) / per_tensor; }
  /// Input `k` (0 = param, 1 = grad, then the state) of tensor `j`.
  int tensor(int j, int k) const { return scalars + j * per_tensor + k; }

 private:
  static MultiUpdateInputs make(bool adam, bool scaled, bool skippable) {
    MultiUpdateInputs m;
    int next = 1;
    if (adam) m.step = next++;
    if (scaled) m.grad_scale = next++;
    if (skippable) m.skip = next++;
    m.scalars = next;
    m.per_tensor = adam ? 4 : 3;
    return m;
  }
};

namespace functional {
/// torch.optim.SGD's update of param and momentum_buffer (unused when momentum is 0) in place.
/// lr is a scalar tensor of param's dtype. See Note [SGD first step].
void sgd_update(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer,
                const Tensor& lr, double momentum, double dampening, double weight_decay,
                bool nesterov);
/// torch.optim.Adam (or AdamW when decoupled_weight_decay) update of param, exp_avg and
/// exp_avg_sq in place. lr and step (1-based) are scalar tensors of param's dtype.
void adam_update(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                 const Tensor& exp_avg_sq, const Tensor& lr, const Tensor& step, double beta1,
                 double beta2, double epsilon, double weight_decay, bool decoupled_weight_decay);
/// Note [Dynamic loss scaling].
Tensor count_nonfinite(const Tensor& x);
/// Note [Multi-tensor updates]: the inf and nan elements of all of `xs` (one dtype), float32.
Tensor multi_tensor_count_nonfinite(const std::vector<Tensor>& xs);
/// Note [Multi-tensor updates]: sum_i sum(xs[i] * xs[i]) (float32 or float64, one dtype).
Tensor multi_tensor_sum_squares(const std::vector<Tensor>& xs);
void loss_scale_update(const Tensor& scale, const Tensor& good_steps, const Tensor& steps,
                       const Tensor& found, const LossScaleParams& params);
}  // namespace functional

}  // namespace ofl
