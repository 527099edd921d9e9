#include "oneflowlike/ops/fused.h"

#include <gtest/gtest.h>

#include "oneflowlike/op.h"
#include "oneflowlike/ops/scalar.h"
#include "oneflowlike/ops/unary.h"
#include "tests/cpp/ops/test_util.h"

namespace ofl {
namespace {

using testing::expect_close;
using testing::random_tensor;
using testing::values_of;

TEST(FusedElementwise, ChainEqualsTheOpsOneByOne) {
  for (DataType dtype : {DataType::kFloat32, DataType::kFloat64}) {
    Tensor x = random_tensor(Shape{3, 1000}, dtype, 5, 0.1, 2.0);  // > one block, positive
    Tensor expected = functional::scalar_add(
        functional::gelu(functional::tanh(functional::scalar_mul(
                             functional::sqrt(functional::exp(functional::neg(x))), 0.5)),
                         "tanh"),
        1.0);
    expected = functional::scalar_pow(functional::sigmoid(functional::relu(expected)), 2.0);
    Tensor fused = functional::fused_elementwise(
        x, "neg,exp,sqrt,scalar_mul(0.5),tanh,gelu_tanh,scalar_add(1),relu,sigmoid,scalar_pow(2)");
    // The same loops' bits (Note [AVX-512 loops]: the fused steps run the copy the unary
    // kernels do).
    EXPECT_EQ(values_of(fused), values_of(expected));
  }
}

TEST(FusedElementwise, StepTextRoundTripsEveryFusableOp) {
  EXPECT_EQ(fused_step_text("gelu", GeluParams{"tanh"}), "gelu_tanh");
  EXPECT_EQ(fused_step_text("gelu", GeluParams{"none"}), "gelu");
  EXPECT_EQ(fused_step_text("scalar_mul", ScalarParams{0.1}), "scalar_mul(0.10000000000000001)");
  EXPECT_EQ(fused_step_text("matmul", NoParams{}), "");
  EXPECT_EQ(fused_step_text("scalar_rpow", ScalarParams{2}), "");
  const auto steps = parse_fused_steps(fused_step_text("scalar_mul", ScalarParams{0.1}));
  EXPECT_EQ(steps[0].scalar, 0.1);  // exact: no digits lost in the text
}

TEST(FusedElementwise, BadChainsAreValueErrorsNamingTheStep) {
  Tensor x = random_tensor(Shape{4}, DataType::kFloat32, 1);
  for (const char* bad : {"exp,frobnicate", "scalar_mul", "tanh(2)", "scalar_add(x)", ""}) {
    try {
      functional::fused_elementwise(x, bad);
      ADD_FAILURE() << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << bad;
      EXPECT_NE(std::string(e.what()).find("[fused_elementwise]"), std::string::npos);
    }
  }
}

TEST(FusedElementwise, PartialSumOnlyForLinearChains) {
  const OpSchema& op = OpRegistry::global().find("fused_elementwise");
  const std::vector<TensorMeta> in = {{Shape{2, 3}, DataType::kFloat32}};
  auto last = [&](const std::string& steps) {
    return (*op.get<FSbpSignatures>())(InferContext(op, FusedElementwiseParams{steps}, in))
        .back()
        .to_string();
  };
  EXPECT_EQ(last("neg,scalar_mul(3)"), "P -> P");
  EXPECT_EQ(last("scalar_mul(3),exp"), "B -> B");
}

}  // namespace
}  // namespace ofl
