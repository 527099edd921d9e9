// Unary elementwise ops and their fused backward ops against reference loops.

#include "oneflowlike/ops/unary.h"

#include <cmath>
#include <functional>
#include <numbers>

#include "oneflowlike/autograd.h"
#include "oneflowlike/op.h"
#include "tests/cpp/ops/test_util.h"

namespace ofl {
namespace {

using testing::expect_close;
using testing::expect_gradients_match;
using testing::make_tensor;
using testing::random_tensor;
using testing::values_of;
namespace F = functional;

using testing::expect_error;

double gelu_exact(double x) { return 0.5 * x * (1 + std::erf(x / std::numbers::sqrt2)); }
double gelu_tanh(double x) {
  const double k = std::sqrt(2 / std::numbers::pi);
  return 0.5 * x * (1 + std::tanh(k * (x + 0.044715 * x * x * x)));
}

std::vector<SbpSignature> signatures(std::string_view op, const AnyParams& params,
                                     const std::vector<TensorMeta>& inputs) {
  const OpSchema& schema = OpRegistry::global().find(op);
  return (*schema.get<FSbpSignatures>())(InferContext(schema, params, inputs));
}

struct Case {
  const char* name;
  std::function<Tensor(const Tensor&)> op;
  std::function<double(double)> reference;
  double lo, hi;  // input range where the function is defined and smooth
};

std::vector<Case> cases() {
  return {
      {"neg", [](const Tensor& x) { return F::neg(x); }, [](double x) { return -x; }, -2, 2},
      {"abs", [](const Tensor& x) { return F::abs(x); }, [](double x) { return std::abs(x); }, 0.1,
       2},
      {"exp", [](const Tensor& x) { return F::exp(x); }, [](double x) { return std::exp(x); }, -2,
       2},
      {"log", [](const Tensor& x) { return F::log(x); }, [](double x) { return std::log(x); }, 0.1,
       3},
      {"sqrt", [](const Tensor& x) { return F::sqrt(x); }, [](double x) { return std::sqrt(x); },
       0.1, 3},
      {"rsqrt", [](const Tensor& x) { return F::rsqrt(x); },
       [](double x) { return 1 / std::sqrt(x); }, 0.2, 3},
      {"tanh", [](const Tensor& x) { return F::tanh(x); }, [](double x) { return std::tanh(x); },
       -2, 2},
      {"relu", [](const Tensor& x) { return F::relu(x); }, [](double x) { return x > 0 ? x : 0.0; },
       -2, 2},
      {"sigmoid", [](const Tensor& x) { return F::sigmoid(x); },
       [](double x) { return 1 / (1 + std::exp(-x)); }, -3, 3},
      {"gelu", [](const Tensor& x) { return F::gelu(x); }, gelu_exact, -3, 3},
      {"gelu_tanh", [](const Tensor& x) { return F::gelu(x, "tanh"); }, gelu_tanh, -3, 3},
  };
}

TEST(UnaryOps, MatchReferenceInFloat32AndFloat64) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    for (DataType dtype : {DataType::kFloat32, DataType::kFloat64}) {
      const Tensor x = random_tensor({3, 5}, dtype, 1, c.lo, c.hi);
      const Tensor y = c.op(x);
      EXPECT_EQ(y.dtype(), dtype);
      expect_close(y, testing::map_values(x, c.reference), {3, 5}, 1e-5, 1e-6);
    }
  }
}

TEST(UnaryOps, LargeInputsRunInParallelAndMatchReference) {
  const Tensor x = random_tensor({300, 400}, DataType::kFloat64, 3, -4, 4);
  expect_close(F::exp(x), testing::map_values(x, [](double v) { return std::exp(v); }), {300, 400},
               1e-12, 0);
  expect_close(F::gelu(x), testing::map_values(x, gelu_exact), {300, 400}, 1e-12, 1e-15);
  expect_close(F::relu(x), testing::map_values(x, [](double v) { return v > 0 ? v : 0.0; }),
               {300, 400}, 0, 0);
}

TEST(UnaryOps, GradientsMatchFiniteDifferences) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    expect_gradients_match([&](const std::vector<Tensor>& in) { return std::vector{c.op(in[0])}; },
                           {random_tensor({2, 3}, DataType::kFloat64, 5, c.lo, c.hi)});
  }
}

TEST(UnaryOps, ReluGradientIsZeroWhereOutputIsNotPositive) {
  Tensor x = make_tensor({-1, 0, 2}, {3}, DataType::kFloat64);
  x.set_requires_grad(true);
  backward({F::relu(x)}, {make_tensor({5, 6, 7}, {3}, DataType::kFloat64)});
  expect_close(x.grad(), {0, 0, 7}, {3});
}

TEST(UnaryOps, NegAndAbsWorkOnIntegers) {
  for (DataType dtype : {DataType::kInt32, DataType::kInt64}) {
    const Tensor x = make_tensor({-3, 0, 4}, {3}, dtype);
    EXPECT_EQ(F::neg(x).dtype(), dtype);
    expect_close(F::neg(x), {3, 0, -4}, {3}, 0, 0);
    expect_close(F::abs(x), {3, 0, 4}, {3}, 0, 0);
  }
}

