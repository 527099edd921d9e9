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
void loss_scale_update(const Tensor& scale, const Tensor& good_steps, const Tensor& steps,
                       const Tensor& found, const LossScaleParams& params);
}  // namespace functional

}  // namespace ofl
