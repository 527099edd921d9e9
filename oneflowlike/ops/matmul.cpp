// matmul and batch_matmul: inference, SBP signatures and gradients. The gradients reuse the
// transpose flags instead of materialising transposed copies.

#include "oneflowlike/ops/matmul.h"

#include "oneflowlike/eager.h"
#include "oneflowlike/op.h"
#include "oneflowlike/ops/creation.h"
#include "oneflowlike/ops/elementwise.h"
#include "oneflowlike/ops/grad_util.h"

namespace ofl {

namespace {

constexpr const char* kGradB = "broadcast_matmul_grad_b";

// "a (4, 8) float32, b (6, 5) float32 with transpose_b=true" for messages.
std::string describe_operands(const InferContext& ctx) {
  const auto& p = ctx.params<MatmulParams>();
  std::string s = ctx.describe_inputs();
  std::string flags;
  if (p.transpose_a) flags += "transpose_a=true";
  if (p.transpose_b) flags += std::string(flags.empty() ? "" : ", ") + "transpose_b=true";
  if (p.float32_out) flags += std::string(flags.empty() ? "" : ", ") + "float32_out=true";
  return flags.empty() ? s : s + " with " + flags;
}

// Both operands' dtype, which the product is written in unless float32_out asks for float32.
DataType out_dtype(const InferContext& ctx) {
  OFL_CHECK_TYPE(ctx.dtype(0) == ctx.dtype(1), "[", ctx.op_name(),
                 "] both operands must have one dtype. However, got ", ctx.describe_inputs(), ".");
  if (!ctx.params<MatmulParams>().float32_out) return ctx.dtype(0);
  OFL_CHECK_TYPE(ctx.dtype(0) == DataType::kBFloat16 || ctx.dtype(0) == DataType::kFloat16, "[",
                 ctx.op_name(), "] float32_out is for float16 or bfloat16 operands. However, got ",
                 describe_operands(ctx), ".");
  return DataType::kFloat32;
}

// Axes of the (M, K) and (K, N) roles in an operand of `ndim` axes, after the transpose flag.
struct MatrixAxes {
  int rows;  // M for a, K for b
  int cols;  // K for a, N for b
};
MatrixAxes matrix_axes(int ndim, bool transpose) {
  return transpose ? MatrixAxes{ndim - 1, ndim - 2} : MatrixAxes{ndim - 2, ndim - 1};
}

std::vector<TensorMeta> infer_matmul(const InferContext& ctx) {
  const auto& p = ctx.params<MatmulParams>();
  const Shape& a = ctx.shape(0);
  const Shape& b = ctx.shape(1);
  const DataType dtype = out_dtype(ctx);
  OFL_CHECK(a.ndim() >= 2, "[matmul] a must have at least 2 axes (M, K). However, got ",
            describe_operands(ctx), ".");
  OFL_CHECK(b.ndim() == 2,
            "[matmul] b must be 2-D (K, N); use batch_matmul for a batched b. However, got ",
            describe_operands(ctx), ".");
  OFL_CHECK(!p.transpose_a || a.ndim() == 2,
            "[matmul] transpose_a needs a 2-D a: an N-d a is folded into rows and cannot be "
            "transposed. However, got ",
            describe_operands(ctx), ".");
  const MatrixAxes aa = matrix_axes(a.ndim(), p.transpose_a);
  const MatrixAxes ba = matrix_axes(2, p.transpose_b);
  OFL_CHECK(a[aa.cols] == b[ba.rows],
            "[matmul] the contracted extents of a and b must match (a's K ", a[aa.cols],
            " vs b's K ", b[ba.rows], "). However, got ", describe_operands(ctx), ".");
  std::vector<int64_t> out(a.dims().begin(), a.dims().end() - 2);
  out.push_back(a[aa.rows]);
  out.push_back(b[ba.cols]);
  return {TensorMeta{Shape(std::move(out)), dtype}};
}

std::vector<TensorMeta> infer_batch_matmul(const InferContext& ctx) {
  const auto& p = ctx.params<MatmulParams>();
  const Shape& a = ctx.shape(0);
  const Shape& b = ctx.shape(1);
  const DataType dtype = out_dtype(ctx);
  OFL_CHECK(a.ndim() >= 3 && b.ndim() == a.ndim(),
            "[batch_matmul] a and b must have the same number of axes, at least 3 (..., M, K) "
            "x (..., K, N). However, got ",
            describe_operands(ctx), ".");
  for (int i = 0; i < a.ndim() - 2; ++i) {
    OFL_CHECK(a[i] == b[i], "[batch_matmul] a and b must have identical batch dims (axis ", i, ": ",
              a[i], " vs ", b[i], "). However, got ", describe_operands(ctx), ".");
  }
  const MatrixAxes aa = matrix_axes(a.ndim(), p.transpose_a);
  const MatrixAxes ba = matrix_axes(b.ndim(), p.transpose_b);
  OFL_CHECK(a[aa.cols] == b[ba.rows],
            "[batch_matmul] the contracted extents of a and b must match (a's K ", a[aa.cols],
            " vs b's K ", b[ba.rows], "). However, got ", describe_operands(ctx), ".");
  std::vector<int64_t> out(a.dims().begin(), a.dims().end() - 2);
  out.push_back(a[aa.rows]);
  out.push_back(b[ba.cols]);
  return {TensorMeta{Shape(std::move(out)), dtype}};
}

// a (..., K), b (..., N) with equal leading axes -> (K, N) (Note [Products over rows]).
std::vector<TensorMeta> infer_grad_b(const InferContext& ctx) {
  const auto& p = ctx.params<MatmulParams>();
  const Shape& a = ctx.shape(0);
  const Shape& b = ctx.shape(1);
  const DataType dtype = out_dtype(ctx);
  OFL_CHECK(!p.transpose_a && !p.transpose_b, "[", ctx.op_name(),
            "] takes no transpose flags (it contracts the rows of both operands). However, got ",
            describe_operands(ctx), ".");
  bool same = a.ndim() >= 2 && a.ndim() == b.ndim();
  for (int i = 0; same && i < a.ndim() - 1; ++i) same = a[i] == b[i];
  OFL_CHECK(same, "[", ctx.op_name(),
            "] a (..., K) and b (..., N) must have the same leading axes, at least one. However, "
            "got ",
            describe_operands(ctx), ".");
  return {TensorMeta{Shape{a[a.ndim() - 1], b[b.ndim() - 1]}, dtype}};
}

// Any leading axis splits both operands' rows: partial sums. a's columns give out's rows, b's
// its columns.
std::vector<SbpSignature> grad_b_signatures(const InferContext& ctx) {
  const int nd = ctx.shape(0).ndim();
  std::vector<SbpSignature> sigs;
  for (int i = 0; i < nd - 1; ++i) sigs.push_back({{S(i), S(i)}, {P()}});
  sigs.push_back({{S(nd - 1), B()}, {S(0)}});
  sigs.push_back({{B(), S(nd - 1)}, {S(1)}});
  sigs.push_back({{P(), B()}, {P()}});
  sigs.push_back({{B(), P()}, {P()}});
  sigs.push_back({{B(), B()}, {B()}});
  return sigs;
}

// The worked example in sbp.h, with axes moved by the transpose flags. An N-d a is folded into
// rows, so any of its leading axes splits like M.
std::vector<SbpSignature> matmul_signatures(const InferContext& ctx) {
  const auto& p = ctx.params<MatmulParams>();
  const int nd = ctx.shape(0).ndim();
  const MatrixAxes aa = matrix_axes(nd, p.transpose_a);
  const MatrixAxes ba = matrix_axes(2, p.transpose_b);
  std::vector<SbpSignature> sigs;
  for (int i = 0; i < nd - 2; ++i) sigs.push_back({{S(i), B()}, {S(i)}});
  sigs.push_back({{S(aa.rows), B()}, {S(nd - 2)}});   // rows of a: data parallel
  sigs.push_back({{B(), S(ba.cols)}, {S(nd - 1)}});   // columns of b: column parallel
  sigs.push_back({{S(aa.cols), S(ba.rows)}, {P()}});  // K: each rank sums part of it
  sigs.push_back({{P(), B()}, {P()}});                // linear in a
  sigs.push_back({{B(), P()}, {P()}});                // linear in b
  sigs.push_back({{B(), B()}, {B()}});
  return sigs;
}

std::vector<SbpSignature> batch_matmul_signatures(const InferContext& ctx) {
  const auto& p = ctx.params<MatmulParams>();
  const int nd = ctx.shape(0).ndim();
  const MatrixAxes aa = matrix_axes(nd, p.transpose_a);
  const MatrixAxes ba = matrix_axes(nd, p.transpose_b);
  std::vector<SbpSignature> sigs;
  for (int i = 0; i < nd - 2; ++i) sigs.push_back({{S(i), S(i)}, {S(i)}});
  sigs.push_back({{S(aa.rows), B()}, {S(nd - 2)}});
  sigs.push_back({{B(), S(ba.cols)}, {S(nd - 1)}});
  sigs.push_back({{S(aa.cols), S(ba.rows)}, {P()}});
  sigs.push_back({{P(), B()}, {P()}});
  sigs.push_back({{B(), P()}, {P()}});
  sigs.push_back({{B(), B()}, {B()}});
  return sigs;
}

Value matmul_op(GradBuilder& g, std::string_view op, Value a, Value b, bool transpose_a,
                bool transpose_b, double alpha) {
  return g.apply1(op, MatmulParams{transpose_a, transpose_b, alpha}, {a, b});
}

// Note [Matmul gradient]. With A = op(a), B = op(b) and y = alpha * A @ B:
//   dA = alpha * dy @ B^T,  dB = alpha * A^T @ dy,
// and da = dA (or dA^T when a is transposed), likewise for b. Each case is one product with
// suitable flags:
//   da = matmul(dy, b, tb=!tb)           (a not transposed)
//   da = matmul(b, dy, ta=tb, tb=true)   (a transposed)
//   db = matmul(a, dy, ta=!ta)           (b not transposed)
//   db = matmul(dy, a, ta=true, tb=ta)   (b transposed)
// For an N-d a (matmul only) db is one product over the rows of a and dy (Note [Products over
// rows]). Under float32_out the float32 dy is cast to the operands' dtype first, as the
// gradient of a cast after the product would be.
Value product_dy(GradBuilder& g) {
  const Value dy = g.output_grad(0);
  if (dy == GradBuilder::kNone || !g.params<MatmulParams>().float32_out) return dy;
  return g.apply1("cast", CastParams{g.meta(g.input(0)).dtype}, {dy});
}

void matmul_gradient(GradBuilder& g) {
  const Value dy = product_dy(g);
  if (dy == GradBuilder::kNone) return;
  const auto& p = g.params<MatmulParams>();
  const bool ta = p.transpose_a, tb = p.transpose_b;
  const Value a = g.input(0);
  const Value b = g.input(1);
  if (g.needs_input_grad(0)) {
    g.set_input_grad(0, ta ? matmul_op(g, "matmul", b, dy, tb, true, p.alpha)
                           : matmul_op(g, "matmul", dy, b, false, !tb, p.alpha));
  }
  if (g.needs_input_grad(1)) {
    if (g.meta(a).shape.ndim() > 2) {  // a (..., K) is never transposed
      g.set_input_grad(1, tb ? matmul_op(g, kGradB, dy, a, false, false, p.alpha)
                             : matmul_op(g, kGradB, a, dy, false, false, p.alpha));
      return;
    }
    g.set_input_grad(1, tb ? matmul_op(g, "matmul", dy, a, true, ta, p.alpha)
                           : matmul_op(g, "matmul", a, dy, !ta, false, p.alpha));
  }
}

void batch_matmul_gradient(GradBuilder& g) {
  const Value dy = product_dy(g);
  if (dy == GradBuilder::kNone) return;
  const auto& p = g.params<MatmulParams>();
  const bool ta = p.transpose_a, tb = p.transpose_b;
  const Value a = g.input(0), b = g.input(1);
  if (g.needs_input_grad(0)) {
    g.set_input_grad(0, ta ? matmul_op(g, "batch_matmul", b, dy, tb, true, p.alpha)
                           : matmul_op(g, "batch_matmul", dy, b, false, !tb, p.alpha));
  }
  if (g.needs_input_grad(1)) {
    g.set_input_grad(1, tb ? matmul_op(g, "batch_matmul", dy, a, true, ta, p.alpha)
                           : matmul_op(g, "batch_matmul", a, dy, !ta, false, p.alpha));
  }
}

// out = alpha a^T b: da = alpha b dout^T (..., K), db = alpha a dout (..., N), each a matmul of
// the N-d operand with the 2-D dout.
void grad_b_gradient(GradBuilder& g) {
  const Value dout = product_dy(g);
  if (dout == GradBuilder::kNone) return;
  const double alpha = g.params<MatmulParams>().alpha;
  if (g.needs_input_grad(0)) {
    g.set_input_grad(0, matmul_op(g, "matmul", g.input(1), dout, false, true, alpha));
  }
  if (g.needs_input_grad(1)) {
    g.set_input_grad(1, matmul_op(g, "matmul", g.input(0), dout, false, false, alpha));
  }
}

}  // namespace

OFL_REGISTER_OP("matmul")
    .inputs({"a", "b"})
    .outputs({"out"})
    .params<MatmulParams>()
    .set<FInferMeta>(infer_matmul)
    .set<TUnderAmp>(AmpCategory::kLowPrecision)
    .set<FSbpSignatures>(matmul_signatures)
    .set<FGradient>(matmul_gradient);

OFL_REGISTER_OP("batch_matmul")
    .inputs({"a", "b"})
    .outputs({"out"})
    .params<MatmulParams>()
    .set<FInferMeta>(infer_batch_matmul)
    .set<TUnderAmp>(AmpCategory::kLowPrecision)
    .set<FSbpSignatures>(batch_matmul_signatures)
    .set<FGradient>(batch_matmul_gradient);

OFL_REGISTER_OP(kGradB)
    .inputs({"a", "b"})
    .outputs({"out"})
    .params<MatmulParams>()
    .set<FInferMeta>(infer_grad_b)
    .set<TUnderAmp>(AmpCategory::kLowPrecision)
    .set<FSbpSignatures>(grad_b_signatures)
    .set<FGradient>(grad_b_gradient);

namespace functional {

Tensor matmul(const Tensor& a, const Tensor& b, bool transpose_a, bool transpose_b, double alpha) {
  static OpHandle op("matmul");
  return op.call1(MatmulParams{transpose_a, transpose_b, alpha}, {a, b});
}

Tensor batch_matmul(const Tensor& a, const Tensor& b, bool transpose_a, bool transpose_b,
                    double alpha) {
  static OpHandle op("batch_matmul");
  return op.call1(MatmulParams{transpose_a, transpose_b, alpha}, {a, b});
}

Tensor broadcast_matmul_grad_b(const Tensor& a, const Tensor& b, double alpha) {
  static OpHandle op(kGradB);
  return op.call1(MatmulParams{false, false, alpha}, {a, b});
}

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  const Tensor y = matmul(x, weight, /*transpose_a=*/false, /*transpose_b=*/true);
  return bias.defined() ? add(y, bias) : y;
}

}  // namespace functional

}  // namespace ofl
