#include <gtest/gtest.h>

#include "oneflowlike/eager.h"
#include "oneflowlike/op.h"
#include "oneflowlike/ops/reduce.h"
#include "tests/cpp/ops/test_util.h"

namespace ofl {
namespace {

struct ClampParams {
  double low = 0;
  double high = 1;
  OFL_PARAMS(ClampParams, low, high)
};

// A tag defined outside op.h: attributes are open for extension.
struct TFusableForTest {
  using type = bool;
};

template <class T>
struct ClampKernel {
  static void run(const KernelContext& ctx) {
    const auto& p = ctx.p<ClampParams>();
    const T* x = ctx.in(0).data<T>();
    T* y = ctx.out(0).data<T>();
    for (int64_t i = 0; i < ctx.in(0).numel(); ++i) {
      y[i] = std::min<T>(std::max<T>(x[i], p.low), p.high);
    }
  }
};

OFL_REGISTER_KERNEL("test_clamp", kCPU, ClampKernel, float);  // before the op: order is free
OFL_REGISTER_OP("test_clamp")
    .inputs({"x"})
    .outputs({"out"})
    .params<ClampParams>()
    .set<FInferMeta>([](const InferContext& ctx) {
      const auto& p = ctx.params<ClampParams>();
      OFL_CHECK(p.low <= p.high, "[test_clamp] low must not exceed high. However, got low=", p.low,
                ", high=", p.high, ".");
      return std::vector<TensorMeta>{ctx.input(0)};
    });

TEST(OpRegistry, ParamsPrintCompareAndHash) {
  const AnyParams a = ClampParams{0.5, 2};
  const AnyParams b = ClampParams{0.5, 2};
  const AnyParams c = ClampParams{0.5, 3};
  EXPECT_EQ(a.to_string(), "low=0.5, high=2");
  EXPECT_TRUE(a == b);
  EXPECT_FALSE(a == c);
  EXPECT_EQ(a.hash(), b.hash());
  EXPECT_NE(a.hash(), c.hash());
  EXPECT_EQ((AnyParams(ReduceParams{{0, 2}, true}).to_string()), "axes=[0, 2], keepdims=true");
  EXPECT_FALSE(a == AnyParams(NoParams{}));
}

TEST(OpRegistry, KernelRegisteredBeforeTheOpIsFound) {
  const OpSchema& op = OpRegistry::global().find("test_clamp");
  EXPECT_NE(op.find_kernel(DeviceType::kCPU, DataType::kFloat32), nullptr);
  EXPECT_EQ(op.find_kernel(DeviceType::kCPU, DataType::kFloat64), nullptr);
  Tensor x = testing::make_tensor({-1, 0.25, 3}, Shape{3});
  Tensor y = apply_op1(op, ClampParams{0, 1}, {x});
  testing::expect_close(y, {0, 0.25, 1}, Shape{3});
}

TEST(OpRegistry, NewAttributesAttachFromAnotherFile) {
  OpSchema& op = OpRegistry::global().get_or_create("test_clamp");
  EXPECT_EQ(op.get<TFusableForTest>(), nullptr);
  op.set<TFusableForTest>(true);
  ASSERT_NE(op.get<TFusableForTest>(), nullptr);
  EXPECT_TRUE(*op.get<TFusableForTest>());
}

TEST(OpRegistry, UserErrorsNameTheOpAndAreTyped) {
  const OpSchema& op = OpRegistry::global().find("test_clamp");
  Tensor x = testing::make_tensor({1, 2}, Shape{2});
  try {
    apply_op1(op, ClampParams{2, 1}, {x});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("[test_clamp] low must not exceed high"),
              std::string::npos);
  }
  try {  // wrong params type
    apply_op1(op, NoParams{}, {x});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kTypeError);
    EXPECT_NE(std::string(e.what()).find("ClampParams"), std::string::npos);
  }
  try {  // no kernel for this dtype
    apply_op1(op, ClampParams{0, 1}, {testing::make_tensor({1}, Shape{1}, DataType::kFloat64)});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kTypeError);
    EXPECT_NE(std::string(e.what()).find("no cpu kernel for dtype float64"), std::string::npos);
  }
  try {  // arity
    apply_op1(op, ClampParams{0, 1}, {x, x});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("takes 1 inputs"), std::string::npos);
  }
  EXPECT_THROW(OpRegistry::global().find("no_such_op"), Error);
}

TEST(OpRegistry, EveryDefinedOpHasSbpSignaturesAndKernels) {
  for (const std::string& name : OpRegistry::global().names()) {
    if (name.rfind("test_", 0) == 0) continue;
    const OpSchema& op = OpRegistry::global().find(name);
    EXPECT_TRUE(op.has<FSbpSignatures>()) << name << " has no FSbpSignatures";
    if (op.has<TViewOfInput>()) continue;
    EXPECT_NE(op.kernel_dtypes(DeviceType::kCPU), "none") << name << " has no cpu kernel";
  }
}

}  // namespace
}  // namespace ofl
