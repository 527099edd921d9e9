#include "oneflowlike/ops/layer_norm.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <string>

#include "oneflowlike/op.h"
#include "tests/cpp/ops/test_util.h"

namespace ofl {
namespace {

using testing::expect_close;
using testing::expect_gradients_match;
using testing::random_tensor;
using testing::values_of;

struct Reference {
  std::vector<double> y, mean, inv_std;
};

// Layer norm of x viewed as (rows, cols), by plain loops.
Reference reference_layer_norm(const Tensor& x, const Tensor& w, const Tensor& b, int64_t rows,
                               double eps) {
  const std::vector<double> v = values_of(x), vw = values_of(w), vb = values_of(b);
  const int64_t cols = static_cast<int64_t>(v.size()) / rows;
  Reference r;
  for (int64_t i = 0; i < rows; ++i) {
    double mean = 0, var = 0;
    for (int64_t j = 0; j < cols; ++j) mean += v[i * cols + j] / cols;
    for (int64_t j = 0; j < cols; ++j) var += std::pow(v[i * cols + j] - mean, 2) / cols;
    const double inv_std = 1 / std::sqrt(var + eps);
    r.mean.push_back(mean);
    r.inv_std.push_back(inv_std);
    for (int64_t j = 0; j < cols; ++j) {
      r.y.push_back((v[i * cols + j] - mean) * inv_std * vw[j] + vb[j]);
    }
  }
  return r;
}

using testing::expect_error;

TEST(LayerNorm, OutputsAndStatisticsMatchReference) {
  for (DataType dtype : {DataType::kFloat32, DataType::kFloat64}) {
    const Tensor x = random_tensor({2, 3, 4, 5}, dtype, 1, -2, 3);
    for (int64_t begin : {-1, 2, 1}) {
      const int b = begin < 0 ? 3 : static_cast<int>(begin);
      const Shape param(std::vector<int64_t>(x.shape().dims().begin() + b, x.shape().dims().end()));
      const Shape stats(
          std::vector<int64_t>(x.shape().dims().begin(), x.shape().dims().begin() + b));
      const Tensor w = random_tensor(param, dtype, 2);
      const Tensor bias = random_tensor(param, dtype, 3);
      const auto out = functional::layer_norm(x, w, bias, begin, 1e-5);
      ASSERT_EQ(out.size(), 3u);
      const Reference r = reference_layer_norm(x, w, bias, stats.numel(), 1e-5);
      expect_close(out[0], r.y, x.shape(), 1e-5, 1e-5);
      expect_close(out[1], r.mean, stats, 1e-5, 1e-6);
      expect_close(out[2], r.inv_std, stats, 1e-5, 1e-6);
    }
  }
}

TEST(LayerNorm, LargeOffsetDoesNotLoseVariance) {
  std::vector<double> v;
  for (int i = 0; i < 8; ++i) v.push_back(1e4 + (i % 2 ? 1.0 : -1.0));
  const Tensor x = testing::make_tensor(v, {1, 8});
  const Tensor w = testing::make_tensor(std::vector<double>(8, 1.0), {8});
  const Tensor b = testing::make_tensor(std::vector<double>(8, 0.0), {8});
  const auto out = functional::layer_norm(x, w, b, -1, 0.0);
  std::vector<double> expected;
  for (int i = 0; i < 8; ++i) expected.push_back(i % 2 ? 1.0 : -1.0);
  expect_close(out[0], expected, Shape{1, 8}, 1e-4, 1e-4);
}

TEST(LayerNorm, GradientsOfInputWeightAndBiasMatchFiniteDifferences) {
  for (int64_t begin : {-1, 1}) {
    const Tensor x = random_tensor({3, 2, 4}, DataType::kFloat64, 4);
    const Shape param = begin == -1 ? Shape{4} : Shape{2, 4};
    expect_gradients_match(
        [&](const std::vector<Tensor>& in) {
          return std::vector<Tensor>{functional::layer_norm(in[0], in[1], in[2], begin, 1e-5)[0]};
        },
        {x, random_tensor(param, DataType::kFloat64, 5),
         random_tensor(param, DataType::kFloat64, 6)},
        1e-6, 1e-5);
  }
}

TEST(LayerNorm, BackwardOpsMatchAutogradOfTheForward) {
  const Tensor x = random_tensor({5, 6}, DataType::kFloat64, 7);
  const Tensor w = random_tensor({6}, DataType::kFloat64, 8);
  const Tensor b = random_tensor({6}, DataType::kFloat64, 9);
  const Tensor dy = random_tensor({5, 6}, DataType::kFloat64, 10);
  const auto out = functional::layer_norm(x, w, b);
  const Tensor dx = functional::layer_norm_grad(dy, x, out[1], out[2], w);
  const auto dparams = functional::layer_norm_param_grad(dy, x, out[1], out[2]);
  // dbias is the column sum of dy; dweight the column sum of dy * xhat.
  const std::vector<double> vdy = values_of(dy), vx = values_of(x), m = values_of(out[1]),
                            is = values_of(out[2]);
  std::vector<double> dw(6, 0.0), db(6, 0.0);
  for (int r = 0; r < 5; ++r) {
    for (int c = 0; c < 6; ++c) {
      dw[c] += vdy[r * 6 + c] * (vx[r * 6 + c] - m[r]) * is[r];
      db[c] += vdy[r * 6 + c];
    }
  }
  expect_close(dparams[0], dw, Shape{6}, 1e-10, 1e-10);
  expect_close(dparams[1], db, Shape{6}, 1e-10, 1e-10);
  // The rows of dx are orthogonal to ones (the mean is removed) for any dy.
  const std::vector<double> vdx = values_of(dx);
  for (int r = 0; r < 5; ++r) {
    double sum = 0;
    for (int c = 0; c < 6; ++c) sum += vdx[r * 6 + c];
    EXPECT_NEAR(sum, 0.0, 1e-10);
  }
}

// The parameter gradients of many rows are summed in row blocks over the threads, in an order
// fixed by the shape: the same bits on 1 and 2 threads, and the column sums of a reference.
TEST(LayerNorm, ParameterGradientsOfManyRowsAreTheSameOnAnyThreadCount) {
  const int64_t rows = 1000, cols = 48;
  const Tensor x = random_tensor({rows, cols}, DataType::kFloat32, 17);
  const Tensor w = random_tensor({cols}, DataType::kFloat32, 18);
  const Tensor b = random_tensor({cols}, DataType::kFloat32, 19);
  const Tensor dy = random_tensor({rows, cols}, DataType::kFloat32, 20);
  const auto out = functional::layer_norm(x, w, b);
  const int threads = omp_get_max_threads();
  std::vector<std::vector<double>> runs;
  for (const int t : {1, 2}) {
    omp_set_num_threads(t);
    for (const Tensor& g : functional::layer_norm_param_grad(dy, x, out[1], out[2])) {
      runs.push_back(values_of(g));
    }
  }
  omp_set_num_threads(threads);
  EXPECT_EQ(runs[0], runs[2]);  // dweight
  EXPECT_EQ(runs[1], runs[3]);  // dbias
  const std::vector<double> vdy = values_of(dy), vx = values_of(x), m = values_of(out[1]),
                            is = values_of(out[2]);
  std::vector<double> dw(cols, 0.0), db(cols, 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      dw[c] += vdy[r * cols + c] * static_cast<float>((vx[r * cols + c] - m[r]) * is[r]);
      db[c] += vdy[r * cols + c];
    }
  }
  const Tensor dparams0 = functional::layer_norm_param_grad(dy, x, out[1], out[2])[0];
  expect_close(dparams0, dw, Shape{cols}, 1e-5, 1e-5);
  expect_close(functional::layer_norm_param_grad(dy, x, out[1], out[2])[1], db, Shape{cols}, 1e-5,
               1e-5);
}

TEST(LayerNorm, WrongWeightShapeRaisesValueError) {
  const Tensor x = random_tensor({2, 3, 4}, DataType::kFloat32, 1);
  const Tensor w = random_tensor({3}, DataType::kFloat32, 2);
  const Tensor b = random_tensor({4}, DataType::kFloat32, 3);
  expect_error([&] { functional::layer_norm(x, w, b); }, ErrorCode::kInvalidArgument,
               "weight must be shaped like the normalised axes of x (4,)");
}

TEST(LayerNorm, BadAxisAndDtypesRaise) {
  const Tensor x = random_tensor({2, 4}, DataType::kFloat32, 1);
  const Tensor w = random_tensor({4}, DataType::kFloat32, 2);
  expect_error([&] { functional::layer_norm(x, w, w, 2); }, ErrorCode::kOutOfRange,
               "dimension out of range");
  expect_error([&] { functional::layer_norm(x, random_tensor({4}, DataType::kFloat64, 3), w); },
               ErrorCode::kTypeError, "one floating dtype");
}

TEST(LayerNorm, SbpSignaturesSplitLeadingAxesOnly) {
  const OpSchema& op = OpRegistry::global().find("layer_norm");
  const AnyParams params = LayerNormParams{2, 1e-5};
  const std::vector<TensorMeta> metas{{Shape{2, 3, 4}, DataType::kFloat32},
                                      {Shape{4}, DataType::kFloat32},
                                      {Shape{4}, DataType::kFloat32}};
  std::vector<std::string> got;
  for (const auto& s : (*op.get<FSbpSignatures>())(InferContext(op, params, metas))) {
    got.push_back(s.to_string());
  }
  EXPECT_EQ(got,
            (std::vector<std::string>{"S(0) x B x B -> S(0), S(0), S(0)",
                                      "S(1) x B x B -> S(1), S(1), S(1)", "B x B x B -> B, B, B"}));

  const OpSchema& pg = OpRegistry::global().find("layer_norm_param_grad");
  const AnyParams last = LayerNormParams{-1, 1e-5};
  const std::vector<TensorMeta> four{{Shape{2, 4}, DataType::kFloat32},
                                     {Shape{2, 4}, DataType::kFloat32},
                                     {Shape{2}, DataType::kFloat32},
                                     {Shape{2}, DataType::kFloat32}};
  std::vector<std::string> pg_sigs;
  for (const auto& s : (*pg.get<FSbpSignatures>())(InferContext(pg, last, four))) {
    pg_sigs.push_back(s.to_string());
  }
  EXPECT_EQ(pg_sigs, (std::vector<std::string>{"S(0) x S(0) x S(0) x S(0) -> P, P",
                                               "S(1) x S(1) x B x B -> S(0), S(0)",
                                               "P x B x B x B -> P, P", "B x B x B x B -> B, B"}));
}

}  // namespace
}  // namespace ofl
