#include "oneflowlike/ops/scan.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "oneflowlike/op.h"
#include "tests/cpp/ops/test_util.h"

namespace ofl::testing {

namespace {

// The running sums of a (outer, extent, inner) view along its middle axis, in double, in the
// order Note [Running sums] names; each output rounded to dtype by make_tensor.
std::vector<double> running_sums(const std::vector<double>& x, int64_t outer, int64_t extent,
                                 int64_t inner, bool reverse) {
  std::vector<double> out(x.size());
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t c = 0; c < inner; ++c) {
      double sum = 0;
      for (int64_t s = 0; s < extent; ++s) {
        const int64_t at = (o * extent + (reverse ? extent - 1 - s : s)) * inner + c;
        sum += x[at];
        out[at] = sum;
      }
    }
  }
  return out;
}

void expect_bits_equal(const Tensor& got, const Tensor& want) {
  ASSERT_EQ(got.shape(), want.shape());
  ASSERT_EQ(got.dtype(), want.dtype());
  const std::vector<double> g = values_of(got), w = values_of(want);
  for (size_t i = 0; i < g.size(); ++i) EXPECT_EQ(g[i], w[i]) << "at " << i;
}

}  // namespace

TEST(Cumsum, EveryAxisAndDirectionOfEveryDtypeMatchesTheDoubleReference) {
  const Shape shape{3, 70, 5};  // 70 x 5: lines longer than one column block, and inner > 1
  for (DataType dtype : {DataType::kFloat32, DataType::kFloat64, DataType::kBFloat16,
                         DataType::kFloat16, DataType::kInt32, DataType::kInt64}) {
    const Tensor x = random_tensor(shape, dtype, 7, -20, 20);
    const std::vector<double> xv = values_of(x);  // rounded to dtype
    for (int dim : {0, 1, 2, -1}) {
      const int axis = dim < 0 ? dim + 3 : dim;
      const int64_t outer = shape.count(0, axis), inner = shape.count(axis + 1, 3);
      for (bool reverse : {false, true}) {
        const Tensor out = functional::cumsum(x, dim, reverse);
        // The reference rounded once from the double sum (16-bit dtypes through float32, as
        // the kernels store them).
        std::vector<double> ref = running_sums(xv, outer, shape[axis], inner, reverse);
        if (dtype == DataType::kBFloat16 || dtype == DataType::kFloat16) {
          for (double& r : ref) r = static_cast<float>(r);
        }
        SCOPED_TRACE(std::string(dtype_name(dtype)) + " dim " + std::to_string(dim) +
                     (reverse ? " reverse" : ""));
        expect_bits_equal(out, make_tensor(ref, shape, dtype));
      }
    }
  }
}

TEST(Cumsum, WideInnerAxisSpansSeveralColumnBlocksAndThreads) {
  // inner 200 > the kernel's 64-column block; 40 x 200 x 9 elements cross the parallel grain.
  const Tensor x = random_tensor({9, 40, 200}, DataType::kFloat32, 3);
  const std::vector<double> ref = running_sums(values_of(x), 9, 40, 200, false);
  expect_bits_equal(functional::cumsum(x, 1), make_tensor(ref, {9, 40, 200}));
}

TEST(Cumsum, ScalarsAndEmptyTensors) {
  const Tensor s = make_tensor({2.5}, Shape{}, DataType::kFloat32);
  EXPECT_EQ(values_of(functional::cumsum(s, 0)), std::vector<double>{2.5});
  EXPECT_EQ(functional::cumsum(random_tensor({0, 4}, DataType::kFloat32, 1), 1).shape(),
            (Shape{0, 4}));
}

TEST(Cumsum, GradientIsTheReverseRunningSum) {
  for (bool reverse : {false, true}) {
    const Tensor x = random_tensor({4, 6, 3}, DataType::kFloat64, 11);
    expect_gradients_match(
        [&](const std::vector<Tensor>& in) {
          return std::vector<Tensor>{functional::cumsum(in[0], 1, reverse)};
        },
        {x});
  }
}

TEST(Cumsum, RefusesBadDimsAndDtypes) {
  const Tensor x = random_tensor({3, 4}, DataType::kFloat32, 5);
  expect_error([&] { functional::cumsum(x, 2); }, ErrorCode::kOutOfRange,
               "[cumsum] dimension out of range");
  expect_error_phrases(
      [&] {
        functional::cumsum(make_tensor({1, 0}, {2}, DataType::kBool), 0);
      },
      ErrorCode::kTypeError, {"[cumsum] needs a floating-point, int32 or int64 tensor", "bool"});
}

TEST(Cumsum, SplitsEveryAxisButDimAndKeepsPartialSums) {
  const OpSchema& op = OpRegistry::global().find("cumsum");
  const std::vector<TensorMeta> metas = {{Shape{4, 5, 6}, DataType::kFloat32}};
  std::vector<std::string> got;
  for (const auto& s : (*op.get<FSbpSignatures>())(InferContext(op, CumsumParams{1}, metas))) {
    got.push_back(s.to_string());
  }
  EXPECT_EQ(got, (std::vector<std::string>{"S(0) -> S(0)", "S(2) -> S(2)", "B -> B", "P -> P"}));
}

}  // namespace ofl::testing
