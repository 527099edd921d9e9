#include "oneflowlike/ops/elementwise.h"

#include <gtest/gtest.h>

#include "oneflowlike/op.h"
#include "tests/cpp/ops/test_util.h"

namespace ofl {
namespace {

using testing::expect_close;
using testing::expect_gradients_match;
using testing::make_tensor;
using testing::random_tensor;
using testing::values_of;

// Reference: NumPy-style broadcasting by explicit index arithmetic.
std::vector<double> reference_binary(const Tensor& a, const Tensor& b, const Shape& out,
                                     double (*f)(double, double)) {
  const std::vector<double> va = values_of(a), vb = values_of(b);
  std::vector<double> r(out.numel());
  const std::vector<int64_t> so = out.strides();
  for (int64_t i = 0; i < out.numel(); ++i) {
    int64_t ia = 0, ib = 0, sa = 1, sb = 1;
    for (int d = out.ndim() - 1; d >= 0; --d) {
      const int64_t idx = (i / so[d]) % out[d];
      const int da = a.ndim() - out.ndim() + d, db = b.ndim() - out.ndim() + d;
      if (da >= 0) {
        ia += (a.shape()[da] == 1 ? 0 : idx) * sa;
        sa *= a.shape()[da];
      }
      if (db >= 0) {
        ib += (b.shape()[db] == 1 ? 0 : idx) * sb;
        sb *= b.shape()[db];
      }
    }
    r[i] = f(va[ia], vb[ib]);
  }
  return r;
}

TEST(Elementwise, BroadcastingMatchesTheReferenceForManyShapePairs) {
  const std::vector<std::pair<Shape, Shape>> cases = {
      {Shape{3, 4}, Shape{3, 4}},    {Shape{3, 4}, Shape{4}},
      {Shape{3, 1}, Shape{1, 4}},    {Shape{2, 3, 4}, Shape{3, 1}},
      {Shape{}, Shape{2, 2}},        {Shape{5, 1, 3}, Shape{1, 4, 1}},
      {Shape{200, 300}, Shape{300}}, {Shape{64, 1}, Shape{64, 700}}};
  for (const auto& [sa, sb] : cases) {
    Tensor a = random_tensor(sa, DataType::kFloat32, 1);
    Tensor b = random_tensor(sb, DataType::kFloat32, 2, 0.5, 2.0);
    const Shape out = broadcast_shapes(sa, sb, "t");
    expect_close(functional::add(a, b),
                 reference_binary(a, b, out, [](double x, double y) { return x + y; }), out);
    expect_close(functional::sub(a, b),
                 reference_binary(a, b, out, [](double x, double y) { return x - y; }), out);
    expect_close(functional::mul(a, b),
                 reference_binary(a, b, out, [](double x, double y) { return x * y; }), out);
    expect_close(functional::div(a, b),
                 reference_binary(a, b, out, [](double x, double y) { return x / y; }), out);
  }
}

TEST(Elementwise, MixedDtypesArePromoted) {
  Tensor a = make_tensor({1, 2}, Shape{2}, DataType::kInt64);
  Tensor b = make_tensor({0.5, 0.25}, Shape{2}, DataType::kFloat32);
  Tensor c = functional::add(a, b);
  EXPECT_EQ(c.dtype(), DataType::kFloat32);
  EXPECT_EQ(values_of(c), (std::vector<double>{1.5, 2.25}));
  EXPECT_EQ(functional::mul(a, a).dtype(), DataType::kInt64);
}

TEST(Elementwise, ComparisonsGiveBool) {
  Tensor a = make_tensor({1, 2, 3}, Shape{3});
  Tensor b = make_tensor({2}, Shape{1});
  EXPECT_EQ(functional::equal(a, b).dtype(), DataType::kBool);
  EXPECT_EQ(values_of(functional::equal(a, b)), (std::vector<double>{0, 1, 0}));
  EXPECT_EQ(values_of(functional::greater(a, b)), (std::vector<double>{0, 0, 1}));
  EXPECT_EQ(values_of(functional::less(a, b)), (std::vector<double>{1, 0, 0}));
}

TEST(Elementwise, GradientsMatchFiniteDifferencesWithBroadcasting) {
  Tensor a = random_tensor(Shape{2, 3}, DataType::kFloat64, 3);
  Tensor b = random_tensor(Shape{3}, DataType::kFloat64, 4, 0.5, 1.5);
  Tensor c = random_tensor(Shape{2, 1}, DataType::kFloat64, 5, 0.5, 1.5);
  using Fn = Tensor (*)(const Tensor&, const Tensor&);
  for (Fn fn :
       {Fn(&functional::add), Fn(&functional::sub), Fn(&functional::mul), Fn(&functional::div)}) {
    expect_gradients_match(
        [&](const std::vector<Tensor>& x) { return std::vector<Tensor>{fn(x[0], x[1])}; }, {a, b});
    expect_gradients_match(
        [&](const std::vector<Tensor>& x) { return std::vector<Tensor>{fn(x[0], x[1])}; }, {c, b});
  }
}

TEST(Elementwise, ShapeMismatchNamesOpAndShapes) {
  try {
    functional::add(make_tensor({1, 2, 3}, Shape{3}), make_tensor({1, 2}, Shape{2}));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("[add] shapes must broadcast"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("(3,) and (2,)"), std::string::npos);
  }
}

TEST(Elementwise, SbpSignaturesSplitBroadcastAxesAsB) {
  const OpSchema& op = OpRegistry::global().find("mul");
  const std::vector<TensorMeta> in = {{Shape{4, 8}, DataType::kFloat32},
                                      {Shape{8}, DataType::kFloat32}};
  const auto sigs = (*op.get<FSbpSignatures>())(InferContext(op, AnyParams(), in));
  std::vector<std::string> got;
  for (const auto& s : sigs) got.push_back(s.to_string());
  EXPECT_EQ(got, (std::vector<std::string>{"S(0) x B -> S(0)", "S(1) x S(0) -> S(1)", "B x B -> B",
                                           "P x B -> P", "B x P -> P"}));
  const OpSchema& add = OpRegistry::global().find("add");
  const auto add_sigs = (*add.get<FSbpSignatures>())(InferContext(add, AnyParams(), in));
  EXPECT_EQ(add_sigs.back().to_string(), "P x P -> P");
}

}  // namespace
}  // namespace ofl
