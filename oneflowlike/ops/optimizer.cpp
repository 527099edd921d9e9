// sgd_update and adam_update (and their skippable forms), count_nonfinite and loss_scale_update
// (Note [Dynamic loss scaling] in optimizer.h): in-place or scalar, not differentiable.

#include "oneflowlike/ops/optimizer.h"

#include <algorithm>

#include "oneflowlike/eager.h"
#include "oneflowlike/op.h"

namespace ofl {

namespace {

// Inputs [0, num_tensors) are param-shaped; the rest are scalar hyper-parameters (lr, step).
std::vector<TensorMeta> infer_update(const InferContext& ctx, int num_tensors) {
  OFL_CHECK_TYPE(ctx.dtype(0) == DataType::kFloat32 || ctx.dtype(0) == DataType::kFloat64, "[",
                 ctx.op_name(), "] param must be float32 or float64. However, got ",
                 ctx.describe_inputs(), ".");
  for (int i = 1; i < ctx.num_inputs(); ++i) {
    OFL_CHECK_TYPE(ctx.dtype(i) == ctx.dtype(0), "[", ctx.op_name(), "] ", ctx.input_name(i),
                   " must have the dtype of param. However, got ", ctx.describe_inputs(), ".");
  }
  for (int i = 1; i < num_tensors; ++i) {
    OFL_CHECK(ctx.shape(i) == ctx.shape(0), "[", ctx.op_name(), "] ", ctx.input_name(i),
              " must have the shape of param. However, got ", ctx.describe_inputs(), ".");
  }
  for (int i = num_tensors; i < ctx.num_inputs(); ++i) {
    OFL_CHECK(ctx.shape(i).ndim() == 0, "[", ctx.op_name(), "] ", ctx.input_name(i),
              " must be a scalar tensor of shape (). However, got ", ctx.describe_inputs(), ".");
  }
  return {};
}

// The hyper-parameter checks of the single- and multi-tensor updates.
void check_sgd(const InferContext& ctx, const SgdParams& p) {
  OFL_CHECK(!p.nesterov || (p.momentum > 0 && p.dampening == 0), "[", ctx.op_name(),
            "] nesterov momentum requires a positive momentum and zero dampening. However, got "
            "momentum=",
            p.momentum, ", dampening=", p.dampening, ".");
}

void check_adam(const InferContext& ctx, const AdamParams& p) {
  OFL_CHECK(p.beta1 >= 0 && p.beta1 < 1 && p.beta2 >= 0 && p.beta2 < 1, "[", ctx.op_name(),
            "] betas must be in [0, 1). However, got beta1=", p.beta1, ", beta2=", p.beta2, ".");
}

std::vector<TensorMeta> infer_sgd(const InferContext& ctx) {
  check_sgd(ctx, ctx.params<SgdParams>());
  return infer_update(ctx, /*num_tensors=*/3);
}

std::vector<TensorMeta> infer_adam(const InferContext& ctx) {
  check_adam(ctx, ctx.params<AdamParams>());
  return infer_update(ctx, /*num_tensors=*/4);
}

// Elementwise over the param-shaped tensors: all split on one axis, or all whole. The scalars
// are always whole. A partial-sum grad would have to be summed first (the update is not linear).
std::vector<SbpSignature> update_signatures(const InferContext& ctx, int num_tensors) {
  const int num_scalars = ctx.num_inputs() - num_tensors;
  std::vector<SbpSignature> sigs;
  for (int axis = 0; axis < ctx.shape(0).ndim(); ++axis) {
    SbpSignature sig;
    sig.inputs.assign(num_tensors, S(axis));
    sig.inputs.insert(sig.inputs.end(), num_scalars, B());
    sigs.push_back(sig);
  }
  sigs.push_back({std::vector<Sbp>(ctx.num_inputs(), B()), {}});
  return sigs;
}

std::vector<TensorMeta> infer_count_nonfinite(const InferContext& ctx) {
  OFL_CHECK_TYPE(is_floating(ctx.dtype(0)), "[count_nonfinite] x must be floating. However, got ",
                 ctx.describe_inputs(), ".");
  return {TensorMeta{Shape{}, DataType::kFloat32}};
}

// Counts add up over a split x; a partial-sum x is refused (its parts' infinities may cancel).
std::vector<SbpSignature> count_nonfinite_signatures(const InferContext& ctx) {
  std::vector<SbpSignature> sigs;
  for (int axis = 0; axis < ctx.shape(0).ndim(); ++axis) sigs.push_back({{S(axis)}, {P()}});
  sigs.push_back({{B()}, {B()}});
  return sigs;
}

std::vector<TensorMeta> infer_loss_scale_update(const InferContext& ctx) {
  const auto& p = ctx.params<LossScaleParams>();
  OFL_CHECK(
      p.growth_factor > 1 && p.backoff_factor > 0 && p.backoff_factor < 1 && p.growth_interval >= 1,
      "[loss_scale_update] needs growth_factor > 1, 0 < backoff_factor < 1 and "
      "growth_interval >= 1. However, got growth_factor=",
      p.growth_factor, ", backoff_factor=", p.backoff_factor,
      ", growth_interval=", p.growth_interval, ".");
  for (int i = 0; i < 4; ++i) {
    OFL_CHECK(ctx.shape(i).ndim() == 0 && ctx.dtype(i) == DataType::kFloat32, "[", ctx.op_name(),
              "] scale, good_steps, steps and found must be float32 scalars. However, "
              "got ",
              ctx.describe_inputs(), ".");
  }
  return {};
}

// assign(dst, src): dst's values become src's, in place (Note [ZeRO stages 1 and 2] in
// compiler/passes/zero.cpp: the gathered parameter written back). Same shape and dtype; any
// layout both share.
std::vector<TensorMeta> infer_assign(const InferContext& ctx) {
  OFL_CHECK(ctx.shape(0) == ctx.shape(1) && ctx.dtype(0) == ctx.dtype(1),
            "[assign] src must have "
            "dst's shape and dtype. However, got ",
            ctx.describe_inputs(), ".");
  return {};
}

std::vector<SbpSignature> assign_signatures(const InferContext& ctx) {
  std::vector<SbpSignature> sigs;
  for (int axis = 0; axis < ctx.shape(0).ndim(); ++axis) sigs.push_back({{S(axis), S(axis)}, {}});
  sigs.push_back({{B(), B()}, {}});
  return sigs;
}

// Note [Multi-tensor updates]: the scalars, then groups of `per_tensor` param-shaped inputs.
std::vector<TensorMeta> infer_multi_update(const InferContext& ctx, const MultiUpdateInputs& m) {
  const int n = ctx.num_inputs() - m.scalars;
  OFL_CHECK(n >= m.per_tensor && n % m.per_tensor == 0, "[", ctx.op_name(), "] takes ", m.scalars,
            " scalars, then ", m.per_tensor,
            " inputs (param, grad and its state) per tensor. However, got ", ctx.num_inputs(),
            " inputs.");
  const DataType dtype = ctx.dtype(m.tensor(0, 0));
  OFL_CHECK_TYPE(dtype == DataType::kFloat32 || dtype == DataType::kFloat64, "[", ctx.op_name(),
                 "] params must be float32 or float64. However, got ", ctx.describe_inputs(), ".");
  for (int i = 0; i < ctx.num_inputs(); ++i) {
    OFL_CHECK_TYPE(ctx.dtype(i) == dtype, "[", ctx.op_name(), "] ", ctx.input_name(i),
                   " must have the dtype of the first param. However, got ", ctx.describe_inputs(),
                   ".");
    if (i < m.scalars) {
      OFL_CHECK(ctx.shape(i).ndim() == 0, "[", ctx.op_name(), "] ", ctx.input_name(i),
                " must be a scalar tensor of shape (). However, got ", ctx.describe_inputs(), ".");
    } else {
      const int param = i - (i - m.scalars) % m.per_tensor;
      OFL_CHECK(ctx.shape(i) == ctx.shape(param), "[", ctx.op_name(), "] ", ctx.input_name(i),
                " must have the shape of its param ", ctx.input_name(param), ". However, got ",
                ctx.describe_inputs(), ".");
    }
  }
  return {};
}

// The axes along which every tensor in [first, num_inputs) can be split: those below the least
// number of dimensions.
int common_ndim(const InferContext& ctx, int first) {
  int ndim = ctx.num_inputs() > first ? ctx.shape(first).ndim() : 0;
  for (int i = first; i < ctx.num_inputs(); ++i) ndim = std::min(ndim, ctx.shape(i).ndim());
  return ndim;
}

// Elementwise over every tensor: all split on one axis or all whole, the scalars whole.
std::vector<SbpSignature> multi_update_signatures(const InferContext& ctx,
                                                  const MultiUpdateInputs& m) {
  std::vector<SbpSignature> sigs;
  for (int axis = 0; axis < common_ndim(ctx, m.scalars); ++axis) {
    SbpSignature sig;
    sig.inputs.assign(m.scalars, B());
    sig.inputs.insert(sig.inputs.end(), ctx.num_inputs() - m.scalars, S(axis));
    sigs.push_back(sig);
  }
  sigs.push_back({std::vector<Sbp>(ctx.num_inputs(), B()), {}});
  return sigs;
}

// Each tensor's param and state.
std::vector<int> multi_update_mutated(const MultiUpdateInputs& m, int num_inputs) {
  std::vector<int> mutated;
  for (int j = 0; j < m.num_tensors(num_inputs); ++j) {
    for (int k = 0; k < m.per_tensor; ++k) {
      if (k != 1) mutated.push_back(m.tensor(j, k));  // all but the gradient
    }
  }
  return mutated;
}

std::vector<TensorMeta> infer_sum_squares(const InferContext& ctx) {
  OFL_CHECK(ctx.num_inputs() >= 1, "[multi_tensor_sum_squares] needs at least one tensor.");
  const DataType dtype = ctx.dtype(0);
  OFL_CHECK_TYPE(dtype == DataType::kFloat32 || dtype == DataType::kFloat64,
                 "[multi_tensor_sum_squares] x must be float32 or float64. However, got ",
                 ctx.describe_inputs(), ".");
  for (int i = 1; i < ctx.num_inputs(); ++i) {
    OFL_CHECK_TYPE(ctx.dtype(i) == dtype, "[multi_tensor_sum_squares] ", ctx.input_name(i),
                   " must have the dtype of x[0]. However, got ", ctx.describe_inputs(), ".");
  }
  return {TensorMeta{Shape{}, dtype}};
}

// Sums of squares (and counts) add up over split tensors; partial sums are refused (squares do
// not add, and the infinities of partial sums may cancel).
std::vector<SbpSignature> sum_squares_signatures(const InferContext& ctx) {
  std::vector<SbpSignature> sigs;
  for (int axis = 0; axis < common_ndim(ctx, 0); ++axis) {
    sigs.push_back({std::vector<Sbp>(ctx.num_inputs(), S(axis)), {P()}});
  }
  sigs.push_back({std::vector<Sbp>(ctx.num_inputs(), B()), {B()}});
  return sigs;
}

}  // namespace

OFL_REGISTER_OP("multi_tensor_sum_squares")
    .variadic_inputs("x")
    .outputs({"sum"})
    .set<FInferMeta>(infer_sum_squares)
    .set<FSbpSignatures>(sum_squares_signatures);

OFL_REGISTER_OP("multi_tensor_count_nonfinite")
    .variadic_inputs("x")
    .outputs({"count"})
    .set<FInferMeta>([](const InferContext& ctx) {
      OFL_CHECK(ctx.num_inputs() >= 1, "[multi_tensor_count_nonfinite] needs at least one tensor.");
      for (int i = 0; i < ctx.num_inputs(); ++i) {
        OFL_CHECK_TYPE(is_floating(ctx.dtype(i)) && ctx.dtype(i) == ctx.dtype(0),
                       "[multi_tensor_count_nonfinite] every x must be floating, of one dtype. "
                       "However, got ",
                       ctx.describe_inputs(), ".");
      }
      return std::vector<TensorMeta>{TensorMeta{Shape{}, DataType::kFloat32}};
    })
    .set<FSbpSignatures>(sum_squares_signatures);  // counts add up over splits, as sums do

OFL_REGISTER_OP("multi_tensor_sgd_update")
    .variadic_inputs("inputs")
    .outputs({})
    .params<MultiSgdParams>()
    .set<FInferMeta>([](const InferContext& ctx) {
      const auto& p = ctx.params<MultiSgdParams>();
      check_sgd(ctx, p.sgd());
      return infer_multi_update(ctx, MultiUpdateInputs::of(p));
    })
    .set<FSbpSignatures>([](const InferContext& ctx) {
      return multi_update_signatures(ctx, MultiUpdateInputs::of(ctx.params<MultiSgdParams>()));
    })
    .set<FMutatedInputs>([](const AnyParams& params, int num_inputs) {
      return multi_update_mutated(MultiUpdateInputs::of(params.as<MultiSgdParams>()), num_inputs);
    });

OFL_REGISTER_OP("multi_tensor_adam_update")
    .variadic_inputs("inputs")
    .outputs({})
    .params<MultiAdamParams>()
    .set<FInferMeta>([](const InferContext& ctx) {
      const auto& p = ctx.params<MultiAdamParams>();
      check_adam(ctx, p.adam());
      return infer_multi_update(ctx, MultiUpdateInputs::of(p));
    })
    .set<FSbpSignatures>([](const InferContext& ctx) {
      return multi_update_signatures(ctx, MultiUpdateInputs::of(ctx.params<MultiAdamParams>()));
    })
    .set<FMutatedInputs>([](const AnyParams& params, int num_inputs) {
      return multi_update_mutated(MultiUpdateInputs::of(params.as<MultiAdamParams>()), num_inputs);
    });

OFL_REGISTER_OP("sgd_update")
    .inputs({"param", "grad", "momentum_buffer", "lr"})
    .outputs({})
    .params<SgdParams>()
    .set<FInferMeta>(infer_sgd)
    .set<FSbpSignatures>([](const InferContext& ctx) { return update_signatures(ctx, 3); })
    .set<TMutatedInputs>({0, 2});

OFL_REGISTER_OP("assign")
    .inputs({"dst", "src"})
    .outputs({})
    .set<FInferMeta>(infer_assign)
    .set<FSbpSignatures>(assign_signatures)
    .set<TMutatedInputs>({0});

OFL_REGISTER_OP("adam_update")
    .inputs({"param", "grad", "exp_avg", "exp_avg_sq", "lr", "step"})
    .outputs({})
    .params<AdamParams>()
    .set<FInferMeta>(infer_adam)
    .set<FSbpSignatures>([](const InferContext& ctx) { return update_signatures(ctx, 4); })
    .set<TMutatedInputs>({0, 2, 3});

OFL_REGISTER_OP("sgd_update_skippable")
    .inputs({"param", "grad", "momentum_buffer", "lr", "skip"})
    .outputs({})
    .params<SgdParams>()
    .set<FInferMeta>(infer_sgd)
    .set<FSbpSignatures>([](const InferContext& ctx) { return update_signatures(ctx, 3); })
    .set<TMutatedInputs>({0, 2});

OFL_REGISTER_OP("adam_update_skippable")
    .inputs({"param", "grad", "exp_avg", "exp_avg_sq", "lr", "step", "skip"})
    .outputs({})
    .params<AdamParams>()
    .set<FInferMeta>(infer_adam)
    .set<FSbpSignatures>([](const InferContext& ctx) { return update_signatures(ctx, 4); })
    .set<TMutatedInputs>({0, 2, 3});

OFL_REGISTER_OP("count_nonfinite")
    .inputs({"x"})
    .outputs({"count"})
    .params<NoParams>()
    .set<FInferMeta>(infer_count_nonfinite)
    .set<FSbpSignatures>(count_nonfinite_signatures);

OFL_REGISTER_OP("loss_scale_update")
    .inputs({"scale", "good_steps", "steps", "found"})
    .outputs({})
    .params<LossScaleParams>()
    .set<FInferMeta>(infer_loss_scale_update)
    .set<FSbpSignatures>([](const InferContext&) {
      return std::vector<SbpSignature>{{{B(), B(), B(), B()}, {}}};
    })
    .set<TMutatedInputs>({0, 1, 2});

namespace functional {

Tensor count_nonfinite(const Tensor& x) {
  static OpHandle op("count_nonfinite");
  return op.call1(NoParams{}, {x});
}

Tensor multi_tensor_sum_squares(const std::vector<Tensor>& xs) {
  static OpHandle op("multi_tensor_sum_squares");
  return op.call1(NoParams{}, xs);
}

Tensor multi_tensor_count_nonfinite(const std::vector<Tensor>& xs) {
  static OpHandle op("multi_tensor_count_nonfinite");
  return op.call1(NoParams{}, xs);
}

void loss_scale_update(const Tensor& scale, const Tensor& good_steps, const Tensor& steps,
                       const Tensor& found, const LossScaleParams& params) {
  static OpHandle op("loss_scale_update");
  op(params, {scale, good_steps, steps, found});
}

void sgd_update(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer,
                const Tensor& lr, double momentum, double dampening, double weight_decay,
                bool nesterov) {
  static OpHandle op("sgd_update");
  op(SgdParams{momentum, dampening, weight_decay, nesterov}, {param, grad, momentum_buffer, lr});
}

void adam_update(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                 const Tensor& exp_avg_sq, const Tensor& lr, const Tensor& step, double beta1,
                 double beta2, double epsilon, double weight_decay, bool decoupled_weight_decay) {
  static OpHandle op("adam_update");
  op(AdamParams{beta1, beta2, epsilon, weight_decay, decoupled_weight_decay},
     {param, grad, exp_avg, exp_avg_sq, lr, step});
}

}  // namespace functional

}  // namespace ofl
