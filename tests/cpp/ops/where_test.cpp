// where and masked_fill against reference loops.

#include "oneflowlike/ops/where.h"

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

Tensor bool_tensor(const std::vector<double>& v, const Shape& shape) {
  return make_tensor(v, shape, DataType::kBool);
}

std::vector<SbpSignature> signatures(std::string_view op, const AnyParams& params,
                                     const std::vector<TensorMeta>& inputs) {
  const OpSchema& schema = OpRegistry::global().find(op);
  return (*schema.get<FSbpSignatures>())(InferContext(schema, params, inputs));
}

TEST(Where, PicksXWhereConditionHoldsAndYElsewhere) {
  for (DataType dtype : {DataType::kFloat32, DataType::kFloat64, DataType::kInt64}) {
    const Tensor c = bool_tensor({1, 0, 0, 1}, {2, 2});
    const Tensor x = make_tensor({1, 2, 3, 4}, {2, 2}, dtype);
    const Tensor y = make_tensor({-1, -2, -3, -4}, {2, 2}, dtype);
    const Tensor out = F::where(c, x, y);
    EXPECT_EQ(out.dtype(), dtype);
    expect_close(out, {1, -2, -3, 4}, {2, 2}, 0, 0);
  }
}

TEST(Where, BroadcastsAllThreeOperands) {
  // condition (3, 1), x (4,), y () -> (3, 4)
  const Tensor c = bool_tensor({1, 0, 1}, {3, 1});
  const Tensor x = make_tensor({10, 20, 30, 40}, {4});
  const Tensor y = make_tensor({-1}, {});
  expect_close(F::where(c, x, y), {10, 20, 30, 40, -1, -1, -1, -1, 10, 20, 30, 40}, {3, 4}, 0, 0);
  // condition (1, 4), x (3, 1), y (3, 4)
  const Tensor c2 = bool_tensor({1, 0, 1, 0}, {1, 4});
  const Tensor x2 = make_tensor({1, 2, 3}, {3, 1});
  const Tensor y2 = random_tensor({3, 4}, DataType::kFloat32, 2);
  const std::vector<double> vy = values_of(y2);
  std::vector<double> expected;
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 4; ++j) expected.push_back(j % 2 == 0 ? i + 1.0 : vy[i * 4 + j]);
  }
  expect_close(F::where(c2, x2, y2), expected, {3, 4}, 0, 0);
}

TEST(Where, LargeBroadcastMatchesReference) {
  std::vector<double> vc = values_of(random_tensor({257, 1}, DataType::kFloat64, 3));
  for (double& v : vc) v = v > 0 ? 1.0 : 0.0;
  const Tensor cond = bool_tensor(vc, {257, 1});
  const Tensor x = random_tensor({257, 300}, DataType::kFloat64, 4);
  const Tensor y = random_tensor({300}, DataType::kFloat64, 5);
  const std::vector<double> vx = values_of(x), vy = values_of(y);
  std::vector<double> expected(257 * 300);
  for (int i = 0; i < 257; ++i) {
    for (int j = 0; j < 300; ++j) expected[i * 300 + j] = vc[i] != 0 ? vx[i * 300 + j] : vy[j];
  }
  expect_close(F::where(cond, x, y), expected, {257, 300}, 0, 0);
}

TEST(Where, PromotesMixedDtypes) {
  const Tensor c = bool_tensor({1, 0}, {2});
  const Tensor out = F::where(c, make_tensor({1, 2}, {2}, DataType::kInt64),
                              make_tensor({0.5, 0.25}, {2}, DataType::kFloat32));
  EXPECT_EQ(out.dtype(), DataType::kFloat32);
  expect_close(out, {1, 0.25}, {2}, 0, 0);
}

TEST(Where, GradientsMatchFiniteDifferencesWithBroadcasting) {
  const Tensor c = bool_tensor({1, 0, 1, 1, 0, 0}, {2, 3});
  expect_gradients_match(
      [&](const std::vector<Tensor>& in) { return std::vector{F::where(in[0], in[1], in[2])}; },
      {c, random_tensor({3}, DataType::kFloat64, 6), random_tensor({2, 1}, DataType::kFloat64, 7)});
  expect_gradients_match(
      [&](const std::vector<Tensor>& in) { return std::vector{F::where(in[0], in[1], in[2])}; },
      {c, random_tensor({2, 3}, DataType::kFloat64, 8),
       random_tensor({2, 3}, DataType::kFloat64, 9)});
}

