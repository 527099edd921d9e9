#include "oneflowlike/ops/reshape.h"

#include <gtest/gtest.h>

#include "oneflowlike/op.h"
#include "tests/cpp/ops/test_util.h"

namespace ofl {
namespace {

using testing::expect_gradients_match;
using testing::make_tensor;
using testing::random_tensor;
using testing::values_of;

TEST(Reshape, IsAViewAndInfersMinusOne) {
  Tensor x = random_tensor(Shape{2, 3, 4}, DataType::kFloat32, 1);
  Tensor y = functional::reshape(x, Shape{-1, 4});
  EXPECT_EQ(y.shape(), (Shape{6, 4}));
  EXPECT_TRUE(y.shares_storage_with(x));
  EXPECT_EQ(values_of(y), values_of(x));
}

TEST(Reshape, BadShapesNameTheShapes) {
  Tensor x = random_tensor(Shape{2, 3}, DataType::kFloat32, 1);
  for (const Shape& bad : {Shape{4, -1}, Shape{-1, -1}, Shape{5}}) {
    try {
      functional::reshape(x, bad);
      ADD_FAILURE();
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find("[reshape]"), std::string::npos);
      EXPECT_NE(std::string(e.what()).find(bad.to_string()), std::string::npos);
    }
  }
}

TEST(Expand, BroadcastsAndSumsBack) {
  Tensor x = make_tensor({1, 2, 3}, Shape{3, 1});
  Tensor y = functional::expand(x, Shape{2, 3, 2});
  EXPECT_EQ(values_of(y), (std::vector<double>{1, 1, 2, 2, 3, 3, 1, 1, 2, 2, 3, 3}));
  EXPECT_EQ(functional::expand(x, Shape{-1, 4}).shape(), (Shape{3, 4}));
  EXPECT_THROW(functional::expand(x, Shape{4, 4}), Error);
  expect_gradients_match(
      [](const std::vector<Tensor>& v) {
        return std::vector<Tensor>{functional::expand(v[0], Shape{2, 3, 4}),
                                   functional::reshape(v[0], Shape{1, 3})};
      },
      {random_tensor(Shape{3, 1}, DataType::kFloat64, 2)});
}

TEST(Reshape, SplitsMapWhereTheFlatBufferIsCutAlike) {
  const OpSchema& op = OpRegistry::global().find("reshape");
  const std::vector<TensorMeta> in = {{Shape{4, 6, 8}, DataType::kFloat32}};
  std::vector<std::string> got;
  for (const auto& s :
       (*op.get<FSbpSignatures>())(InferContext(op, ReshapeParams{Shape{24, 8}}, in))) {
    got.push_back(s.to_string());
  }
  // (4, 6, 8) -> (24, 8): rows of axis 0 stay whole blocks of axis 0; axis 2 stays axis 1.
  EXPECT_EQ(got, (std::vector<std::string>{"S(0) -> S(0)", "S(2) -> S(1)", "B -> B", "P -> P"}));
}

}  // namespace
}  // namespace ofl
