#include "oneflowlike/ops/softmax.h"

#include <cmath>
#include <string>

#include "oneflowlike/op.h"
#include "tests/cpp/ops/test_util.h"

namespace ofl {
namespace {

using testing::expect_close;
using testing::expect_gradients_match;
using testing::make_tensor;
using testing::random_tensor;
using testing::values_of;

// softmax (or log_softmax) of x along `axis` by plain loops over (outer, extent, inner).
std::vector<double> reference_softmax(const Tensor& x, int axis, bool log) {
  const Shape& s = x.shape();
  const int64_t outer = s.count(0, axis), extent = s[axis], inner = s.count(axis + 1, s.ndim());
  const std::vector<double> v = values_of(x);
  std::vector<double> out(v.size());
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      double max = -INFINITY, sum = 0;
      for (int64_t j = 0; j < extent; ++j) max = std::max(max, v[(o * extent + j) * inner + i]);
      for (int64_t j = 0; j < extent; ++j) sum += std::exp(v[(o * extent + j) * inner + i] - max);
      for (int64_t j = 0; j < extent; ++j) {
        const int64_t k = (o * extent + j) * inner + i;
        out[k] = log ? v[k] - max - std::log(sum) : std::exp(v[k] - max) / sum;
      }
    }
  }
  return out;
}

using testing::expect_error;

TEST(Softmax, RowsSumToOne) {
  const Tensor x = random_tensor({6, 10}, DataType::kFloat32, 1, -5, 5);
  const std::vector<double> y = values_of(functional::softmax(x));
  for (int r = 0; r < 6; ++r) {
    double sum = 0;
    for (int c = 0; c < 10; ++c) sum += y[r * 10 + c];
    EXPECT_NEAR(sum, 1.0, 1e-6);
  }
}

TEST(Softmax, EveryAxisMatchesReference) {
  for (DataType dtype : {DataType::kFloat32, DataType::kFloat64}) {
    const Tensor x = random_tensor({3, 4, 70}, dtype, 2, -3, 3);
    for (int axis = -3; axis < 3; ++axis) {
      const int a = axis < 0 ? axis + 3 : axis;
      expect_close(functional::softmax(x, axis), reference_softmax(x, a, false), x.shape());
      expect_close(functional::log_softmax(x, axis), reference_softmax(x, a, true), x.shape(), 1e-5,
                   1e-5);
    }
  }
}

TEST(Softmax, LargeLogitsStayFinite) {
  const Tensor x = make_tensor({1000, 1001, 1002, -1000}, {1, 4});
  expect_close(functional::softmax(x), reference_softmax(x, 1, false), Shape{1, 4});
  expect_close(functional::log_softmax(x), reference_softmax(x, 1, true), Shape{1, 4}, 1e-5, 1e-4);
}

TEST(Softmax, GradientsMatchFiniteDifferencesOnEveryAxis) {
  const Tensor x = random_tensor({2, 3, 4}, DataType::kFloat64, 3);
  for (int64_t axis : {0, 1, -1}) {
    expect_gradients_match(
        [&](const std::vector<Tensor>& in) {
          return std::vector<Tensor>{functional::softmax(in[0], axis)};
        },
        {x});
    expect_gradients_match(
        [&](const std::vector<Tensor>& in) {
          return std::vector<Tensor>{functional::log_softmax(in[0], axis)};
        },
        {x});
  }
}

TEST(Softmax, BackwardOpsAreDifferentiableToo) {
  const Tensor y = functional::softmax(random_tensor({3, 4}, DataType::kFloat64, 4), 0);
  const Tensor log_y = functional::log_softmax(random_tensor({3, 4}, DataType::kFloat64, 5));
  const Tensor dy = random_tensor({3, 4}, DataType::kFloat64, 6);
  expect_gradients_match(
      [](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{functional::softmax_grad(in[0], in[1], 0)};
      },
      {y, dy});
  expect_gradients_match(
      [](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{functional::log_softmax_grad(in[0], in[1])};
      },
      {log_y, dy});
}

TEST(Softmax, OutOfRangeAxisRaisesIndexError) {
  const Tensor x = random_tensor({2, 3}, DataType::kFloat32, 7);
  expect_error([&] { functional::softmax(x, 2); }, ErrorCode::kOutOfRange,
               "dimension out of range");
  expect_error([&] { functional::log_softmax(x, -3); }, ErrorCode::kOutOfRange, "[log_softmax]");
}

TEST(Softmax, IntegerInputAndMismatchedGradRaise) {
  expect_error(
      [] {
        functional::softmax(make_tensor({1, 2}, {2}, DataType::kInt64));
      },
      ErrorCode::kTypeError, "floating dtype");
  const Tensor y = random_tensor({2, 3}, DataType::kFloat32, 8);
  expect_error(
      [&] {
        functional::softmax_grad(y, random_tensor({3, 2}, DataType::kFloat32, 9));
      },
      ErrorCode::kInvalidArgument, "same shape");
}

TEST(Softmax, SbpSignaturesSplitEveryAxisButTheNormalisedOne) {
  const OpSchema& op = OpRegistry::global().find("softmax");
  const AnyParams params = SoftmaxParams{1};
  const std::vector<TensorMeta> metas{{Shape{2, 3, 4}, DataType::kFloat32}};
  std::vector<std::string> got;
  for (const auto& s : (*op.get<FSbpSignatures>())(InferContext(op, params, metas))) {
    got.push_back(s.to_string());
  }
  EXPECT_EQ(got, (std::vector<std::string>{"S(0) -> S(0)", "S(2) -> S(2)", "B -> B"}));

  const OpSchema& grad = OpRegistry::global().find("softmax_grad");
  const AnyParams last = SoftmaxParams{-1};
  const std::vector<TensorMeta> two{metas[0], metas[0]};
  std::vector<std::string> grad_sigs;
  for (const auto& s : (*grad.get<FSbpSignatures>())(InferContext(grad, last, two))) {
    grad_sigs.push_back(s.to_string());
  }
  EXPECT_EQ(grad_sigs, (std::vector<std::string>{"S(0) x S(0) -> S(0)", "S(1) x S(1) -> S(1)",
                                                 "B x P -> P", "B x B -> B"}));
}

}  // namespace
}  // namespace ofl