TEST(Where, RejectsNonBoolConditionUnbroadcastableShapesAndMixedDtypes) {
  const Tensor x = make_tensor({1, 2}, {2});
  expect_error([&] { F::where(x, x, x); }, ErrorCode::kTypeError,
               "[where] condition must have dtype bool. However, got condition (2,) float32");
  const Tensor c = bool_tensor({1, 0, 1}, {3});
  expect_error([&] { F::where(c, x, x); }, ErrorCode::kInvalidArgument,
               "[where] the inputs must broadcast to one shape. However, got condition (3,) bool, "
               "x (2,) float32, y (2,) float32");
  const OpSchema& where = OpRegistry::global().find("where");
  expect_error(
      [&] {
        where.infer(NoParams{}, {{Shape{2}, DataType::kBool},
                                 {Shape{2}, DataType::kFloat32},
                                 {Shape{2}, DataType::kFloat64}});
      },
      ErrorCode::kTypeError, "[where] x and y must have one dtype");
}

TEST(WhereSbp, SplitsAxesThatEveryOperandSpansOrBroadcasts) {
  // condition (4, 1), x (6,), y (4, 6) -> out (4, 6)
  const std::vector<TensorMeta> in{{Shape{4, 1}, DataType::kBool},
                                   {Shape{6}, DataType::kFloat32},
                                   {Shape{4, 6}, DataType::kFloat32}};
  const std::vector<SbpSignature> expected{{{S(0), B(), S(0)}, {S(0)}},
                                           {{B(), S(0), S(1)}, {S(1)}},
                                           {{B(), B(), B()}, {B()}},
                                           {{B(), P(), P()}, {P()}}};
  EXPECT_EQ(signatures("where", NoParams{}, in), expected);
}

TEST(MaskedFill, WritesValueWhereMaskHoldsWithBroadcastMask) {
  for (DataType dtype : {DataType::kFloat32, DataType::kFloat64, DataType::kInt32}) {
    const Tensor x = make_tensor({1, 2, 3, 4, 5, 6}, {2, 3}, dtype);
    expect_close(F::masked_fill(x, bool_tensor({0, 1, 0, 1, 0, 0}, {2, 3}), 9), {1, 9, 3, 9, 5, 6},
                 {2, 3}, 0, 0);
    expect_close(F::masked_fill(x, bool_tensor({1, 0, 1}, {3}), -7), {-7, 2, -7, -7, 5, -7}, {2, 3},
                 0, 0);
    expect_close(F::masked_fill(x, bool_tensor({0, 1}, {2, 1}), 0), {1, 2, 3, 0, 0, 0}, {2, 3}, 0,
                 0);
  }
}

TEST(MaskedFill, GradientIsZeroWhereFilled) {
  const Tensor mask = bool_tensor({1, 0, 0}, {3});
  expect_gradients_match(
      [&](const std::vector<Tensor>& in) { return std::vector{F::masked_fill(in[0], in[1], 2.5)}; },
      {random_tensor({2, 3}, DataType::kFloat64, 10), mask});
  Tensor x = make_tensor({1, 2, 3}, {3}, DataType::kFloat64);
  x.set_requires_grad(true);
  backward({F::masked_fill(x, mask, 4.0)}, {make_tensor({5, 6, 7}, {3}, DataType::kFloat64)});
  expect_close(x.grad(), {0, 6, 7}, {3}, 0, 0);
}

TEST(MaskedFill, RejectsMaskThatDoesNotBroadcastToX) {
  const Tensor x = make_tensor({1, 2, 3}, {3});
  expect_error(
      [&] {
        F::masked_fill(x, bool_tensor({1, 0, 1, 1, 0, 0}, {2, 3}), 0);
      },
      ErrorCode::kInvalidArgument,
      "[masked_fill] mask must broadcast to the shape of x. However, got x (3,) float32, "
      "mask (2, 3) bool");
  expect_error(
      [&] {
        F::masked_fill(x, make_tensor({1, 0, 1}, {3}), 0);
      },
      ErrorCode::kTypeError, "[masked_fill] mask must have dtype bool");
}

TEST(MaskedFillSbp, PartialSumOnlyWhenFillingZeros) {
  const std::vector<TensorMeta> in{{Shape{4, 6}, DataType::kFloat32}, {Shape{6}, DataType::kBool}};
  std::vector<SbpSignature> expected{
      {{S(0), B()}, {S(0)}}, {{S(1), S(0)}, {S(1)}}, {{B(), B()}, {B()}}};
  EXPECT_EQ(signatures("masked_fill", MaskedFillParams{1.0}, in), expected);
  expected.push_back({{P(), B()}, {P()}});
  EXPECT_EQ(signatures("masked_fill", MaskedFillParams{0.0}, in), expected);
}

}  // namespace
}  // namespace ofl
