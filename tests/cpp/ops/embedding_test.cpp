#include "oneflowlike/ops/embedding.h"

#include <gtest/gtest.h>

#include "oneflowlike/op.h"
#include "tests/cpp/ops/test_util.h"

namespace ofl::testing {

namespace {

using testing::expect_error;

// out[n, :] = weight[indices[n], :]
std::vector<double> gather_reference(const Tensor& weight, const std::vector<double>& indices) {
  const std::vector<double> w = values_of(weight);
  const int64_t dim = weight.shape()[1];
  std::vector<double> out;
  for (double index : indices) {
    for (int64_t c = 0; c < dim; ++c) out.push_back(w[static_cast<int64_t>(index) * dim + c]);
  }
  return out;
}

std::vector<double> scatter_reference(const Tensor& dy, const std::vector<double>& indices,
                                      int64_t rows) {
  const std::vector<double> g = values_of(dy);
  const int64_t dim = dy.shape()[dy.ndim() - 1];
  std::vector<double> out(rows * dim, 0.0);
  for (size_t n = 0; n < indices.size(); ++n) {
    for (int64_t c = 0; c < dim; ++c) {
      out[static_cast<int64_t>(indices[n]) * dim + c] += g[n * dim + c];
    }
  }
  return out;
}

}  // namespace

TEST(Embedding, GathersRowsForInt64AndInt32Indices) {
  const Tensor weight = random_tensor({5, 3}, DataType::kFloat32, 1);
  const std::vector<double> idx = {4, 0, 2, 2, 1, 4};
  for (DataType index_dtype : {DataType::kInt64, DataType::kInt32}) {
    const Tensor indices = make_tensor(idx, {2, 3}, index_dtype);
    const Tensor out = functional::embedding(weight, indices);
    EXPECT_EQ(out.dtype(), DataType::kFloat32);
    expect_close(out, gather_reference(weight, idx), {2, 3, 3});
  }
}

TEST(Embedding, ScalarIndexGivesOneRow) {
  const Tensor weight = random_tensor({4, 6}, DataType::kFloat64, 2);
  const Tensor out = functional::embedding(weight, make_tensor({3}, {}, DataType::kInt64));
  expect_close(out, gather_reference(weight, {3}), {6});
}

TEST(Embedding, LargeGatherMatchesReference) {
  const Tensor weight = random_tensor({50, 64}, DataType::kFloat32, 3);
  std::vector<double> idx(3000);
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<double>((i * 37) % 50);
  const Tensor out = functional::embedding(weight, make_tensor(idx, {3000}, DataType::kInt64));
  expect_close(out, gather_reference(weight, idx), {3000, 64});
}

TEST(Embedding, GradientScatterAddsRepeatedIndices) {
  const std::vector<double> idx = {1, 3, 1, 1, 0};
  const Tensor dy = random_tensor({5, 2}, DataType::kFloat64, 4);
  const Tensor dweight =
      functional::embedding_grad(dy, make_tensor(idx, {5}, DataType::kInt32), /*num_embeddings=*/4);
  expect_close(dweight, scatter_reference(dy, idx, 4), {4, 2}, 1e-12, 1e-12);
}

TEST(Embedding, LargeGradientIsDeterministicAndMatchesReference) {
  std::vector<double> idx(5000);
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<double>((i * 13) % 7);
  const Tensor indices = make_tensor(idx, {50, 100}, DataType::kInt64);
  const Tensor dy = random_tensor({50, 100, 40}, DataType::kFloat32, 5);
  const Tensor first = functional::embedding_grad(dy, indices, 7);
  expect_close(first, scatter_reference(dy, idx, 7), {7, 40}, 1e-4, 1e-4);
  const Tensor second = functional::embedding_grad(dy, indices, 7);
  EXPECT_EQ(values_of(first), values_of(second));
}

TEST(Embedding, WeightGradientMatchesFiniteDifferences) {
  const Tensor indices = make_tensor({2, 0, 2, 3, 2, 1}, {3, 2}, DataType::kInt64);
  expect_gradients_match(
      [&](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{functional::embedding(in[0], indices)};
      },
      {random_tensor({4, 3}, DataType::kFloat64, 6)});
}

TEST(Embedding, EmbeddingGradIsDifferentiableInDy) {
  const Tensor indices = make_tensor({2, 0, 2}, {3}, DataType::kInt64);
  expect_gradients_match(
      [&](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{functional::embedding_grad(in[0], indices, 4)};
      },
      {random_tensor({3, 2}, DataType::kFloat64, 7)});
}

TEST(Embedding, OutOfRangeIndexRaisesIndexError) {
  const Tensor weight = random_tensor({5, 3}, DataType::kFloat32, 8);
  expect_error(
      [&] {
        functional::embedding(weight, make_tensor({1, 5}, {2}, DataType::kInt64));
      },
      ErrorCode::kOutOfRange, "got index 5 at position 1");
  expect_error([&] { functional::embedding(weight, make_tensor({-1}, {1}, DataType::kInt32)); },
               ErrorCode::kOutOfRange, "num_embeddings = 5");
  expect_error(
      [&] {
        functional::embedding_grad(random_tensor({1, 3}, DataType::kFloat32, 9),
                                   make_tensor({7}, {1}, DataType::kInt64), 5);
      },
      ErrorCode::kOutOfRange, "got index 7");
}

TEST(Embedding, BadShapesAndDtypesRaise) {
  const Tensor indices = make_tensor({0, 1}, {2}, DataType::kInt64);
  expect_error([&] { functional::embedding(random_tensor({5}, DataType::kFloat32, 1), indices); },
               ErrorCode::kInvalidArgument, "weight must be 2-d");
  expect_error(
      [&] {
        functional::embedding(random_tensor({5, 2}, DataType::kFloat32, 1),
                              make_tensor({0, 1}, {2}, DataType::kFloat32));
      },
      ErrorCode::kTypeError, "indices must be int32 or int64");
  expect_error(
      [&] {
        functional::embedding(make_tensor({0, 1}, {1, 2}, DataType::kInt64), indices);
      },
      ErrorCode::kTypeError, "weight must be floating-point");
  expect_error(
      [&] {
        functional::embedding_grad(random_tensor({3, 2}, DataType::kFloat32, 1), indices, 4);
      },
      ErrorCode::kInvalidArgument, "dy must have the shape of indices plus one trailing axis");
}

TEST(Embedding, SbpSignaturesSplitIndicesOrTableColumns) {
  const OpSchema& op = OpRegistry::global().find("embedding");
  const AnyParams params = NoParams{};
  const std::vector<TensorMeta> metas = {{Shape{10, 4}, DataType::kFloat32},
                                         {Shape{2, 3}, DataType::kInt64}};
  const auto sigs = (*op.get<FSbpSignatures>())(InferContext(op, params, metas));
  std::vector<std::string> got;
  for (const auto& s : sigs) got.push_back(s.to_string());
  EXPECT_EQ(got, (std::vector<std::string>{"B x S(0) -> S(0)", "B x S(1) -> S(1)",
                                           "S(1) x B -> S(2)", "P x B -> P", "B x B -> B"}));
}

TEST(Embedding, EmbeddingGradSbpSplitsOfRowsGivePartialSums) {
  const OpSchema& op = OpRegistry::global().find("embedding_grad");
  const AnyParams params = EmbeddingGradParams{10};
  const std::vector<TensorMeta> metas = {{Shape{6, 4}, DataType::kFloat32},
                                         {Shape{6}, DataType::kInt64}};
  const auto sigs = (*op.get<FSbpSignatures>())(InferContext(op, params, metas));
  std::vector<std::string> got;
  for (const auto& s : sigs) got.push_back(s.to_string());
  EXPECT_EQ(got, (std::vector<std::string>{"S(0) x S(0) -> P", "S(1) x B -> S(1)", "P x B -> P",
                                           "B x B -> B"}));
}

}  // namespace ofl::testing