TEST(UnaryBackwardOps, MatchClosedForms) {
  const Tensor y = random_tensor({4, 3}, DataType::kFloat64, 11, -0.9, 0.9);
  const Tensor dy = random_tensor({4, 3}, DataType::kFloat64, 12);
  const std::vector<double> vy = values_of(y), vdy = values_of(dy);
  std::vector<double> tanh_ref, sigmoid_ref, relu_ref;
  for (size_t i = 0; i < vy.size(); ++i) {
    tanh_ref.push_back(vdy[i] * (1 - vy[i] * vy[i]));
    sigmoid_ref.push_back(vdy[i] * vy[i] * (1 - vy[i]));
    relu_ref.push_back(vy[i] > 0 ? vdy[i] : 0.0);
  }
  expect_close(F::tanh_grad(y, dy), tanh_ref, {4, 3}, 1e-12, 1e-15);
  expect_close(F::sigmoid_grad(y, dy), sigmoid_ref, {4, 3}, 1e-12, 1e-15);
  expect_close(F::relu_grad(y, dy), relu_ref, {4, 3}, 0, 0);
}

TEST(UnaryBackwardOps, GeluGradMatchesFiniteDifferenceOfGelu) {
  for (const char* approximate : {"none", "tanh"}) {
    SCOPED_TRACE(approximate);
    const Tensor x = random_tensor({7}, DataType::kFloat64, 13, -3, 3);
    const Tensor ones = make_tensor(std::vector<double>(7, 1.0), {7}, DataType::kFloat64);
    const std::vector<double> vx = values_of(x);
    std::vector<double> numeric;
    const double h = 1e-6;
    auto f = std::string(approximate) == "tanh" ? gelu_tanh : gelu_exact;
    for (double v : vx) numeric.push_back((f(v + h) - f(v - h)) / (2 * h));
    expect_close(F::gelu_grad(x, ones, approximate), numeric, {7}, 1e-6, 1e-8);
  }
}

TEST(UnaryBackwardOps, SecondDerivativesOfTanhAndSigmoidMatchFiniteDifferences) {
  // d/dx of the first gradient: backward through tanh_grad and sigmoid_grad.
  for (const char* op : {"tanh", "sigmoid"}) {
    SCOPED_TRACE(op);
    const bool is_tanh = std::string(op) == "tanh";
    expect_gradients_match(
        [&](const std::vector<Tensor>& in) {
          const Tensor y = is_tanh ? F::tanh(in[0]) : F::sigmoid(in[0]);
          return std::vector{is_tanh ? F::tanh_grad(y, in[1]) : F::sigmoid_grad(y, in[1])};
        },
        {random_tensor({5}, DataType::kFloat64, 17, -2, 2),
         random_tensor({5}, DataType::kFloat64, 18)});
  }
}

TEST(UnaryOps, RejectIntegerInputForFloatingFunctions) {
  const Tensor x = make_tensor({1, 2}, {2}, DataType::kInt64);
  expect_error([&] { F::exp(x); }, ErrorCode::kTypeError,
               "[exp] the input must have a floating-point dtype. However, got x (2,) int64");
  expect_error([&] { F::relu(x); }, ErrorCode::kTypeError, "floating-point dtype");
}

TEST(UnaryOps, NegRejectsBool) {
  const Tensor x = make_tensor({1, 0}, {2}, DataType::kBool);
  expect_error([&] { F::neg(x); }, ErrorCode::kTypeError,
               "[neg] the input must have a number dtype");
}

TEST(UnaryOps, GeluRejectsUnknownApproximation) {
  const Tensor x = make_tensor({1, 2}, {2});
  expect_error([&] { F::gelu(x, "erf"); }, ErrorCode::kInvalidArgument,
               "[gelu] approximate must be 'none' or 'tanh'. However, got 'erf'");
}

TEST(UnaryBackwardOps, RejectMismatchedShapes) {
  const Tensor y = make_tensor({1, 2}, {2});
  const Tensor dy = make_tensor({1, 2, 3}, {3});
  expect_error([&] { F::tanh_grad(y, dy); }, ErrorCode::kInvalidArgument,
               "[tanh_grad] both inputs must have one shape");
}

TEST(UnarySbp, SplitsEveryAxisAndOnlyNegKeepsPartialSum) {
  const std::vector<TensorMeta> in{{Shape{4, 6}, DataType::kFloat32}};
  const std::vector<SbpSignature> exp_sigs = signatures("exp", NoParams{}, in);
  const std::vector<SbpSignature> expected{{{S(0)}, {S(0)}}, {{S(1)}, {S(1)}}, {{B()}, {B()}}};
  EXPECT_EQ(exp_sigs, expected);
  std::vector<SbpSignature> neg_expected = expected;
  neg_expected.push_back({{P()}, {P()}});
  EXPECT_EQ(signatures("neg", NoParams{}, in), neg_expected);
  EXPECT_EQ(signatures("gelu", GeluParams{}, in), expected);
}

TEST(UnarySbp, BackwardOpsAreLinearInDy) {
  const std::vector<TensorMeta> in{{Shape{4, 6}, DataType::kFloat32},
                                   {Shape{4, 6}, DataType::kFloat32}};
  const std::vector<SbpSignature> expected{
      {{S(0), S(0)}, {S(0)}}, {{S(1), S(1)}, {S(1)}}, {{B(), B()}, {B()}}, {{B(), P()}, {P()}}};
  EXPECT_EQ(signatures("relu_grad", NoParams{}, in), expected);
}

}  // namespace
}  // namespace ofl
