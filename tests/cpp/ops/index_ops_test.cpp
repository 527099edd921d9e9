#include "oneflowlike/ops/index_ops.h"

#include <gtest/gtest.h>

#include "oneflowlike/op.h"
#include "tests/cpp/ops/test_util.h"

namespace ofl::testing {

namespace {

// Row-major coordinates of element e of `shape`.
std::vector<int64_t> coordinates(int64_t e, const Shape& shape) {
  std::vector<int64_t> c(shape.ndim());
  for (int a = shape.ndim() - 1; a >= 0; --a) {
    c[a] = e % shape[a];
    e /= shape[a];
  }
  return c;
}

int64_t offset(const std::vector<int64_t>& c, const Shape& shape) {
  int64_t off = 0;
  for (int a = 0; a < shape.ndim(); ++a) off = off * shape[a] + c[a];
  return off;
}

// The slow, obvious torch.gather.
std::vector<double> gather_reference(const Tensor& x, int dim, const Tensor& index) {
  const std::vector<double> xv = values_of(x), iv = values_of(index);
  std::vector<double> out(iv.size());
  for (size_t e = 0; e < iv.size(); ++e) {
    std::vector<int64_t> c = coordinates(static_cast<int64_t>(e), index.shape());
    c[dim] = static_cast<int64_t>(iv[e]);
    out[e] = xv[offset(c, x.shape())];
  }
  return out;
}

std::vector<double> gather_grad_reference(const Tensor& dy, int dim, const Tensor& index,
                                          const Shape& x) {
  const std::vector<double> g = values_of(dy), iv = values_of(index);
  std::vector<double> out(x.numel(), 0.0);
  for (size_t e = 0; e < iv.size(); ++e) {
    std::vector<int64_t> c = coordinates(static_cast<int64_t>(e), index.shape());
    c[dim] = static_cast<int64_t>(iv[e]);
    out[offset(c, x)] += g[e];
  }
  return out;
}

std::vector<double> index_select_reference(const Tensor& x, int dim,
                                           const std::vector<double>& index, Shape* out_shape) {
  const std::vector<double> xv = values_of(x);
  std::vector<int64_t> dims = x.shape().dims();
  dims[dim] = static_cast<int64_t>(index.size());
  *out_shape = Shape(dims);
  std::vector<double> out(out_shape->numel());
  for (int64_t e = 0; e < out_shape->numel(); ++e) {
    std::vector<int64_t> c = coordinates(e, *out_shape);
    c[dim] = static_cast<int64_t>(index[c[dim]]);
    out[e] = xv[offset(c, x.shape())];
  }
  return out;
}

std::vector<std::string> signatures(const std::string& name, const AnyParams& params,
                                    const std::vector<TensorMeta>& metas) {
  const OpSchema& op = OpRegistry::global().find(name);
  std::vector<std::string> got;
  for (const auto& s : (*op.get<FSbpSignatures>())(InferContext(op, params, metas))) {
    got.push_back(s.to_string());
  }
  return got;
}

}  // namespace

TEST(Gather, MatchesTheReferenceAlongEveryDimWithANarrowerIndex) {
  const Tensor x = random_tensor({4, 5, 6}, DataType::kFloat32, 1);
  for (int dim = 0; dim < 3; ++dim) {
    const Shape index_shape{3, 4, 5};
    std::vector<double> idx(index_shape.numel());
    for (size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<double>((i * 7) % x.shape()[dim]);
    for (DataType index_dtype : {DataType::kInt64, DataType::kInt32}) {
      const Tensor index = make_tensor(idx, index_shape, index_dtype);
      const Tensor out = functional::gather(x, dim, index);
      expect_close(out, gather_reference(x, dim, index), index_shape, 0, 0);
    }
  }
}

TEST(Gather, NegativeDimAndZeroDimTensors) {
  const Tensor x = random_tensor({3, 4}, DataType::kFloat64, 2);
  const Tensor index = make_tensor({3, 0, 1, 1, 2, 2}, {3, 2}, DataType::kInt64);
  expect_close(functional::gather(x, -1, index), gather_reference(x, 1, index), {3, 2}, 0, 0);
  const Tensor scalar = make_tensor({2.5}, {}, DataType::kFloat32);
  expect_close(functional::gather(scalar, 0, make_tensor({0}, {}, DataType::kInt64)), {2.5}, {});
}

TEST(Gather, GradientScatterAddsRepeatedIndicesDeterministically) {
  const Shape x{6, 50, 3};
  const Shape index_shape{5, 400, 3};
  std::vector<double> idx(index_shape.numel());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<double>((i * 13) % 50);
  const Tensor index = make_tensor(idx, index_shape, DataType::kInt64);
  const Tensor dy = random_tensor(index_shape, DataType::kFloat32, 3);
  const Tensor first = functional::gather_grad(dy, index, 1, x);
  expect_close(first, gather_grad_reference(dy, 1, index, x), x, 1e-5, 1e-5);
  EXPECT_EQ(values_of(first), values_of(functional::gather_grad(dy, index, 1, x)));
}

TEST(Gather, GradientsMatchFiniteDifferences) {
  const Tensor index = make_tensor({0, 2, 2, 1, 0, 0}, {2, 3}, DataType::kInt64);
  expect_gradients_match(
      [&](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{functional::gather(in[0], 1, index)};
      },
      {random_tensor({3, 3}, DataType::kFloat64, 4)});
  expect_gradients_match(
      [&](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{functional::gather_grad(in[0], index, 1, Shape{3, 4})};
      },
      {random_tensor({2, 3}, DataType::kFloat64, 5)});
}

TEST(IndexSelect, MatchesTheReferenceAlongEveryDim) {
  const Tensor x = random_tensor({4, 5, 6}, DataType::kFloat32, 6);
  const std::vector<double> idx = {3, 0, 3, 1, 2, 2, 0};
  for (int dim = 0; dim < 3; ++dim) {
    for (DataType index_dtype : {DataType::kInt64, DataType::kInt32}) {
      Shape shape;
      const std::vector<double> expected = index_select_reference(x, dim, idx, &shape);
      const Tensor out = functional::index_select(x, dim, make_tensor(idx, {7}, index_dtype));
      expect_close(out, expected, shape, 0, 0);
    }
  }
}

TEST(IndexSelect, MovesEveryDtypeExactly) {
  const std::vector<double> values = {1, -2, 3, 4, 0, 7};
  const Tensor index = make_tensor({1, 1, 0}, {3}, DataType::kInt64);
  for (DataType dtype : {DataType::kBFloat16, DataType::kFloat16, DataType::kInt32,
                         DataType::kInt64, DataType::kFloat64}) {
    const Tensor x = make_tensor(values, {2, 3}, dtype);
    const Tensor out = functional::index_select(x, 0, index);
    EXPECT_EQ(out.dtype(), dtype);
    expect_close(out, {4, 0, 7, 4, 0, 7, 1, -2, 3}, {3, 3}, 0, 0);
    expect_close(functional::gather(x, 1, make_tensor({2, 0, 1, 1}, {2, 2}, DataType::kInt32)),
                 {3, 1, 0, 0}, {2, 2}, 0, 0);
  }
}

TEST(IndexSelect, GradientSumsRepeatedSlicesAndMatchesFiniteDifferences) {
  const Tensor index = make_tensor({2, 0, 2}, {3}, DataType::kInt64);
  const Tensor dy = make_tensor({1, 2, 3, 4, 5, 6}, {2, 3}, DataType::kFloat64);
  expect_close(functional::index_select_grad(dy, index, 1, Shape{2, 4}), {2, 0, 4, 0, 5, 0, 10, 0},
               {2, 4}, 0, 0);
  expect_gradients_match(
      [&](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{functional::index_select(in[0], 1, index)};
      },
      {random_tensor({2, 3, 2}, DataType::kFloat64, 7)});
}

TEST(IndexOps, SixteenBitGradientsSumInFloat32AndRoundOnce) {
  // 256 + 1 + 1 rounds to 256 in bfloat16 step by step, and to 258 summed in float32.
  const Tensor dy = make_tensor({256, 1, 1}, {3}, DataType::kBFloat16);
  const Tensor index = make_tensor({0, 0, 0}, {3}, DataType::kInt64);
  expect_close(functional::index_select_grad(dy, index, 0, Shape{2}), {258, 0}, {2}, 0, 0);
  expect_close(functional::gather_grad(dy, index, 0, Shape{2}), {258, 0}, {2}, 0, 0);
}

TEST(IndexOps, OutOfRangeIndexRaisesIndexError) {
  const Tensor x = random_tensor({2, 5}, DataType::kFloat32, 8);
  expect_error_phrases(
      [&] {
        functional::gather(x, 1, make_tensor({0, 5}, {1, 2}, DataType::kInt64));
      },
      ErrorCode::kOutOfRange, {"[gather]", "x.shape[dim] = 5", "got index 5 at position 1"});
  expect_error_phrases(
      [&] { functional::index_select(x, 0, make_tensor({-1}, {1}, DataType::kInt32)); },
      ErrorCode::kOutOfRange, {"[index_select]", "got index -1"});
  expect_error(
      [&] {
        functional::gather_grad(
            x, make_tensor({0, 0, 0, 0, 0, 9, 0, 0, 0, 0}, {2, 5}, DataType::kInt64), 0,
            Shape{3, 5});
      },
      ErrorCode::kOutOfRange, "got index 9");
}

TEST(IndexOps, BadShapesDimsAndDtypesRaiseNamingTheInputs) {
  const Tensor x = random_tensor({3, 4}, DataType::kFloat32, 9);
  const Tensor index = make_tensor({0, 1}, {2}, DataType::kInt64);
  expect_error_phrases(
      [&] { functional::gather(x, 0, index); }, ErrorCode::kInvalidArgument,
      {"[gather] index must have as many dims as x (2)", "x (3, 4) float32", "index (2,) int64"});
  expect_error_phrases(
      [&] {
        functional::gather(x, 0, make_tensor({0, 0, 0, 0, 0}, {1, 5}, DataType::kInt64));
      },
      ErrorCode::kInvalidArgument, {"index.shape[1] must be at most x.shape[1] = 4"});
  expect_error(
      [&] {
        functional::gather(x, 2, make_tensor({0}, {1, 1}, DataType::kInt64));
      },
      ErrorCode::kOutOfRange, "[gather] dimension out of range");
  expect_error(
      [&] {
        functional::index_select(x, 0, make_tensor({0, 1}, {2}, DataType::kFloat32));
      },
      ErrorCode::kTypeError, "[index_select] index must be int32 or int64");
  expect_error(
      [&] {
        functional::index_select(x, 0, make_tensor({0, 1}, {1, 2}, DataType::kInt64));
      },
      ErrorCode::kInvalidArgument, "[index_select] index must be 1-d");
  expect_error(
      [&] {
        functional::index_select_grad(x, index, 0, Shape{5, 5});
      },
      ErrorCode::kInvalidArgument, "[index_select_grad] dy must be shaped (2, 5)");
  expect_error(
      [&] {
        functional::gather_grad(make_tensor({1, 2}, {2}, DataType::kInt64), index, 0, Shape{3});
      },
      ErrorCode::kTypeError, "[gather_grad] dy must be floating-point");
}

TEST(IndexOps, SbpSignaturesFollowTheIndexedDim) {
  // Note [Index ops SBP]: x and index split together on axes of equal extent other than dim.
  EXPECT_EQ(signatures("gather", IndexParams{1},
                       {{Shape{5, 6, 4}, DataType::kFloat32}, {Shape{4, 5, 4}, DataType::kInt64}}),
            (std::vector<std::string>{"S(2) x S(2) -> S(2)", "B x S(1) -> S(1)", "P x B -> P",
                                      "B x B -> B"}));
  EXPECT_EQ(signatures("gather_grad", IndexGradParams{1, Shape{5, 6, 4}},
                       {{Shape{4, 5, 4}, DataType::kFloat32}, {Shape{4, 5, 4}, DataType::kInt64}}),
            (std::vector<std::string>{"S(2) x S(2) -> S(2)", "S(1) x S(1) -> P", "P x B -> P",
                                      "B x B -> B"}));
  EXPECT_EQ(signatures("index_select", IndexParams{-1},
                       {{Shape{4, 6}, DataType::kFloat32}, {Shape{3}, DataType::kInt64}}),
            (std::vector<std::string>{"S(0) x B -> S(0)", "B x S(0) -> S(1)", "P x B -> P",
                                      "B x B -> B"}));
  EXPECT_EQ(signatures("index_select_grad", IndexGradParams{0, Shape{4, 6}},
                       {{Shape{3, 6}, DataType::kFloat32}, {Shape{3}, DataType::kInt64}}),
            (std::vector<std::string>{"S(1) x B -> S(1)", "S(0) x S(0) -> P", "P x B -> P",
                                      "B x B -> B"}));
}

}  // namespace ofl::testing
