#include "oneflowlike/ops/reduce.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>

#include "oneflowlike/autograd.h"
#include "oneflowlike/op.h"
#include "tests/cpp/ops/test_util.h"

namespace ofl {
namespace {

using testing::expect_close;
using testing::expect_error;
using testing::expect_gradients_match;
using testing::make_tensor;
using testing::random_tensor;
using testing::values_of;

enum class Kind { kSum, kMean, kMax, kMin };

// Reference over a 3-d tensor reducing any subset of axes.
std::vector<double> reference(const Tensor& x, const std::vector<bool>& red, Kind kind) {
  const Shape& s = x.shape();
  const std::vector<double> v = values_of(x);
  std::vector<int64_t> od(3);
  for (int d = 0; d < 3; ++d) od[d] = red[d] ? 1 : s[d];
  std::vector<double> out(od[0] * od[1] * od[2], kind == Kind::kMax   ? -INFINITY
                                                 : kind == Kind::kMin ? INFINITY
                                                                      : 0.0);
  for (int64_t i = 0; i < s[0]; ++i) {
    for (int64_t j = 0; j < s[1]; ++j) {
      for (int64_t k = 0; k < s[2]; ++k) {
        const int64_t o = ((red[0] ? 0 : i) * od[1] + (red[1] ? 0 : j)) * od[2] + (red[2] ? 0 : k);
        const double x_ijk = v[(i * s[1] + j) * s[2] + k];
        out[o] = kind == Kind::kMax   ? std::max(out[o], x_ijk)
                 : kind == Kind::kMin ? std::min(out[o], x_ijk)
                                      : out[o] + x_ijk;
      }
    }
  }
  if (kind == Kind::kMean) {
    const double n = static_cast<double>(s.numel()) / static_cast<double>(out.size());
    for (double& o : out) o /= n;
  }
  return out;
}

TEST(Reduce, EveryAxisSubsetMatchesTheReference) {
  for (const Shape& shape : {Shape{3, 4, 5}, Shape{1, 7, 1}, Shape{40, 30, 50}}) {
    Tensor x = random_tensor(shape, DataType::kFloat32, 11);
    for (int mask = 0; mask < 8; ++mask) {
      std::vector<bool> red = {bool(mask & 1), bool(mask & 2), bool(mask & 4)};
      std::vector<int64_t> axes;
      std::vector<int64_t> keep_dims;
      for (int d = 0; d < 3; ++d) {
        if (red[d]) axes.push_back(d);
        keep_dims.push_back(red[d] ? 1 : shape[d]);
      }
      if (axes.empty()) continue;
      const Shape keep(keep_dims);
      expect_close(functional::reduce_sum(x, axes, true), reference(x, red, Kind::kSum), keep, 1e-5,
                   1e-4);
      expect_close(functional::reduce_mean(x, axes, true), reference(x, red, Kind::kMean), keep);
      expect_close(functional::reduce_max(x, axes, true), reference(x, red, Kind::kMax), keep);
      expect_close(functional::reduce_min(x, axes, true), reference(x, red, Kind::kMin), keep);
    }
  }
}

// Note [Blocked sums]: long rows are summed in blocks spread over the threads, in an order
// fixed by the row's length alone, so one and two threads give the same bits; and the sum is
// that of the float values to double precision.
TEST(Reduce, LongRowSumsAreExactToFloatAndTheSameOnAnyThreadCount) {
  for (const Shape& shape : {Shape{1, 200003}, Shape{3, 70001}, Shape{2, 16384}}) {
    Tensor x = random_tensor(shape, DataType::kFloat32, 21);
    const std::vector<double> v = values_of(x);
    const int64_t cols = shape[1];
    std::vector<double> expected(shape[0], 0.0), mean(shape[0]);
    for (int64_t r = 0; r < shape[0]; ++r) {
      long double sum = 0;
      for (int64_t c = 0; c < cols; ++c) sum += v[r * cols + c];
      expected[r] = static_cast<double>(sum);
      mean[r] = expected[r] / static_cast<double>(cols);
    }
    const int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    const Tensor one = functional::reduce_sum(x, {1}, false);
    omp_set_num_threads(2);
    const Tensor two = functional::reduce_sum(x, {1}, false);
    omp_set_num_threads(threads);
    EXPECT_EQ(std::memcmp(one.raw_data(), two.raw_data(), one.nbytes()), 0) << shape.to_string();
    // Rounded once to float from a double sum: within half a float ulp of the exact sum.
    expect_close(one, expected, Shape{shape[0]}, 1e-7, 1e-7);
    expect_close(functional::reduce_mean(x, {1}, false), mean, Shape{shape[0]}, 1e-7, 1e-7);
  }
}

TEST(Reduce, EmptyAxesMeanAllAndKeepdimsControlsRank) {
  Tensor x = make_tensor({1, 2, 3, 4, 5, 6}, Shape{2, 3}, DataType::kInt64);
  Tensor all = functional::reduce_sum(x, {}, false);
  EXPECT_EQ(all.shape(), (Shape{}));
  EXPECT_EQ(all.item(), 21);
  EXPECT_EQ(functional::reduce_sum(x, {-1}, false).shape(), (Shape{2}));
  EXPECT_EQ(values_of(functional::reduce_max(x, {0}, false)), (std::vector<double>{4, 5, 6}));
}

TEST(Reduce, GradientsMatchFiniteDifferences) {
  Tensor x = random_tensor(Shape{3, 4, 2}, DataType::kFloat64, 12);
  for (const std::vector<int64_t>& axes : std::vector<std::vector<int64_t>>{{1}, {0, 2}, {}}) {
    for (bool keep : {false, true}) {
      expect_gradients_match(
          [&](const std::vector<Tensor>& v) {
            return std::vector<Tensor>{
                functional::reduce_sum(v[0], axes, keep), functional::reduce_mean(v[0], axes, keep),
                functional::reduce_max(v[0], axes, keep), functional::reduce_min(v[0], axes, keep)};
          },
          {x});
    }
  }
}

TEST(Reduce, MaxShareGradientAmongTies) {
  Tensor x = make_tensor({2, 2, 1}, Shape{3});
  x.set_requires_grad(true);
  backward({functional::reduce_max(x, {}, false)}, {});
  EXPECT_EQ(values_of(x.grad()), (std::vector<double>{0.5, 0.5, 0}));
}

TEST(Reduce, AScalarReducedOverItsDimZeroIsItself) {
  Tensor x = make_tensor({3}, Shape{});
  for (int64_t axis : {0, -1}) {
    EXPECT_EQ(functional::reduce_sum(x, {axis}, true).item(), 3);
    EXPECT_EQ(functional::reduce_min(x, {axis}, false).shape(), Shape{});
    EXPECT_EQ(functional::reduce_mean(x, {axis}, false).item(), 3);
    expect_gradients_match(
        [&](const std::vector<Tensor>& v) {
          return std::vector<Tensor>{functional::reduce_sum(v[0], {axis}, false),
                                     functional::reduce_max(v[0], {axis}, false)};
        },
        {make_tensor({2.5}, Shape{}, DataType::kFloat64)});
  }
}

// -max(-x) would overflow at an integer type's lowest value; reduce_min does not.
TEST(Reduce, MinReachesTheLowestIntegerAndKeepsNaN) {
  Tensor x = make_tensor({-128, 0, 127}, Shape{3}, DataType::kInt8);
  EXPECT_EQ(functional::reduce_min(x, {}, false).item(), -128);
  Tensor y = make_tensor({1, NAN, -2}, Shape{3});
  EXPECT_TRUE(std::isnan(functional::reduce_min(y, {}, false).item()));
  Tensor empty = Tensor::zeros(Shape{0, 2}, DataType::kFloat32);
  expect_error([&] { functional::reduce_min(empty, {0}, false); }, ErrorCode::kInvalidArgument,
               "[reduce_min] cannot reduce an empty axis (there is no minimum)");
}

TEST(Reduce, BadAxesAreIndexAndValueErrors) {
  Tensor x = make_tensor({1, 2}, Shape{2});
  try {
    functional::reduce_sum(x, {1}, false);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kOutOfRange);
    EXPECT_NE(std::string(e.what()).find("[reduce_sum] dimension out of range"), std::string::npos);
  }
  try {
    functional::reduce_sum(x, {0, -1}, false);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("appears twice"), std::string::npos);
  }
}

TEST(Reduce, SumOfSplitReducedAxisIsPartial) {
  const OpSchema& op = OpRegistry::global().find("reduce_sum");
  const std::vector<TensorMeta> in = {{Shape{4, 8}, DataType::kFloat32}};
  const AnyParams params = ReduceParams{{1}, false};
  std::vector<std::string> got;
  for (const auto& s : (*op.get<FSbpSignatures>())(InferContext(op, params, in))) {
    got.push_back(s.to_string());
  }
  EXPECT_EQ(got, (std::vector<std::string>{"S(0) -> S(0)", "S(1) -> P", "B -> B", "P -> P"}));
}

}  // namespace
}  // namespace ofl
