// Tensor-scalar ops against reference loops.

#include "oneflowlike/ops/scalar.h"

#include <cmath>
#include <functional>

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

std::vector<SbpSignature> signatures(std::string_view op, const std::vector<TensorMeta>& inputs) {
  const OpSchema& schema = OpRegistry::global().find(op);
  return (*schema.get<FSbpSignatures>())(InferContext(schema, ScalarParams{2.0}, inputs));
}

TEST(ScalarOps, MatchReferenceInFloat32AndFloat64) {
  for (DataType dtype : {DataType::kFloat32, DataType::kFloat64}) {
    const Tensor x = random_tensor({3, 4}, dtype, 1, 0.1, 2.0);
    expect_close(F::scalar_add(x, 1.5), testing::map_values(x, [](double v) { return v + 1.5; }),
                 {3, 4});
    expect_close(F::scalar_mul(x, -2.5), testing::map_values(x, [](double v) { return v * -2.5; }),
                 {3, 4});
    expect_close(F::scalar_rpow(x, 3.0),
                 testing::map_values(x, [](double v) { return std::pow(3.0, v); }), {3, 4});
    for (double s : {2.0, 3.0, 1.0, 0.5, -1.0, 0.0, 1.7, -2.3}) {
      SCOPED_TRACE(s);
      expect_close(F::scalar_pow(x, s),
                   testing::map_values(x, [s](double v) { return std::pow(v, s); }), {3, 4});
    }
  }
}

TEST(ScalarOps, AddAndMulKeepIntegerDtypesForIntegralScalars) {
  for (DataType dtype : {DataType::kInt32, DataType::kInt64}) {
    const Tensor x = make_tensor({-3, 0, 7}, {3}, dtype);
    const Tensor sum = F::scalar_add(x, 2.0);
    EXPECT_EQ(sum.dtype(), dtype);
    expect_close(sum, {-1, 2, 9}, {3}, 0, 0);
    const Tensor product = F::scalar_mul(x, -3.0);
    EXPECT_EQ(product.dtype(), dtype);
    expect_close(product, {9, 0, -21}, {3}, 0, 0);
  }
}

TEST(ScalarOps, IntegerInputMeetsFractionalScalarAsFloat32) {
  const Tensor x = make_tensor({1, 2, 3}, {3}, DataType::kInt64);
  const Tensor sum = F::scalar_add(x, 0.5);
  EXPECT_EQ(sum.dtype(), DataType::kFloat32);
  expect_close(sum, {1.5, 2.5, 3.5}, {3});
  const Tensor square = F::scalar_pow(x, 2.0);
  EXPECT_EQ(square.dtype(), DataType::kFloat32);
  expect_close(square, {1, 4, 9}, {3});
}

TEST(ScalarOps, GradientsMatchFiniteDifferences) {
  const Tensor x = random_tensor({2, 3}, DataType::kFloat64, 5, 0.2, 2.0);
  auto check = [&](std::function<Tensor(const Tensor&)> f) {
    expect_gradients_match([&](const std::vector<Tensor>& in) { return std::vector{f(in[0])}; },
                           {x});
  };
  check([](const Tensor& t) { return F::scalar_add(t, 3.0); });
  check([](const Tensor& t) { return F::scalar_mul(t, -1.5); });
  check([](const Tensor& t) { return F::scalar_rpow(t, 2.5); });
  for (double s : {2.0, 3.0, 1.0, 0.5, 0.0, -1.5}) {
    SCOPED_TRACE(s);
    check([s](const Tensor& t) { return F::scalar_pow(t, s); });
  }
}

TEST(ScalarOps, PowOfZeroExponentHasZeroGradientAtZero) {
  Tensor x = make_tensor({0.0, 2.0}, {2}, DataType::kFloat64);
  x.set_requires_grad(true);
  backward({F::scalar_pow(x, 0.0)}, {make_tensor({1, 1}, {2}, DataType::kFloat64)});
  expect_close(x.grad(), {0, 0}, {2}, 0, 0);
}

TEST(ScalarOps, RejectBoolInputAndIntegerPowerKernels) {
  const Tensor b = make_tensor({1, 0}, {2}, DataType::kBool);
  expect_error(
      [&] { F::scalar_add(b, 1.0); }, ErrorCode::kTypeError,
      "[scalar_add] the input must have a number dtype, not bool. However, got x (2,) bool");
  const OpSchema& pow = OpRegistry::global().find("scalar_pow");
  expect_error(
      [&] {
        pow.infer(ScalarParams{2.0}, {{Shape{2}, DataType::kInt32}});
      },
      ErrorCode::kTypeError, "[scalar_pow] the input must have a floating-point dtype");
}

TEST(ScalarSbp, OnlyScalarMulKeepsPartialSum) {
  const std::vector<TensorMeta> in{{Shape{4, 6}, DataType::kFloat32}};
  const std::vector<SbpSignature> elementwise{{{S(0)}, {S(0)}}, {{S(1)}, {S(1)}}, {{B()}, {B()}}};
  EXPECT_EQ(signatures("scalar_add", in), elementwise);
  EXPECT_EQ(signatures("scalar_pow", in), elementwise);
  EXPECT_EQ(signatures("scalar_rpow", in), elementwise);
  std::vector<SbpSignature> linear = elementwise;
  linear.push_back({{P()}, {P()}});
  EXPECT_EQ(signatures("scalar_mul", in), linear);
}

}  // namespace
}  // namespace ofl
