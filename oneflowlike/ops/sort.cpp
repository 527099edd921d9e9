// max_dim, min_dim, topk and sort: inference, SBP signatures and gradients (Note [Orders and
// ties] in sort.h). Every one works along one dim, so a split on any other axis is kept and a
// split on dim is not offered: the maximum, the top k or the order of pieces is not a sum of
// anything (no P either).

#include "oneflowlike/ops/sort.h"

#include "oneflowlike/eager.h"
#include "oneflowlike/op.h"
#include "oneflowlike/ops/grad_util.h"
#include "oneflowlike/ops/index_ops.h"
#include "oneflowlike/ops/reshape.h"

namespace ofl {

namespace {

void check_orderable(const InferContext& ctx) {
  OFL_CHECK_TYPE(is_floating(ctx.dtype(0)) || is_integral(ctx.dtype(0)), "[", ctx.op_name(),
                 "] needs a floating-point or integer tensor. However, got ", ctx.describe_inputs(),
                 ".");
}

int along(const InferContext& ctx, int64_t dim) {
  return normalize_axis(dim, ctx.shape(0).ndim(), ctx.op_name().c_str());
}

// For ops whose outputs keep x's rank: S(i) -> S(i) on every output for i != dim, and B.
std::vector<SbpSignature> split_other_axes(int ndim, int dim, int outputs, bool drop_dim) {
  std::vector<SbpSignature> sigs;
  for (int i = 0; i < ndim; ++i) {
    if (i == dim) continue;
    const int j = drop_dim && i > dim ? i - 1 : i;
    sigs.push_back({{S(i)}, std::vector<Sbp>(outputs, S(j))});
  }
  sigs.push_back({{B()}, std::vector<Sbp>(outputs, B())});
  return sigs;
}

// dy of the values (shaped like the indices) scattered back to where they came from.
void scatter_values_gradient(GradBuilder& g, int64_t dim, Value dy, Value indices) {
  if (dy == GradBuilder::kNone || !g.needs_input_grad(0)) return;
  const Shape x = g.meta(g.input(0)).shape;
  g.set_input_grad(0, g.apply1("gather_grad", IndexGradParams{dim, x}, {dy, indices}));
}

// ---- max_dim, min_dim ----

std::vector<TensorMeta> infer_dim_reduce(const InferContext& ctx) {
  const auto& p = ctx.params<DimReduceParams>();
  const int dim = along(ctx, p.dim);
  check_orderable(ctx);
  const Shape& x = ctx.shape(0);
  std::vector<int64_t> dims;
  for (int i = 0; i < x.ndim(); ++i) {
    if (i != dim) {
      dims.push_back(x[i]);
    } else {
      OFL_CHECK(x[i] > 0, "[", ctx.op_name(), "] cannot reduce an empty dim (there is no ",
                ctx.op_name() == "max_dim" ? "maximum" : "minimum", "). However, got ",
                ctx.describe_inputs(), " along dim ", dim, ".");
      if (p.keepdim) dims.push_back(1);
    }
  }
  const Shape out(std::move(dims));
  return {TensorMeta{out, ctx.dtype(0)}, TensorMeta{out, DataType::kInt64}};
}

std::vector<SbpSignature> dim_reduce_signatures(const InferContext& ctx) {
  const auto& p = ctx.params<DimReduceParams>();
  return split_other_axes(ctx.shape(0).ndim(), along(ctx, p.dim), 2, !p.keepdim);
}

// Without keepdim, dy and the indices get their dim back (size 1) to scatter along it.
void dim_reduce_gradient(GradBuilder& g) {
  const auto& p = g.params<DimReduceParams>();
  const Value dy = g.output_grad(0);
  if (dy == GradBuilder::kNone || !g.needs_input_grad(0)) return;
  const Shape x = g.meta(g.input(0)).shape;
  Value grad = dy, indices = g.output(1);
  if (!p.keepdim && x.ndim() > 0) {
    std::vector<int64_t> dims = x.dims();
    dims[p.dim < 0 ? p.dim + x.ndim() : p.dim] = 1;
    grad = g.apply1("reshape", ReshapeParams{Shape(dims)}, {dy});
    indices = g.apply1("reshape", ReshapeParams{Shape(dims)}, {indices});
  }
  scatter_values_gradient(g, p.dim, grad, indices);
}

// ---- topk ----

std::vector<TensorMeta> infer_topk(const InferContext& ctx) {
  const auto& p = ctx.params<TopkParams>();
  const int dim = along(ctx, p.dim);
  check_orderable(ctx);
  std::vector<int64_t> dims = ctx.shape(0).dims();
  const int64_t extent = dims.empty() ? 1 : dims[dim];
  OFL_CHECK(p.k >= 0 && p.k <= extent, "[topk] k must be in [0, ", extent, "] (the size of dim ",
            dim, "). However, got k = ", p.k, " for ", ctx.describe_inputs(), ".");
  if (!dims.empty()) dims[dim] = p.k;
  const Shape out(std::move(dims));
  return {TensorMeta{out, ctx.dtype(0)}, TensorMeta{out, DataType::kInt64}};
}

std::vector<SbpSignature> topk_signatures(const InferContext& ctx) {
  return split_other_axes(ctx.shape(0).ndim(), along(ctx, ctx.params<TopkParams>().dim), 2, false);
}

void topk_gradient(GradBuilder& g) {
  scatter_values_gradient(g, g.params<TopkParams>().dim, g.output_grad(0), g.output(1));
}

// ---- sort ----

std::vector<TensorMeta> infer_sort(const InferContext& ctx) {
  along(ctx, ctx.params<SortParams>().dim);
  check_orderable(ctx);
  return {ctx.input(0), TensorMeta{ctx.shape(0), DataType::kInt64}};
}

std::vector<SbpSignature> sort_signatures(const InferContext& ctx) {
  return split_other_axes(ctx.shape(0).ndim(), along(ctx, ctx.params<SortParams>().dim), 2, false);
}

void sort_gradient(GradBuilder& g) {
  scatter_values_gradient(g, g.params<SortParams>().dim, g.output_grad(0), g.output(1));
}

}  // namespace

OFL_REGISTER_OP("max_dim")
    .inputs({"x"})
    .outputs({"values", "indices"})
    .params<DimReduceParams>()
    .set<FInferMeta>(infer_dim_reduce)
    .set<FSbpSignatures>(dim_reduce_signatures)
    .set<FGradient>(dim_reduce_gradient);

OFL_REGISTER_OP("min_dim")
    .inputs({"x"})
    .outputs({"values", "indices"})
    .params<DimReduceParams>()
    .set<FInferMeta>(infer_dim_reduce)
    .set<FSbpSignatures>(dim_reduce_signatures)
    .set<FGradient>(dim_reduce_gradient);

OFL_REGISTER_OP("topk")
    .inputs({"x"})
    .outputs({"values", "indices"})
    .params<TopkParams>()
    .set<FInferMeta>(infer_topk)
    .set<FSbpSignatures>(topk_signatures)
    .set<FGradient>(topk_gradient);

OFL_REGISTER_OP("sort")
    .inputs({"x"})
    .outputs({"values", "indices"})
    .params<SortParams>()
    .set<FInferMeta>(infer_sort)
    .set<FSbpSignatures>(sort_signatures)
    .set<FGradient>(sort_gradient);

namespace functional {

std::vector<Tensor> max_dim(const Tensor& x, int64_t dim, bool keepdim) {
  static OpHandle op("max_dim");
  return op(DimReduceParams{dim, keepdim}, {x});
}

std::vector<Tensor> min_dim(const Tensor& x, int64_t dim, bool keepdim) {
  static OpHandle op("min_dim");
  return op(DimReduceParams{dim, keepdim}, {x});
}

Tensor argmax(const Tensor& x, int64_t dim, bool keepdim) { return max_dim(x, dim, keepdim)[1]; }

Tensor argmin(const Tensor& x, int64_t dim, bool keepdim) { return min_dim(x, dim, keepdim)[1]; }

std::vector<Tensor> topk(const Tensor& x, int64_t k, int64_t dim, bool largest, bool sorted) {
  static OpHandle op("topk");
  return op(TopkParams{k, dim, largest, sorted}, {x});
}

std::vector<Tensor> sort(const Tensor& x, int64_t dim, bool descending, bool stable) {
  static OpHandle op("sort");
  return op(SortParams{dim, descending, stable}, {x});
}

Tensor argsort(const Tensor& x, int64_t dim, bool descending, bool stable) {
  return sort(x, dim, descending, stable)[1];
}

}  // namespace functional

}  // namespace ofl
