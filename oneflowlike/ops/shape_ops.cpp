// Shape ops: transpose, slice, slice_grad, concat, split. All are linear, so every one of them
// keeps B and P; splits survive on the axes that the op does not cut or glue along.

#include "oneflowlike/ops/shape_ops.h"

#include <numeric>

#include "oneflowlike/eager.h"
#include "oneflowlike/op.h"
#include "oneflowlike/ops/creation.h"
#include "oneflowlike/ops/grad_util.h"

namespace ofl {

namespace {

std::string list_string(const std::vector<int64_t>& v) {
  std::string s;
  detail::print_value(&s, v);
  return s;
}

// ---- transpose ----

// perm with negative entries resolved; raises unless it is a permutation of [0, ndim).
std::vector<int> normalized_perm(const std::vector<int64_t>& perm, const Shape& shape) {
  const int n = shape.ndim();
  OFL_CHECK(static_cast<int>(perm.size()) == n,
            "[transpose] perm must have one entry per axis of x. However, got perm ",
            list_string(perm), " for x ", shape.to_string(), ".");
  std::vector<int> out(n);
  std::vector<bool> seen(n, false);
  for (int j = 0; j < n; ++j) {
    OFL_CHECK_INDEX(perm[j] >= -n && perm[j] < n,
                    "[transpose] perm entries must be axes of x, in [", -n, ", ", n,
                    "). However, got perm ", list_string(perm), " for x ", shape.to_string(), ".");
    const int axis = static_cast<int>(perm[j] < 0 ? perm[j] + n : perm[j]);
    OFL_CHECK(!seen[axis], "[transpose] perm must be a permutation of the axes of x (each once). ",
              "However, got perm ", list_string(perm), " for x ", shape.to_string(), ".");
    seen[axis] = true;
    out[j] = axis;
  }
  return out;
}

std::vector<TensorMeta> infer_transpose(const InferContext& ctx) {
  const Shape& x = ctx.shape(0);
  const std::vector<int> perm = normalized_perm(ctx.params<TransposeParams>().perm, x);
  std::vector<int64_t> dims(perm.size());
  for (size_t j = 0; j < perm.size(); ++j) dims[j] = x[perm[j]];
  return {TensorMeta{Shape(std::move(dims)), ctx.dtype(0)}};
}

// Input S(perm[j]) is output S(j).
std::vector<SbpSignature> transpose_signatures(const InferContext& ctx) {
  const std::vector<int> perm = normalized_perm(ctx.params<TransposeParams>().perm, ctx.shape(0));
  std::vector<SbpSignature> sigs;
  for (int j = 0; j < static_cast<int>(perm.size()); ++j) sigs.push_back({{S(perm[j])}, {S(j)}});
  sigs.push_back({{B()}, {B()}});
  sigs.push_back({{P()}, {P()}});
  return sigs;
}

void transpose_gradient(GradBuilder& g) {
  const Value dy = g.output_grad(0);
  if (dy == GradBuilder::kNone) return;
  const std::vector<int> perm =
      normalized_perm(g.params<TransposeParams>().perm, g.meta(g.input(0)).shape);
  std::vector<int64_t> inverse(perm.size());
  for (size_t j = 0; j < perm.size(); ++j) inverse[perm[j]] = static_cast<int64_t>(j);
  g.set_input_grad(0, g.apply1("transpose", TransposeParams{inverse}, {dy}));
}

// ---- slice and slice_grad ----

// Checks start/stop/step against `shape` (the sliced tensor) and returns the sliced shape.
Shape sliced_shape(const std::string& op, const std::vector<int64_t>& start,
                   const std::vector<int64_t>& stop, const std::vector<int64_t>& step,
                   const Shape& shape, const std::string& what) {
  const size_t n = static_cast<size_t>(shape.ndim());
  OFL_CHECK(start.size() == n && stop.size() == n && step.size() == n, "[", op,
            "] start, stop and step need one entry per axis of ", what, ". However, got start ",
            list_string(start), ", stop ", list_string(stop), ", step ", list_string(step), " for ",
            what, " ", shape.to_string(), ".");
  std::vector<int64_t> dims(n);
  for (size_t i = 0; i < n; ++i) {
    OFL_CHECK(step[i] >= 1, "[", op, "] step must be at least 1. However, got step ",
              list_string(step), " (axis ", i, ") for ", what, " ", shape.to_string(), ".");
    OFL_CHECK_INDEX(0 <= start[i] && start[i] <= stop[i] && stop[i] <= shape[i], "[", op,
                    "] each axis needs 0 <= start <= stop <= extent. However, got start ",
                    list_string(start), ", stop ", list_string(stop), " (axis ", i, ") for ", what,
                    " ", shape.to_string(), ".");
    dims[i] = (stop[i] - start[i] + step[i] - 1) / step[i];
  }
  return Shape(std::move(dims));
}

bool axis_is_whole(const std::vector<int64_t>& start, const std::vector<int64_t>& stop,
                   const std::vector<int64_t>& step, const Shape& shape, int i) {
  return start[i] == 0 && stop[i] == shape[i] && step[i] == 1;
}

std::vector<TensorMeta> infer_slice(const InferContext& ctx) {
  const auto& p = ctx.params<SliceParams>();
  return {
      TensorMeta{sliced_shape("slice", p.start, p.stop, p.step, ctx.shape(0), "x"), ctx.dtype(0)}};
}

// Split on an axis the slice leaves whole: each rank slices its own piece.
std::vector<SbpSignature> slice_signatures(const InferContext& ctx) {
  const auto& p = ctx.params<SliceParams>();
  std::vector<SbpSignature> sigs;
  for (int i = 0; i < ctx.shape(0).ndim(); ++i) {
    if (axis_is_whole(p.start, p.stop, p.step, ctx.shape(0), i)) sigs.push_back({{S(i)}, {S(i)}});
  }
  sigs.push_back({{B()}, {B()}});
  sigs.push_back({{P()}, {P()}});
  return sigs;
}

void slice_gradient(GradBuilder& g) {
  const Value dy = g.output_grad(0);
  if (dy == GradBuilder::kNone) return;
  const auto& p = g.params<SliceParams>();
  g.set_input_grad(
      0, g.apply1("slice_grad", SliceGradParams{g.meta(g.input(0)).shape, p.start, p.stop, p.step},
                  {dy}));
}

std::vector<TensorMeta> infer_slice_grad(const InferContext& ctx) {
  const auto& p = ctx.params<SliceGradParams>();
  const Shape expected =
      sliced_shape("slice_grad", p.start, p.stop, p.step, p.like_shape, "like_shape");
  OFL_CHECK(ctx.shape(0) == expected, "[slice_grad] dy must have the shape of the slice of ",
            "like_shape ", p.like_shape.to_string(), ", which is ", expected.to_string(),
            ". However, got ", ctx.describe_inputs(), ".");
  return {TensorMeta{p.like_shape, ctx.dtype(0)}};
}

std::vector<SbpSignature> slice_grad_signatures(const InferContext& ctx) {
  const auto& p = ctx.params<SliceGradParams>();
  std::vector<SbpSignature> sigs;
  for (int i = 0; i < p.like_shape.ndim(); ++i) {
    if (axis_is_whole(p.start, p.stop, p.step, p.like_shape, i)) sigs.push_back({{S(i)}, {S(i)}});
  }
  sigs.push_back({{B()}, {B()}});
  sigs.push_back({{P()}, {P()}});
  return sigs;
}

// slice_grad is linear in dy; its adjoint is slice.
void slice_grad_gradient(GradBuilder& g) {
  const Value ddx = g.output_grad(0);
  if (ddx == GradBuilder::kNone) return;
  const auto& p = g.params<SliceGradParams>();
  g.set_input_grad(0, g.apply1("slice", SliceParams{p.start, p.stop, p.step}, {ddx}));
}

// ---- concat and split ----

std::vector<TensorMeta> infer_concat(const InferContext& ctx) {
  const Shape& first = ctx.shape(0);
  OFL_CHECK(first.ndim() > 0, "[concat] inputs must have at least one axis. However, got ",
            ctx.describe_inputs(), ".");
  const int axis = normalize_axis(ctx.params<ConcatParams>().axis, first.ndim(), "concat");
  std::vector<int64_t> dims = first.dims();
  dims[axis] = 0;
  for (int k = 0; k < ctx.num_inputs(); ++k) {
    const Shape& s = ctx.shape(k);
    OFL_CHECK_TYPE(ctx.dtype(k) == ctx.dtype(0), "[concat] all inputs must have one dtype. ",
                   "However, got ", ctx.input_name(k), " ", dtype_name(ctx.dtype(k)), " and ",
                   ctx.input_name(0), " ", dtype_name(ctx.dtype(0)), ".");
    bool fits = s.ndim() == first.ndim();
    for (int i = 0; fits && i < s.ndim(); ++i) fits = i == axis || s[i] == first[i];
    OFL_CHECK(fits, "[concat] inputs must have the same shape except on axis ", axis,
              ". However, got ", ctx.input_name(k), " ", s.to_string(), " and ", ctx.input_name(0),
              " ", first.to_string(), ".");
    dims[axis] += s[axis];
  }
  return {TensorMeta{Shape(std::move(dims)), ctx.dtype(0)}};
}

std::vector<SbpSignature> concat_signatures(const InferContext& ctx) {
  const int n = ctx.num_inputs();
  const int ndim = ctx.shape(0).ndim();
  const int axis = normalize_axis(ctx.params<ConcatParams>().axis, ndim, "concat");
  std::vector<SbpSignature> sigs;
  for (int i = 0; i < ndim; ++i) {
    if (i != axis) sigs.push_back({std::vector<Sbp>(n, S(i)), {S(i)}});
  }
  sigs.push_back({std::vector<Sbp>(n, B()), {B()}});
  sigs.push_back({std::vector<Sbp>(n, P()), {P()}});
  return sigs;
}

void concat_gradient(GradBuilder& g) {
  const Value dy = g.output_grad(0);
  if (dy == GradBuilder::kNone) return;
  const Shape out = g.meta(dy).shape;
  const int axis = normalize_axis(g.params<ConcatParams>().axis, out.ndim(), "concat");
  std::vector<int64_t> sizes;
  for (int k = 0; k < g.num_inputs(); ++k) sizes.push_back(g.meta(g.input(k)).shape[axis]);
  const std::vector<Value> pieces = g.apply("split", SplitParams{axis, sizes}, {dy});
  for (int k = 0; k < g.num_inputs(); ++k) g.set_input_grad(k, pieces[k]);
}

std::vector<TensorMeta> infer_split(const InferContext& ctx) {
  const Shape& x = ctx.shape(0);
  const auto& p = ctx.params<SplitParams>();
  OFL_CHECK(x.ndim() > 0, "[split] x must have at least one axis. However, got ",
            ctx.describe_inputs(), ".");
  const int axis = normalize_axis(p.axis, x.ndim(), "split");
  OFL_CHECK(!p.sizes.empty(), "[split] sizes must list at least one piece. However, got none for ",
            ctx.describe_inputs(), ".");
  int64_t total = 0;
  for (int64_t s : p.sizes) {
    OFL_CHECK(s >= 0, "[split] sizes must be non-negative. However, got sizes ",
              list_string(p.sizes), " for ", ctx.describe_inputs(), ".");
    total += s;
  }
  OFL_CHECK(total == x[axis], "[split] sizes must sum to the extent of axis ", axis, " (", x[axis],
            "). However, got sizes ", list_string(p.sizes), " (sum ", total, ") for ",
            ctx.describe_inputs(), ".");
  std::vector<TensorMeta> out;
  for (int64_t s : p.sizes) {
    Shape piece = x;
    piece[axis] = s;
    out.push_back(TensorMeta{piece, ctx.dtype(0)});
  }
  return out;
}

std::vector<SbpSignature> split_signatures(const InferContext& ctx) {
  const auto& p = ctx.params<SplitParams>();
  const int ndim = ctx.shape(0).ndim();
  const int axis = normalize_axis(p.axis, ndim, "split");
  const size_t n = p.sizes.size();
  std::vector<SbpSignature> sigs;
  for (int i = 0; i < ndim; ++i) {
    if (i != axis) sigs.push_back({{S(i)}, std::vector<Sbp>(n, S(i))});
  }
  sigs.push_back({{B()}, std::vector<Sbp>(n, B())});
  sigs.push_back({{P()}, std::vector<Sbp>(n, P())});
  return sigs;
}

void split_gradient(GradBuilder& g) {
  bool any = false;
  for (int k = 0; k < g.num_outputs(); ++k) any = any || g.output_grad(k) != GradBuilder::kNone;
  if (!any) return;
  std::vector<Value> grads;
  for (int k = 0; k < g.num_outputs(); ++k) grads.push_back(output_grad_or_zeros(g, k));
  g.set_input_grad(0, g.apply1("concat", ConcatParams{g.params<SplitParams>().axis}, grads));
}

}  // namespace

OFL_REGISTER_OP("transpose")
    .inputs({"x"})
    .outputs({"y"})
    .set<TUnderAmp>(AmpCategory::kFollow)
    .params<TransposeParams>()
    .set<FInferMeta>(infer_transpose)
    .set<FSbpSignatures>(transpose_signatures)
    .set<FGradient>(transpose_gradient);

OFL_REGISTER_OP("slice")
    .inputs({"x"})
    .outputs({"y"})
    .set<TUnderAmp>(AmpCategory::kFollow)
    .params<SliceParams>()
    .set<FInferMeta>(infer_slice)
    .set<FSbpSignatures>(slice_signatures)
    .set<FGradient>(slice_gradient);

OFL_REGISTER_OP("slice_grad")
    .inputs({"dy"})
    .outputs({"dx"})
    .params<SliceGradParams>()
    .set<FInferMeta>(infer_slice_grad)
    .set<FSbpSignatures>(slice_grad_signatures)
    .set<FGradient>(slice_grad_gradient);

OFL_REGISTER_OP("concat")
    .variadic_inputs("inputs")
    .outputs({"out"})
    .set<TUnderAmp>(AmpCategory::kFollow)
    .params<ConcatParams>()
    .set<FInferMeta>(infer_concat)
    .set<FSbpSignatures>(concat_signatures)
    .set<FGradient>(concat_gradient);

OFL_REGISTER_OP("split")
    .inputs({"x"})
    .variadic_outputs("outputs")
    .set<TUnderAmp>(AmpCategory::kFollow)
    .params<SplitParams>()
    .set<FInferMeta>(infer_split)
    .set<FSbpSignatures>(split_signatures)
    .set<FGradient>(split_gradient);

namespace functional {

Tensor transpose(const Tensor& x, const std::vector<int64_t>& perm) {
  static OpHandle op("transpose");
  return op.call1(TransposeParams{perm}, {x});
}

Tensor slice(const Tensor& x, const std::vector<int64_t>& start, const std::vector<int64_t>& stop,
             const std::vector<int64_t>& step) {
  static OpHandle op("slice");
  return op.call1(SliceParams{start, stop, step}, {x});
}

Tensor slice_grad(const Tensor& dy, const Shape& like_shape, const std::vector<int64_t>& start,
                  const std::vector<int64_t>& stop, const std::vector<int64_t>& step) {
  static OpHandle op("slice_grad");
  return op.call1(SliceGradParams{like_shape, start, stop, step}, {dy});
}

Tensor concat(const std::vector<Tensor>& inputs, int64_t axis) {
  static OpHandle op("concat");
  bool mixed = false;
  DataType common = inputs.empty() || !inputs[0].defined() ? DataType::kFloat32 : inputs[0].dtype();
  for (const Tensor& t : inputs) {
    if (!t.defined() || t.dtype() == common) continue;
    common = promote_types(common, t.dtype());
    mixed = true;
  }
  if (!mixed) return op.call1(ConcatParams{axis}, inputs);
  std::vector<Tensor> cast_inputs;
  cast_inputs.reserve(inputs.size());
  for (const Tensor& t : inputs) cast_inputs.push_back(t.defined() ? cast(t, common) : t);
  return op.call1(ConcatParams{axis}, cast_inputs);
}

std::vector<Tensor> split(const Tensor& x, int64_t axis, const std::vector<int64_t>& sizes) {
  static OpHandle op("split");
  return op(SplitParams{axis, sizes}, {x});
}

}  // namespace functional

}  // namespace ofl
