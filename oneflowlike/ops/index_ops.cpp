// gather, index_select and their scatter-add gradients. Index values are data, so their range is
// checked by the kernels (IndexError); shapes, dims and dtypes are checked here.
//
// Note [Index ops SBP]: a split on an axis other than dim keeps every position's coordinates on
// that axis local, so x and index (or dy and index) split together when their extents on that
// axis are equal, and the output splits with them. Positions along dim do not matter to
// index_select (an index value picks a slice of the whole of x), so a split index gives an output
// split on dim; for gather only a split of index on dim itself keeps the other coordinates
// right. The scatter-adds of a split dy (on dim) into a whole zero tensor add up: P.

#include "oneflowlike/ops/index_ops.h"

#include "oneflowlike/eager.h"
#include "oneflowlike/op.h"
#include "oneflowlike/ops/grad_util.h"

namespace ofl {

namespace {

void check_index_dtype(const InferContext& ctx, int i) {
  OFL_CHECK_TYPE(ctx.dtype(i) == DataType::kInt32 || ctx.dtype(i) == DataType::kInt64, "[",
                 ctx.op_name(), "] ", ctx.input_name(i), " must be int32 or int64. However, got ",
                 ctx.describe_inputs(), ".");
}

void check_floating(const InferContext& ctx, int i) {
  OFL_CHECK_TYPE(is_floating(ctx.dtype(i)), "[", ctx.op_name(), "] ", ctx.input_name(i),
                 " must be floating-point. However, got ", ctx.describe_inputs(), ".");
}

// The dim of IndexParams normalised against input 0 (x).
int index_dim(const InferContext& ctx) {
  return normalize_axis(ctx.params<IndexParams>().dim, ctx.shape(0).ndim(), ctx.op_name().c_str());
}

int grad_dim(const InferContext& ctx) {
  const auto& p = ctx.params<IndexGradParams>();
  return normalize_axis(p.dim, p.input_shape.ndim(), ctx.op_name().c_str());
}

// ---- gather ----

// Checks that index (input `i`) may gather from a tensor shaped `x` along `dim`, as torch:
// the same rank, and index.shape[d] <= x.shape[d] for every d != dim.
void check_gather_index(const InferContext& ctx, int i, const Shape& x, int dim,
                        const char* x_name) {
  const Shape& index = ctx.shape(i);
  OFL_CHECK(index.ndim() == x.ndim(), "[", ctx.op_name(), "] index must have as many dims as ",
            x_name, " (", x.ndim(), "). However, got ", ctx.describe_inputs(), ".");
  for (int d = 0; d < x.ndim(); ++d) {
    OFL_CHECK(d == dim || index[d] <= x[d], "[", ctx.op_name(), "] index.shape[", d,
              "] must be at most ", x_name, ".shape[", d, "] = ", x[d], " (every dim but dim ", dim,
              "). However, got ", ctx.describe_inputs(), ".");
  }
}

// x (...), index (...) of x's rank -> out shaped like index.
std::vector<TensorMeta> infer_gather(const InferContext& ctx) {
  const int dim = index_dim(ctx);
  check_index_dtype(ctx, 1);
  check_gather_index(ctx, 1, ctx.shape(0), dim, "x");
  return {TensorMeta{ctx.shape(1), ctx.dtype(0)}};
}

// Note [Index ops SBP].
std::vector<SbpSignature> gather_signatures(const InferContext& ctx) {
  const int dim = index_dim(ctx);
  const Shape& x = ctx.shape(0);
  const Shape& index = ctx.shape(1);
  std::vector<SbpSignature> sigs;
  for (int i = 0; i < x.ndim(); ++i) {
    if (i != dim && x[i] == index[i]) sigs.push_back({{S(i), S(i)}, {S(i)}});
  }
  if (x.ndim() > 0) sigs.push_back({{B(), S(dim)}, {S(dim)}});
  if (is_floating(ctx.dtype(0))) sigs.push_back({{P(), B()}, {P()}});  // linear in x
  sigs.push_back({{B(), B()}, {B()}});
  return sigs;
}

void gather_gradient(GradBuilder& g) {
  const Value dy = g.output_grad(0);
  if (dy == GradBuilder::kNone || !g.needs_input_grad(0)) return;
  const IndexGradParams p{g.params<IndexParams>().dim, g.meta(g.input(0)).shape};
  g.set_input_grad(0, g.apply1("gather_grad", p, {dy, g.input(1)}));
}

// dy shaped like index, index -> dx shaped input_shape.
std::vector<TensorMeta> infer_gather_grad(const InferContext& ctx) {
  const auto& p = ctx.params<IndexGradParams>();
  const int dim = grad_dim(ctx);
  check_floating(ctx, 0);
  check_index_dtype(ctx, 1);
  OFL_CHECK(ctx.shape(0) == ctx.shape(1),
            "[gather_grad] dy must be shaped like index. However, got ", ctx.describe_inputs(),
            ".");
  check_gather_index(ctx, 1, p.input_shape, dim, "the input");
  return {TensorMeta{p.input_shape, ctx.dtype(0)}};
}

std::vector<SbpSignature> gather_grad_signatures(const InferContext& ctx) {
  const auto& p = ctx.params<IndexGradParams>();
  const int dim = grad_dim(ctx);
  const Shape& index = ctx.shape(1);
  std::vector<SbpSignature> sigs;
  for (int i = 0; i < index.ndim(); ++i) {
    if (i != dim && index[i] == p.input_shape[i]) sigs.push_back({{S(i), S(i)}, {S(i)}});
  }
  if (index.ndim() > 0) sigs.push_back({{S(dim), S(dim)}, {P()}});
  sigs.push_back({{P(), B()}, {P()}});
  sigs.push_back({{B(), B()}, {B()}});
  return sigs;
}

// gather_grad is linear in dy; its adjoint is gather.
void gather_grad_gradient(GradBuilder& g) {
  const Value ddx = g.output_grad(0);
  if (ddx == GradBuilder::kNone || !g.needs_input_grad(0)) return;
  g.set_input_grad(
      0, g.apply1("gather", IndexParams{g.params<IndexGradParams>().dim}, {ddx, g.input(1)}));
}

// ---- index_select ----

void check_select_index(const InferContext& ctx, int i) {
  check_index_dtype(ctx, i);
  OFL_CHECK(ctx.shape(i).ndim() <= 1, "[", ctx.op_name(),
            "] index must be 1-d (or 0-d). However, got ", ctx.describe_inputs(), ".");
}

// A 0-d x has one entry to select: its index must have one element, as in torch.
void check_scalar_select(const InferContext& ctx, const Shape& x, int i) {
  OFL_CHECK(x.ndim() > 0 || ctx.shape(i).numel() == 1, "[", ctx.op_name(),
            "] index into a 0-d x must have exactly 1 element. However, got ",
            ctx.describe_inputs(), ".");
}

// x (..., V, ...), index (n) -> (..., n, ...).
std::vector<TensorMeta> infer_index_select(const InferContext& ctx) {
  const int dim = index_dim(ctx);
  check_select_index(ctx, 1);
  check_scalar_select(ctx, ctx.shape(0), 1);
  std::vector<int64_t> dims = ctx.shape(0).dims();
  if (!dims.empty()) dims[dim] = ctx.shape(1).numel();
  return {TensorMeta{Shape(std::move(dims)), ctx.dtype(0)}};
}

// Note [Index ops SBP].
std::vector<SbpSignature> index_select_signatures(const InferContext& ctx) {
  const int dim = index_dim(ctx);
  const int nd = ctx.shape(0).ndim();
  std::vector<SbpSignature> sigs;
  for (int i = 0; i < nd; ++i) {
    if (i != dim) sigs.push_back({{S(i), B()}, {S(i)}});
  }
  if (nd > 0 && ctx.shape(1).ndim() == 1) sigs.push_back({{B(), S(0)}, {S(dim)}});
  if (is_floating(ctx.dtype(0))) sigs.push_back({{P(), B()}, {P()}});
  sigs.push_back({{B(), B()}, {B()}});
  return sigs;
}

void index_select_gradient(GradBuilder& g) {
  const Value dy = g.output_grad(0);
  if (dy == GradBuilder::kNone || !g.needs_input_grad(0)) return;
  const IndexGradParams p{g.params<IndexParams>().dim, g.meta(g.input(0)).shape};
  g.set_input_grad(0, g.apply1("index_select_grad", p, {dy, g.input(1)}));
}

// dy (..., n, ...), index (n) -> dx shaped input_shape.
std::vector<TensorMeta> infer_index_select_grad(const InferContext& ctx) {
  const auto& p = ctx.params<IndexGradParams>();
  const int dim = grad_dim(ctx);
  check_floating(ctx, 0);
  check_select_index(ctx, 1);
  check_scalar_select(ctx, p.input_shape, 1);
  std::vector<int64_t> expected = p.input_shape.dims();
  if (!expected.empty()) expected[dim] = ctx.shape(1).numel();
  OFL_CHECK(ctx.shape(0) == Shape(expected), "[index_select_grad] dy must be shaped ",
            Shape(expected).to_string(), " (the input ", p.input_shape.to_string(), " with dim ",
            dim, " the length of index). However, got ", ctx.describe_inputs(), ".");
  return {TensorMeta{p.input_shape, ctx.dtype(0)}};
}

std::vector<SbpSignature> index_select_grad_signatures(const InferContext& ctx) {
  const int dim = grad_dim(ctx);
  const int nd = ctx.params<IndexGradParams>().input_shape.ndim();
  std::vector<SbpSignature> sigs;
  for (int i = 0; i < nd; ++i) {
    if (i != dim) sigs.push_back({{S(i), B()}, {S(i)}});
  }
  if (nd > 0 && ctx.shape(1).ndim() == 1) sigs.push_back({{S(dim), S(0)}, {P()}});
  sigs.push_back({{P(), B()}, {P()}});
  sigs.push_back({{B(), B()}, {B()}});
  return sigs;
}

void index_select_grad_gradient(GradBuilder& g) {
  const Value ddx = g.output_grad(0);
  if (ddx == GradBuilder::kNone || !g.needs_input_grad(0)) return;
  g.set_input_grad(
      0, g.apply1("index_select", IndexParams{g.params<IndexGradParams>().dim}, {ddx, g.input(1)}));
}

}  // namespace

OFL_REGISTER_OP("gather")
    .inputs({"x", "index"})
    .outputs({"out"})
    .params<IndexParams>()
    .set<FInferMeta>(infer_gather)
    .set<FSbpSignatures>(gather_signatures)
    .set<FGradient>(gather_gradient);

OFL_REGISTER_OP("gather_grad")
    .inputs({"dy", "index"})
    .outputs({"dx"})
    .params<IndexGradParams>()
    .set<FInferMeta>(infer_gather_grad)
    .set<FSbpSignatures>(gather_grad_signatures)
    .set<FGradient>(gather_grad_gradient);

OFL_REGISTER_OP("index_select")
    .inputs({"x", "index"})
    .outputs({"out"})
    .params<IndexParams>()
    .set<FInferMeta>(infer_index_select)
    .set<FSbpSignatures>(index_select_signatures)
    .set<FGradient>(index_select_gradient);

OFL_REGISTER_OP("index_select_grad")
    .inputs({"dy", "index"})
    .outputs({"dx"})
    .params<IndexGradParams>()
    .set<FInferMeta>(infer_index_select_grad)
    .set<FSbpSignatures>(index_select_grad_signatures)
    .set<FGradient>(index_select_grad_gradient);

namespace functional {

Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) {
  static OpHandle op("gather");
  return op.call1(IndexParams{dim}, {x, index});
}

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  static OpHandle op("index_select");
  return op.call1(IndexParams{dim}, {x, index});
}

Tensor gather_grad(const Tensor& dy, const Tensor& index, int64_t dim, const Shape& input_shape) {
  static OpHandle op("gather_grad");
  return op.call1(IndexGradParams{dim, input_shape}, {dy, index});
}

Tensor index_select_grad(const Tensor& dy, const Tensor& index, int64_t dim,
                         const Shape& input_shape) {
  static OpHandle op("index_select_grad");
  return op.call1(IndexGradParams{dim, input_shape}, {dy, index});
}

}  // namespace functional

}  // namespace ofl
