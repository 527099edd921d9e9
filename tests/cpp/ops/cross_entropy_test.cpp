#include "oneflowlike/ops/cross_entropy.h"

#include <gtest/gtest.h>

#include <cmath>

#include "oneflowlike/op.h"
#include "tests/cpp/ops/test_util.h"

namespace ofl::testing {

namespace {

using testing::expect_error;

// The textbook formula: -log(softmax(x)[label]), one row at a time.
std::vector<double> loss_reference(const Tensor& logits, const std::vector<double>& labels) {
  const std::vector<double> x = values_of(logits);
  const int64_t c = logits.shape()[logits.ndim() - 1];
  std::vector<double> out;
  for (size_t r = 0; r < labels.size(); ++r) {
    double sum = 0;
    for (int64_t j = 0; j < c; ++j) sum += std::exp(x[r * c + j]);
    out.push_back(-std::log(std::exp(x[r * c + static_cast<int64_t>(labels[r])]) / sum));
  }
  return out;
}

std::vector<std::string> signature_strings(const std::string& name, const AnyParams& params,
                                           const std::vector<TensorMeta>& metas) {
  const OpSchema& op = OpRegistry::global().find(name);
  std::vector<std::string> got;
  for (const auto& s : (*op.get<FSbpSignatures>())(InferContext(op, params, metas))) {
    got.push_back(s.to_string());
  }
  return got;
}

}  // namespace

TEST(SparseSoftmaxCrossEntropy, MatchesNegativeLogSoftmaxAtTheLabel) {
  const Tensor logits = random_tensor({4, 5}, DataType::kFloat32, 1, -3, 3);
  const std::vector<double> labels = {0, 4, 2, 2};
  for (DataType label_dtype : {DataType::kInt64, DataType::kInt32}) {
    const Tensor loss =
        functional::sparse_softmax_cross_entropy(logits, make_tensor(labels, {4}, label_dtype));
    EXPECT_EQ(loss.dtype(), DataType::kFloat32);
    expect_close(loss, loss_reference(logits, labels), {4});
  }
}

TEST(SparseSoftmaxCrossEntropy, HandlesExtraSampleAxesAndOneRow) {
  const Tensor logits = random_tensor({2, 3, 4}, DataType::kFloat64, 2);
  const std::vector<double> labels = {3, 0, 1, 2, 2, 0};
  expect_close(functional::sparse_softmax_cross_entropy(
                   logits, make_tensor(labels, {2, 3}, DataType::kInt64)),
               loss_reference(logits, labels), {2, 3}, 1e-12, 1e-12);
  const Tensor row = random_tensor({6}, DataType::kFloat64, 3);
  expect_close(
      functional::sparse_softmax_cross_entropy(row, make_tensor({5}, {}, DataType::kInt64)),
      loss_reference(row, {5}), {}, 1e-12, 1e-12);
}

TEST(SparseSoftmaxCrossEntropy, StaysFiniteForHugeLogits) {
  const Tensor logits = make_tensor({1000, -1000, 0, 2000, 2001, 1999}, {2, 3});
  const Tensor loss =
      functional::sparse_softmax_cross_entropy(logits, make_tensor({1, 0}, {2}, DataType::kInt64));
  // Row 0: logsumexp = 1000, loss = 2000. Row 1: logsumexp = 2001 + log(1 + e^-1 + e^-2).
  expect_close(loss, {2000.0, 1.0 + std::log(1 + std::exp(-1.0) + std::exp(-2.0))}, {2}, 1e-5,
               1e-3);
}

TEST(SparseSoftmaxCrossEntropy, LargeBatchMatchesReference) {
  const Tensor logits = random_tensor({4000, 33}, DataType::kFloat32, 4, -4, 4);
  std::vector<double> labels(4000);
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<double>((i * 7) % 33);
  const Tensor loss = functional::sparse_softmax_cross_entropy(
      logits, make_tensor(labels, {4000}, DataType::kInt32));
  expect_close(loss, loss_reference(logits, labels), {4000}, 1e-5, 1e-5);
}

TEST(SparseSoftmaxCrossEntropy, GradIsSoftmaxMinusOneHotTimesDloss) {
  const Tensor logits = random_tensor({2, 3}, DataType::kFloat64, 5);
  const Tensor dloss = make_tensor({2.0, -0.5}, {2}, DataType::kFloat64);
  const Tensor dlogits = functional::sparse_softmax_cross_entropy_grad(
      logits, make_tensor({1, 2}, {2}, DataType::kInt64), dloss);
  const std::vector<double> x = values_of(logits);
  std::vector<double> expected;
  for (int r = 0; r < 2; ++r) {
    double sum = 0;
    for (int j = 0; j < 3; ++j) sum += std::exp(x[r * 3 + j]);
    for (int j = 0; j < 3; ++j) {
      const double onehot = (j == (r == 0 ? 1 : 2)) ? 1.0 : 0.0;
      expected.push_back((std::exp(x[r * 3 + j]) / sum - onehot) * (r == 0 ? 2.0 : -0.5));
    }
  }
  expect_close(dlogits, expected, {2, 3}, 1e-12, 1e-12);
}

TEST(SparseSoftmaxCrossEntropy, LogitsGradientMatchesFiniteDifferences) {
  const Tensor labels = make_tensor({0, 3, 1, 3, 2, 0}, {2, 3}, DataType::kInt64);
  expect_gradients_match(
      [&](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{functional::sparse_softmax_cross_entropy(in[0], labels)};
      },
      {random_tensor({2, 3, 4}, DataType::kFloat64, 6, -2, 2)});
}

TEST(SparseSoftmaxCrossEntropy, LabelOutOfRangeRaisesIndexError) {
  const Tensor logits = random_tensor({2, 3}, DataType::kFloat32, 7);
  expect_error(
      [&] {
        functional::sparse_softmax_cross_entropy(logits,
                                                 make_tensor({0, 3}, {2}, DataType::kInt64));
      },
      ErrorCode::kOutOfRange, "got label 3 at position 1");
  expect_error(
      [&] {
        functional::sparse_softmax_cross_entropy(logits,
                                                 make_tensor({-1, 0}, {2}, DataType::kInt32));
      },
      ErrorCode::kOutOfRange, "C = 3 classes");
}

TEST(SparseSoftmaxCrossEntropy, BadShapesAndDtypesRaise) {
  const Tensor logits = random_tensor({2, 3}, DataType::kFloat32, 8);
  expect_error(
      [&] {
        functional::sparse_softmax_cross_entropy(logits,
                                                 make_tensor({0, 1, 2}, {3}, DataType::kInt64));
      },
      ErrorCode::kInvalidArgument, "labels must have the shape of logits without the last");
  expect_error(
      [&] {
        functional::sparse_softmax_cross_entropy(logits,
                                                 make_tensor({0, 1}, {2}, DataType::kFloat32));
      },
      ErrorCode::kTypeError, "labels must be int32 or int64");
  expect_error(
      [&] {
        functional::sparse_softmax_cross_entropy(make_tensor({0, 1}, {1, 2}, DataType::kInt64),
                                                 make_tensor({0}, {1}, DataType::kInt64));
      },
      ErrorCode::kTypeError, "logits must be floating-point");
  expect_error(
      [&] {
        functional::sparse_softmax_cross_entropy_grad(logits,
                                                      make_tensor({0, 1}, {2}, DataType::kInt64),
                                                      random_tensor({3}, DataType::kFloat32, 1));
      },
      ErrorCode::kInvalidArgument, "dloss must have the shape of labels");
}

TEST(SparseSoftmaxCrossEntropy, SbpSplitsSampleAxesOnly) {
  const std::vector<TensorMeta> metas = {{Shape{4, 6, 10}, DataType::kFloat32},
                                         {Shape{4, 6}, DataType::kInt64}};
  EXPECT_EQ(signature_strings("sparse_softmax_cross_entropy", NoParams{}, metas),
            (std::vector<std::string>{"S(0) x S(0) -> S(0)", "S(1) x S(1) -> S(1)", "B x B -> B"}));
  const std::vector<TensorMeta> grad_metas = {{Shape{4, 10}, DataType::kFloat32},
                                              {Shape{4}, DataType::kInt64},
                                              {Shape{4}, DataType::kFloat32}};
  EXPECT_EQ(
      signature_strings("sparse_softmax_cross_entropy_grad", NoParams{}, grad_metas),
      (std::vector<std::string>{"S(0) x S(0) x S(0) -> S(0)", "B x B x P -> P", "B x B x B -> B"}));
}

}  // namespace ofl::testing
