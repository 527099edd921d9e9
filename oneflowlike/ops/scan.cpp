// cumsum: inference, SBP signatures and gradient (Note [Running sums] in scan.h).

#include "oneflowlike/ops/scan.h"

#include "oneflowlike/eager.h"
#include "oneflowlike/op.h"
#include "oneflowlike/ops/grad_util.h"

namespace ofl {

namespace {

int along(const InferContext& ctx) {
  return normalize_axis(ctx.params<CumsumParams>().dim, ctx.shape(0).ndim(), "cumsum");
}

std::vector<TensorMeta> infer_cumsum(const InferContext& ctx) {
  along(ctx);
  const DataType dtype = ctx.dtype(0);
  OFL_CHECK_TYPE(is_floating(dtype) || dtype == DataType::kInt32 || dtype == DataType::kInt64,
                 "[cumsum] needs a floating-point, int32 or int64 tensor. However, got ",
                 ctx.describe_inputs(), ".");
  return {ctx.input(0)};
}

// S(i) -> S(i) for every axis but dim, B -> B, and P -> P (the sums are linear).
std::vector<SbpSignature> cumsum_signatures(const InferContext& ctx) {
  const int dim = along(ctx);
  std::vector<SbpSignature> sigs;
  for (int i = 0; i < ctx.shape(0).ndim(); ++i) {
    if (i != dim) sigs.push_back({{S(i)}, {S(i)}});
  }
  sigs.push_back({{B()}, {B()}});
  sigs.push_back({{P()}, {P()}});
  return sigs;
}

// dx = the running sums of dy taken from the other end.
void cumsum_gradient(GradBuilder& g) {
  const Value dy = g.output_grad(0);
  if (dy == GradBuilder::kNone || !g.needs_input_grad(0)) return;
  const auto& p = g.params<CumsumParams>();
  g.set_input_grad(0, g.apply1("cumsum", CumsumParams{p.dim, !p.reverse}, {dy}));
}

}  // namespace

OFL_REGISTER_OP("cumsum")
    .inputs({"x"})
    .outputs({"out"})
    .params<CumsumParams>()
    .set<FInferMeta>(infer_cumsum)
    .set<FSbpSignatures>(cumsum_signatures)
    .set<FGradient>(cumsum_gradient);

namespace functional {

Tensor cumsum(const Tensor& x, int64_t dim, bool reverse) {
  static OpHandle op("cumsum");
  return op(CumsumParams{dim, reverse}, {x})[0];
}

}  // namespace functional

}  // namespace ofl
