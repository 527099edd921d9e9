#include "oneflowlike/ops/sort.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "oneflowlike/op.h"
#include "tests/cpp/ops/test_util.h"

namespace ofl::testing {

namespace {

constexpr double kNan = std::numeric_limits<double>::quiet_NaN();

struct Ordered {
  std::vector<double> values, indices;
};

// The slow, obvious reference of sort/topk along dim 1 of a (rows, n) matrix: a stable sort of
// the positions, NaN last (first when descending), then the first k.
Ordered order_reference(const std::vector<double>& x, int64_t rows, int64_t n, int64_t k,
                        bool descending) {
  Ordered out;
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<int64_t> p(n);
    std::iota(p.begin(), p.end(), 0);
    const auto key = [&](int64_t i) { return x[r * n + i]; };
    const auto less = [&](double a, double b) {
      return (!std::isnan(a) && std::isnan(b)) || a < b;
    };
    std::stable_sort(p.begin(), p.end(), [&](int64_t a, int64_t b) {
      return descending ? less(key(b), key(a)) : less(key(a), key(b));
    });
    for (int64_t t = 0; t < k; ++t) {
      out.values.push_back(key(p[t]));
      out.indices.push_back(static_cast<double>(p[t]));
    }
  }
  return out;
}

// Compares with NaN equal to NaN.
void expect_same(const Tensor& t, const std::vector<double>& expected) {
  const std::vector<double> got = values_of(t);
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(expected[i])) {
      EXPECT_TRUE(std::isnan(got[i])) << "at " << i;
    } else {
      EXPECT_EQ(got[i], expected[i]) << "at " << i;
    }
  }
}

std::vector<std::string> signatures(const std::string& name, const AnyParams& params,
                                    const Shape& x) {
  const OpSchema& op = OpRegistry::global().find(name);
  const std::vector<TensorMeta> metas = {{x, DataType::kFloat32}};
  std::vector<std::string> got;
  for (const auto& s : (*op.get<FSbpSignatures>())(InferContext(op, params, metas))) {
    got.push_back(s.to_string());
  }
  return got;
}

// Values with ties and NaN: (3, 6).
const std::vector<double> kTies = {2, 1, 2, 5, 1, 5, 0, kNan, 3, kNan, 3, -1, 4, 4, 4, 4, 4, 4};

}  // namespace

TEST(MaxDim, ValuesAndFirstIndicesWithTiesAndNan) {
  const Tensor x = make_tensor(kTies, {3, 6}, DataType::kFloat32);
  const std::vector<Tensor> max = functional::max_dim(x, 1);
  expect_same(max[0], {5, kNan, 4});
  expect_same(max[1], {3, 1, 0});
  EXPECT_EQ(max[1].dtype(), DataType::kInt64);
  const std::vector<Tensor> min = functional::min_dim(x, -1, /*keepdim=*/true);
  EXPECT_EQ(min[0].shape(), (Shape{3, 1}));
  expect_same(min[0], {1, kNan, 4});
  expect_same(min[1], {1, 1, 0});
  expect_same(functional::argmax(x, 0), {2, 1, 2, 1, 2, 0});
  expect_same(functional::argmin(x, 0), {1, 1, 0, 1, 0, 1});
}

TEST(MaxDim, MiddleDimOfEveryDtype) {
  const Tensor wide = random_tensor({3, 7, 5}, DataType::kFloat64, 1, -50, 50);
  for (DataType dtype : {DataType::kFloat32, DataType::kFloat64, DataType::kBFloat16,
                         DataType::kFloat16, DataType::kInt32, DataType::kInt64}) {
    const std::vector<double> v = values_of(wide);
    const Tensor x = make_tensor(v, {3, 7, 5}, dtype);
    const std::vector<double> xv = values_of(x);  // rounded to dtype
    std::vector<double> values, indices;
    for (int o = 0; o < 3; ++o) {
      for (int i = 0; i < 5; ++i) {
        int best = 0;
        for (int t = 1; t < 7; ++t) {
          if (xv[(o * 7 + t) * 5 + i] > xv[(o * 7 + best) * 5 + i]) best = t;
        }
        values.push_back(xv[(o * 7 + best) * 5 + i]);
        indices.push_back(best);
      }
    }
    const std::vector<Tensor> out = functional::max_dim(x, 1);
    EXPECT_EQ(out[0].dtype(), dtype);
    expect_same(out[0], values);
    expect_same(out[1], indices);
  }
}

TEST(Sort, IsStableInBothDirectionsWithNanLargest) {
  const Tensor x = make_tensor(kTies, {3, 6}, DataType::kFloat64);
  for (bool descending : {false, true}) {
    const Ordered ref = order_reference(kTies, 3, 6, 6, descending);
    const std::vector<Tensor> out = functional::sort(x, 1, descending);
    expect_same(out[0], ref.values);
    expect_same(out[1], ref.indices);
    expect_same(functional::argsort(x, -1, descending), ref.indices);
  }
}

