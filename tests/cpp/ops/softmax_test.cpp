#include "oneflowlike/ops/softmax.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "oneflowlike/kernels/online_softmax.h"
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

// Note [Online softmax] is the CUDA kernels' math; these pin it down on the CPU.
double two_pass_log_sum_exp(const std::vector<double>& x) {
  double max = -INFINITY, sum = 0;
  for (double v : x) max = std::max(max, v);
  for (double v : x) sum += std::exp(v - max);
  return max + std::log(sum);
}

OnlineSoftmax<double> fold(const std::vector<double>& x, size_t begin, size_t end, size_t step) {
  OnlineSoftmax<double> state = OnlineSoftmax<double>::empty();
  for (size_t j = begin; j < end; j += step) state.add(x[j]);
  return state;
}

TEST(OnlineSoftmax, OnePassMatchesTheTwoPassFormula) {
  const std::vector<double> x = values_of(random_tensor({1000}, DataType::kFloat64, 11, -30, 30));
  EXPECT_NEAR(fold(x, 0, x.size(), 1).log_sum_exp(), two_pass_log_sum_exp(x), 1e-12);
  // Rising values rescale the sum at every step.
  std::vector<double> rising(200);
  for (size_t j = 0; j < rising.size(); ++j) rising[j] = 0.5 * static_cast<double>(j);
  EXPECT_NEAR(fold(rising, 0, rising.size(), 1).log_sum_exp(), two_pass_log_sum_exp(rising), 1e-12);
}

TEST(OnlineSoftmax, StridedPartsCombineInATreeAsAWarpDoes) {
  const std::vector<double> x = values_of(random_tensor({1001}, DataType::kFloat64, 12, -50, 50));
  // 32 lanes fold elements lane, lane + 32, ...; then pairs combine at distance 16, 8, ..., 1.
  std::vector<OnlineSoftmax<double>> lanes;
  for (size_t lane = 0; lane < 32; ++lane) lanes.push_back(fold(x, lane, x.size(), 32));
  for (size_t delta = 16; delta > 0; delta /= 2) {
    for (size_t lane = 0; lane < delta; ++lane) {
      lanes[lane] = OnlineSoftmax<double>::combine(lanes[lane], lanes[lane + delta]);
    }
  }
  EXPECT_NEAR(lanes[0].log_sum_exp(), two_pass_log_sum_exp(x), 1e-12);
  // More lanes than elements: the empty states change nothing.
  const std::vector<double> three{1.0, -2.0, 4.0};
  OnlineSoftmax<double> total = OnlineSoftmax<double>::empty();
  for (size_t lane = 0; lane < 32; ++lane) {
    total = OnlineSoftmax<double>::combine(total, fold(three, lane, three.size(), 32));
  }
  EXPECT_NEAR(total.log_sum_exp(), two_pass_log_sum_exp(three), 1e-15);
  EXPECT_EQ(total.max, 4.0);
}

TEST(OnlineSoftmax, NonFiniteRowsComeOutAsTheTwoPassFormulaGivesThem) {
  const double inf = INFINITY;
  // -inf terms add nothing, wherever they are.
  EXPECT_NEAR(fold({-inf, 1.0, -inf, 2.0}, 0, 4, 1).log_sum_exp(), two_pass_log_sum_exp({1.0, 2.0}),
              1e-15);
  EXPECT_NEAR(
      OnlineSoftmax<double>::combine(fold({-inf}, 0, 1, 1), fold({3.0}, 0, 1, 1)).log_sum_exp(),
      3.0, 1e-15);
  // Only -inf: an empty sum, whose softmax is 0/0.
  const OnlineSoftmax<double> none = fold({-inf, -inf}, 0, 2, 1);
  EXPECT_EQ(none.sum, 0.0);
  EXPECT_EQ(none.log_sum_exp(), -inf);
  // NaN or +inf anywhere: NaN, as exp(NaN) and exp(inf - inf) are.
  EXPECT_TRUE(std::isnan(fold({1.0, NAN, 2.0}, 0, 3, 1).sum));
  EXPECT_TRUE(std::isnan(fold({NAN, 1.0}, 0, 2, 1).sum));
  EXPECT_TRUE(std::isnan(fold({1.0, inf, 2.0}, 0, 3, 1).sum));
  EXPECT_TRUE(
      std::isnan(OnlineSoftmax<double>::combine(fold({inf}, 0, 1, 1), fold({1.0}, 0, 1, 1)).sum));
  EXPECT_TRUE(std::isnan(two_pass_log_sum_exp({1.0, inf})));
  // float, as the 16-bit dtypes compute.
  OnlineSoftmax<float> f = OnlineSoftmax<float>::empty();
  for (float v : {88.0f, 89.0f, -100.0f}) f.add(v);
  EXPECT_NEAR(f.log_sum_exp(), two_pass_log_sum_exp({88.0, 89.0, -100.0}), 1e-5);
}

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
