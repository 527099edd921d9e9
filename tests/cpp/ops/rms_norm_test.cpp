#include "oneflowlike/ops/rms_norm.h"

#include <cmath>
#include <string>

#include "oneflowlike/op.h"
#include "tests/cpp/ops/test_util.h"

namespace ofl {
namespace {

using testing::expect_close;
using testing::expect_error;
using testing::expect_gradients_match;
using testing::random_tensor;
using testing::values_of;

// RMS norm of x viewed as (rows, cols), by plain loops: {y, inv_rms}.
std::pair<std::vector<double>, std::vector<double>> reference_rms_norm(const Tensor& x,
                                                                       const Tensor& w,
                                                                       int64_t rows, double eps) {
  const std::vector<double> v = values_of(x), vw = values_of(w);
  const int64_t cols = static_cast<int64_t>(v.size()) / rows;
  std::vector<double> y, inv_rms;
  for (int64_t i = 0; i < rows; ++i) {
    double sq = 0;
    for (int64_t j = 0; j < cols; ++j) sq += v[i * cols + j] * v[i * cols + j] / cols;
    const double ir = 1 / std::sqrt(sq + eps);
    inv_rms.push_back(ir);
    for (int64_t j = 0; j < cols; ++j) y.push_back(v[i * cols + j] * ir * vw[j]);
  }
  return {y, inv_rms};
}

TEST(RmsNorm, OutputsAndStatisticsMatchReference) {
  for (DataType dtype : {DataType::kFloat32, DataType::kFloat64}) {
    const Tensor x = random_tensor({2, 3, 4, 5}, dtype, 1, -2, 3);
    for (int64_t begin : {-1, 2, 1}) {
      const int b = begin < 0 ? 3 : static_cast<int>(begin);
      const Shape param(std::vector<int64_t>(x.shape().dims().begin() + b, x.shape().dims().end()));
      const Shape stats(
          std::vector<int64_t>(x.shape().dims().begin(), x.shape().dims().begin() + b));
      const Tensor w = random_tensor(param, dtype, 2);
      const auto out = functional::rms_norm(x, w, begin, 1e-6);
      ASSERT_EQ(out.size(), 2u);
      const auto [y, inv_rms] = reference_rms_norm(x, w, stats.numel(), 1e-6);
      expect_close(out[0], y, x.shape(), 1e-5, 1e-5);
      expect_close(out[1], inv_rms, stats, 1e-5, 1e-6);
    }
  }
}

TEST(RmsNorm, GradientsOfInputAndWeightMatchFiniteDifferences) {
  for (int64_t begin : {-1, 1}) {
    const Tensor x = random_tensor({3, 2, 4}, DataType::kFloat64, 4);
    const Shape param = begin == -1 ? Shape{4} : Shape{2, 4};
    expect_gradients_match(
        [&](const std::vector<Tensor>& in) {
          return std::vector<Tensor>{functional::rms_norm(in[0], in[1], begin, 1e-5)[0]};
        },
        {x, random_tensor(param, DataType::kFloat64, 5)}, 1e-6, 1e-5);
  }
}

TEST(RmsNorm, ScalingARowLeavesItsOutputUnchanged) {
  // y depends on x only through x / rms(x): a row times 7 gives the same y (eps = 0).
  const Tensor x = random_tensor({3, 8}, DataType::kFloat64, 11);
  const Tensor w = random_tensor({8}, DataType::kFloat64, 12);
  std::vector<double> scaled = values_of(x);
  for (double& v : scaled) v *= 7.0;
  const auto a = functional::rms_norm(x, w, -1, 0.0);
  const auto b =
      functional::rms_norm(testing::make_tensor(scaled, {3, 8}, DataType::kFloat64), w, -1, 0.0);
  expect_close(b[0], values_of(a[0]), Shape{3, 8}, 1e-12, 1e-12);
}

TEST(RmsNorm, WrongWeightShapeAndDtypesRaise) {
  const Tensor x = random_tensor({2, 3, 4}, DataType::kFloat32, 1);
  expect_error([&] { functional::rms_norm(x, random_tensor({3}, DataType::kFloat32, 2)); },
               ErrorCode::kInvalidArgument,
               "[rms_norm] weight must be shaped like the normalised axes of x (4,)");
  expect_error([&] { functional::rms_norm(x, random_tensor({4}, DataType::kFloat64, 3)); },
               ErrorCode::kTypeError, "one floating dtype");
  expect_error([&] { functional::rms_norm(x, random_tensor({4}, DataType::kFloat32, 3), 3); },
               ErrorCode::kOutOfRange, "dimension out of range");
}

TEST(RmsNorm, SbpSignaturesSplitRowsAndTheParameterGradientSplitsColumns) {
  const OpSchema& op = OpRegistry::global().find("rms_norm");
  const std::vector<TensorMeta> metas{{Shape{2, 3, 4}, DataType::kFloat32},
                                      {Shape{4}, DataType::kFloat32}};
  std::vector<std::string> got;
  for (const auto& s :
       (*op.get<FSbpSignatures>())(InferContext(op, LayerNormParams{2, 1e-5}, metas))) {
    got.push_back(s.to_string());
  }
  EXPECT_EQ(got, (std::vector<std::string>{"S(0) x B -> S(0), S(0)", "S(1) x B -> S(1), S(1)",
                                           "B x B -> B, B"}));
  const OpSchema& pg = OpRegistry::global().find("rms_norm_param_grad");
  const std::vector<TensorMeta> three{{Shape{2, 4}, DataType::kFloat32},
                                      {Shape{2, 4}, DataType::kFloat32},
                                      {Shape{2}, DataType::kFloat32}};
  std::vector<std::string> pg_sigs;
  for (const auto& s :
       (*pg.get<FSbpSignatures>())(InferContext(pg, LayerNormParams{-1, 1e-5}, three))) {
    pg_sigs.push_back(s.to_string());
  }
  EXPECT_EQ(pg_sigs, (std::vector<std::string>{"S(0) x S(0) x S(0) -> P", "S(1) x S(1) x B -> S(0)",
                                               "P x B x B -> P", "B x B x B -> B"}));
}

}  // namespace
}  // namespace ofl