TEST(Sort, LongLinesAlongAMiddleDimMatchTheReference) {
  const Tensor x = random_tensor({2, 300, 3}, DataType::kFloat32, 2);
  const std::vector<double> xv = values_of(x);
  const std::vector<Tensor> out = functional::sort(x, 1, /*descending=*/true);
  for (int o = 0; o < 2; ++o) {
    for (int i = 0; i < 3; ++i) {
      std::vector<double> line;
      for (int t = 0; t < 300; ++t) line.push_back(xv[(o * 300 + t) * 3 + i]);
      const Ordered ref = order_reference(line, 1, 300, 300, true);
      const std::vector<double> got = values_of(out[0]), idx = values_of(out[1]);
      for (int t = 0; t < 300; ++t) {
        EXPECT_EQ(got[(o * 300 + t) * 3 + i], ref.values[t]);
        EXPECT_EQ(idx[(o * 300 + t) * 3 + i], ref.indices[t]);
      }
    }
  }
}

TEST(Topk, LargestAndSmallestListTiesByIndex) {
  const Tensor x = make_tensor(kTies, {3, 6}, DataType::kFloat32);
  for (bool largest : {true, false}) {
    const Ordered ref = order_reference(kTies, 3, 6, 4, largest);
    const std::vector<Tensor> out = functional::topk(x, 4, -1, largest);
    EXPECT_EQ(out[0].shape(), (Shape{3, 4}));
    expect_same(out[0], ref.values);
    expect_same(out[1], ref.indices);
  }
  EXPECT_EQ(functional::topk(x, 0, 1)[0].shape(), (Shape{3, 0}));
}

TEST(Topk, SixteenBitAndIntegerValuesComeBackExactly) {
  const std::vector<double> v = {3, -7, 11, 0.5, 11, 2};
  for (DataType dtype : {DataType::kBFloat16, DataType::kFloat16, DataType::kInt32}) {
    const Tensor x = make_tensor(v, {6}, dtype);
    const std::vector<double> xv = values_of(x);
    const Ordered ref = order_reference(xv, 1, 6, 3, true);
    const std::vector<Tensor> out = functional::topk(x, 3);
    EXPECT_EQ(out[0].dtype(), dtype);
    expect_same(out[0], ref.values);
    expect_same(out[1], ref.indices);
  }
}

TEST(SortOps, GradientsScatterToTheIndicesAndMatchFiniteDifferences) {
  const Tensor x = random_tensor({3, 4}, DataType::kFloat64, 3);
  const auto check = [&](const std::function<Tensor(const Tensor&)>& f) {
    expect_gradients_match(
        [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{f(in[0])}; }, {x});
  };
  check([](const Tensor& t) { return functional::max_dim(t, 1)[0]; });
  check([](const Tensor& t) { return functional::min_dim(t, 0, true)[0]; });
  check([](const Tensor& t) { return functional::topk(t, 2, 1)[0]; });
  check([](const Tensor& t) { return functional::topk(t, 2, 0, false)[0]; });
  check([](const Tensor& t) { return functional::sort(t, 0, true)[0]; });
  const Tensor scalar = make_tensor({1.5}, {}, DataType::kFloat64);
  expect_gradients_match(
      [&](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{functional::max_dim(in[0], 0)[0]};
      },
      {scalar});
}

TEST(SortOps, BadDimsKAndDtypesRaise) {
  const Tensor x = random_tensor({3, 4}, DataType::kFloat32, 4);
  expect_error([&] { functional::max_dim(x, 2); }, ErrorCode::kOutOfRange,
               "[max_dim] dimension out of range");
  expect_error_phrases(
      [&] { functional::topk(x, 5, 1); }, ErrorCode::kInvalidArgument,
      {"[topk] k must be in [0, 4] (the size of dim 1)", "got k = 5", "x (3, 4) float32"});
  expect_error([&] { functional::topk(x, -1, 1); }, ErrorCode::kInvalidArgument, "got k = -1");
  expect_error_phrases(
      [&] {
        functional::min_dim(random_tensor({3, 0}, DataType::kFloat32, 5), 1);
      },
      ErrorCode::kInvalidArgument, {"[min_dim] cannot reduce an empty dim", "x (3, 0) float32"});
  expect_error(
      [&] {
        functional::sort(make_tensor({1, 0}, {2}, DataType::kBool));
      },
      ErrorCode::kTypeError, "[sort] needs a floating-point or integer tensor");
}

TEST(SortOps, SbpSignaturesSplitEveryOtherAxis) {
  EXPECT_EQ(signatures("max_dim", DimReduceParams{1, false}, Shape{4, 5, 6}),
            (std::vector<std::string>{"S(0) -> S(0), S(0)", "S(2) -> S(1), S(1)", "B -> B, B"}));
  EXPECT_EQ(signatures("min_dim", DimReduceParams{1, true}, Shape{4, 5, 6}),
            (std::vector<std::string>{"S(0) -> S(0), S(0)", "S(2) -> S(2), S(2)", "B -> B, B"}));
  EXPECT_EQ(signatures("topk", TopkParams{2, -1, true, true}, Shape{4, 5}),
            (std::vector<std::string>{"S(0) -> S(0), S(0)", "B -> B, B"}));
  EXPECT_EQ(signatures("sort", SortParams{0, false, false}, Shape{4, 5}),
            (std::vector<std::string>{"S(1) -> S(1), S(1)", "B -> B, B"}));
}

}  // namespace ofl::testing
