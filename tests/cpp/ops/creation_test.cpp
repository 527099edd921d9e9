#include "oneflowlike/ops/creation.h"

#include <gtest/gtest.h>

#include "oneflowlike/cuda/device.h"
#include "oneflowlike/lazy.h"
#include "oneflowlike/op.h"
#include "oneflowlike/ops/random.h"
#include "tests/cpp/ops/test_util.h"

namespace ofl {
namespace {

using testing::expect_gradients_match;
using testing::make_tensor;
using testing::random_tensor;
using testing::values_of;

TEST(Creation, FillAndArange) {
  EXPECT_EQ(values_of(functional::fill(Shape{2, 2}, DataType::kInt32, 7)),
            (std::vector<double>{7, 7, 7, 7}));
  EXPECT_EQ(values_of(functional::arange(0, 5, 2, DataType::kInt64)),
            (std::vector<double>{0, 2, 4}));
  EXPECT_EQ(values_of(functional::arange(1, 0, -0.25, DataType::kFloat32)),
            (std::vector<double>{1, 0.75, 0.5, 0.25}));
  EXPECT_THROW(functional::arange(0, 1, 0, DataType::kFloat32), Error);
  EXPECT_THROW(functional::fill(Shape{-1}, DataType::kFloat32, 0), Error);
}

TEST(Creation, OpsWithoutInputsRunOnTheDeviceTheyAreGiven) {
  const Tensor on_cpu = functional::fill(Shape{3}, DataType::kFloat32, 2.5, Device::cpu());
  EXPECT_EQ(on_cpu.device(), Device::cpu());
  EXPECT_EQ(values_of(on_cpu), values_of(functional::fill(Shape{3}, DataType::kFloat32, 2.5)));
  EXPECT_EQ(
      values_of(functional::random_uniform({7}, DataType::kFloat32, -1, 2, 5, 9, Device::cpu())),
      values_of(functional::random_uniform({7}, DataType::kFloat32, -1, 2, 5, 9)));
  if (cuda::device_count() == 0) {  // with a GPU: tests/python/test_cuda_random_optim_fused.py
    testing::expect_error(
        [] { functional::arange(0, 4, 1, DataType::kInt64, Device::parse("cuda:0")); },
        ErrorCode::kUnavailable, "[cuda] no CUDA device 0");
  }
}

// Records nothing; what matters is that apply_op hands it the op.
class CountingTracer : public OpTracer {
 public:
  std::vector<Tensor> trace(const OpSchema& op, const AnyParams& params,
                            const std::vector<Tensor>& inputs) override {
    ++traced;
    std::vector<TensorMeta> metas;
    for (const Tensor& t : inputs) metas.push_back({t.shape(), t.dtype()});
    std::vector<Tensor> outputs;
    for (const TensorMeta& m : op.infer(params, metas)) outputs.push_back(make_lazy_tensor(m));
    return outputs;
  }
  int traced = 0;
};

TEST(Creation, AGraphTakesNoDeviceForAnOpWithoutInputs) {
  CountingTracer tracer;
  TracingScope scope(&tracer);
  functional::fill(Shape{2}, DataType::kFloat32, 1, Device::cpu());
  EXPECT_EQ(tracer.traced, 1);
  testing::expect_error(
      [] { functional::fill(Shape{2}, DataType::kFloat32, 1, Device::parse("cuda:0")); },
      ErrorCode::kUnimplemented, "[fill] in a graph, ops run where the placement says");
  EXPECT_EQ(tracer.traced, 1);
}

TEST(Creation, ArangeReadsItsLogicalRegion) {
  const OpSchema& op = OpRegistry::global().find("arange");
  const AnyParams params = ArangeParams{0, 10, 1, DataType::kInt64};
  Tensor piece = Tensor::empty(Shape{3}, DataType::kInt64);
  const std::vector<Tensor> inputs, outputs = {piece};
  const std::vector<Range> region = {Range{4, 7}};
  const Shape logical{10};
  KernelContext ctx{params, inputs, outputs};
  ctx.output_region = &region;
  ctx.logical_output_shape = &logical;
  op.find_kernel(DeviceType::kCPU, DataType::kInt64)(ctx);
  EXPECT_EQ(values_of(piece), (std::vector<double>{4, 5, 6}));
}

TEST(Cast, ConvertsBetweenAllTypesAndRoundTripsHalves) {
  Tensor x = make_tensor({-1.5, 0, 2.25, 3}, Shape{4}, DataType::kFloat32);
  EXPECT_EQ(values_of(functional::cast(x, DataType::kInt32)), (std::vector<double>{-1, 0, 2, 3}));
  EXPECT_EQ(values_of(functional::cast(x, DataType::kBool)), (std::vector<double>{1, 0, 1, 1}));
  for (DataType half : {DataType::kFloat16, DataType::kBFloat16}) {
    Tensor h = functional::cast(x, half);
    EXPECT_EQ(h.dtype(), half);
    EXPECT_EQ(values_of(functional::cast(h, DataType::kFloat64)), values_of(x));
  }
  EXPECT_TRUE(functional::cast(x, DataType::kFloat32).shares_storage_with(x));
  expect_gradients_match(
      [](const std::vector<Tensor>& v) {
        return std::vector<Tensor>{
            functional::cast(functional::cast(v[0], DataType::kFloat32), DataType::kFloat64)};
      },
      {random_tensor(Shape{3}, DataType::kFloat64, 1)}, 1e-2, 1e-4);
}

}  // namespace
}  // namespace ofl
