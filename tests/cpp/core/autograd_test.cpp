#include "oneflowlike/autograd.h"

#include <gtest/gtest.h>

#include "oneflowlike/ops/elementwise.h"
#include "oneflowlike/ops/reduce.h"
#include "tests/cpp/ops/test_util.h"

namespace ofl {
namespace {

using testing::make_tensor;
using testing::values_of;

TEST(Autograd, AccumulatesThroughSharedSubexpressions) {
  // y = sum(x * x + x): dy/dx = 2x + 1, with x used three times.
  Tensor x = make_tensor({1, -2, 3}, Shape{3});
  x.set_requires_grad(true);
  Tensor y = functional::reduce_sum(functional::add(functional::mul(x, x), x), {}, false);
  backward({y}, {});
  EXPECT_EQ(values_of(x.grad()), (std::vector<double>{3, -3, 7}));
}

TEST(Autograd, GradientsAccumulateAcrossBackwardCalls) {
  Tensor x = make_tensor({1, 2}, Shape{2});
  x.set_requires_grad(true);
  for (int i = 0; i < 2; ++i) backward({functional::reduce_sum(x, {}, false)}, {});
  EXPECT_EQ(values_of(x.grad()), (std::vector<double>{2, 2}));
}

TEST(Autograd, HooksSeeSummedGradientsAndMayReplaceThem) {
  // Note [Gradient hooks]: y = x * x; loss = sum(y + x). x's hook sees 2x + 1 once (both
  // contributions summed); y's hook doubles dloss/dy, so x's gradient is 2 * 2x + 1.
  Tensor x = make_tensor({1, -2, 3}, Shape{3});
  x.set_requires_grad(true);
  std::vector<std::vector<double>> seen;
  register_grad_hook(x, [&seen](const Tensor& g) {
    seen.push_back(values_of(g));
    return Tensor();
  });
  Tensor y = functional::mul(x, x);
  register_grad_hook(y, [](const Tensor& g) { return functional::add(g, g); });
  const int64_t removed = register_grad_hook(y, [](const Tensor&) -> Tensor {
    ADD_FAILURE() << "a removed hook ran";
    return Tensor();
  });
  grad_hook_remover(y, removed)();
  retain_grad(y);
  EXPECT_TRUE(retains_grad(y));
  backward({functional::reduce_sum(functional::add(y, x), {}, false)}, {});
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0], (std::vector<double>{5, -7, 13}));
  EXPECT_EQ(values_of(x.grad()), (std::vector<double>{5, -7, 13}));
  EXPECT_EQ(values_of(y.grad()), (std::vector<double>{2, 2, 2}));
}

TEST(Autograd, CustomBackwardGetsOutputGradientsAndGivesInputGradients) {
  // Note [Custom backward]: y = x (computed outside autograd), with a gradient of 3 dy; the
  // second output reaches no loss and comes undefined.
  Tensor x = make_tensor({1, 2}, Shape{2});
  x.set_requires_grad(true);
  std::vector<Tensor> outputs = {make_tensor({1, 2}, Shape{2}), make_tensor({0, 0}, Shape{2})};
  int calls = 0;
  ASSERT_TRUE(record_function(
      {x}, outputs,
      [&calls](const std::vector<Tensor>& grads) {
        ++calls;
        EXPECT_FALSE(grads[1].defined());
        return std::vector<Tensor>{functional::add(functional::add(grads[0], grads[0]), grads[0])};
      },
      "Triple"));
  EXPECT_EQ(grad_fn_name(outputs[0]), "Triple");
  backward({functional::reduce_sum(functional::mul(outputs[0], outputs[0]), {}, false)}, {});
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(values_of(x.grad()), (std::vector<double>{6, 12}));
}

TEST(Autograd, GradOfInputsLeavesDotGradAlone) {
  // Note [Gradients of inputs]: z = sum(y * y) with y = x * x: dz/dy = 2y, dz/dx = 4x^3.
  Tensor x = make_tensor({1, 2}, Shape{2});
  x.set_requires_grad(true);
  Tensor y = functional::mul(x, x);
  Tensor z = functional::reduce_sum(functional::mul(y, y), {}, false);
  const std::vector<Tensor> g = grad({z}, {}, {x, y});
  EXPECT_EQ(values_of(g[0]), (std::vector<double>{4, 32}));
  EXPECT_EQ(values_of(g[1]), (std::vector<double>{2, 8}));
  EXPECT_FALSE(x.grad().defined());
}

TEST(Autograd, AChainOfManyOpsIsFreedAndDifferentiatedWithoutRecursion) {
  // Note [Long chains]: freeing 300,000 nodes in a row recursed once per node.
  Tensor x = make_tensor({1}, Shape{1});
  x.set_requires_grad(true);
  for (int round = 0; round < 2; ++round) {
    Tensor y = x;
    for (int i = 0; i < 300000; ++i) y = functional::add(y, y);
    if (round == 1) backward({functional::reduce_sum(y, {}, false)}, {});
  }  // the first chain goes without a backward, the second after one
  EXPECT_TRUE(x.grad().defined());
}

TEST(Autograd, NoGradRecordsNothing) {
  Tensor x = make_tensor({1, 2}, Shape{2});
  x.set_requires_grad(true);
  Tensor y;
  {
    NoGradGuard guard;
    y = functional::mul(x, x);
  }
  EXPECT_FALSE(y.requires_grad());
  EXPECT_TRUE(functional::mul(x, x).requires_grad());
}

TEST(Autograd, SecondBackwardWithoutRetainGraphIsAnError) {
  Tensor x = make_tensor({1, 2}, Shape{2});
  x.set_requires_grad(true);
  Tensor y = functional::reduce_sum(functional::mul(x, x), {}, false);
  backward({y}, {}, /*retain_graph=*/true);
  backward({y}, {});
  EXPECT_EQ(values_of(x.grad()), (std::vector<double>{4, 8}));
  try {
    backward({y}, {});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kFailedPrecondition);
    EXPECT_NE(std::string(e.what()).find("second time"), std::string::npos);
  }
}

TEST(Autograd, NonScalarRootNeedsAGradient) {
  Tensor x = make_tensor({1, 2}, Shape{2});
  x.set_requires_grad(true);
  Tensor y = functional::mul(x, x);
  EXPECT_THROW(backward({y}, {}), Error);
  backward({y}, {make_tensor({1, 10}, Shape{2})});
  EXPECT_EQ(values_of(x.grad()), (std::vector<double>{2, 40}));
  EXPECT_THROW(backward({make_tensor({1}, Shape{1})}, {}), Error);  // does not require grad
  try {
    backward({y}, {make_tensor({1, 10}, Shape{2}, DataType::kFloat64)});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kTypeError);
    EXPECT_NE(std::string(e.what()).find("output's dtype"), std::string::npos);
  }
}

TEST(Autograd, IntegerTensorsCannotRequireGrad) {
  Tensor i = make_tensor({1, 2}, Shape{2}, DataType::kInt64);
  EXPECT_THROW(i.set_requires_grad(true), Error);
}

}  // namespace
}  // namespace ofl
