#include "oneflowlike/shape.h"

#include <gtest/gtest.h>

#include "oneflowlike/common/error.h"
#include "oneflowlike/tensor.h"

namespace ofl {
namespace {

TEST(Shape, CountsAndStrides) {
  const Shape s{2, 3, 4};
  EXPECT_EQ(s.numel(), 24);
  EXPECT_EQ(s.count(1, 3), 12);
  EXPECT_EQ(s.strides(), (std::vector<int64_t>{12, 4, 1}));
  EXPECT_EQ(Shape{}.numel(), 1);
  EXPECT_EQ(s.to_string(), "(2, 3, 4)");
  EXPECT_EQ(Shape{5}.to_string(), "(5,)");
}

TEST(Shape, BroadcastFollowsNumpy) {
  EXPECT_EQ(broadcast_shapes(Shape{4, 1, 3}, Shape{5, 1}, "t"), (Shape{4, 5, 3}));
  EXPECT_EQ(broadcast_shapes(Shape{}, Shape{2}, "t"), (Shape{2}));
  try {
    broadcast_shapes(Shape{2, 3}, Shape{4}, "add");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("[add]"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("(2, 3) and (4,)"), std::string::npos);
  }
}

TEST(Shape, NormalizeAxisRejectsOutOfRangeWithIndexError) {
  EXPECT_EQ(normalize_axis(-1, 3, "t"), 2);
  EXPECT_EQ(normalize_axis(0, 0, "t"), 0);
  try {
    normalize_axis(3, 3, "softmax");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kOutOfRange);
    EXPECT_NE(std::string(e.what()).find("[softmax]"), std::string::npos);
  }
}

TEST(Tensor, ViewsShareStorageAndAllocatorCountsBytes) {
  Allocator* a = cpu_allocator();
  const size_t before = a->live_bytes();
  {
    Tensor t = Tensor::zeros(Shape{4, 6}, DataType::kFloat32);
    EXPECT_EQ(a->live_bytes(), before + 96);
    EXPECT_GE(a->peak_bytes(), before + 96);
    Tensor v = t.view(Shape{6, 4});
    EXPECT_TRUE(v.shares_storage_with(t));
    EXPECT_EQ(a->live_bytes(), before + 96);
    Tensor rows = t.narrow_rows(1, 3);
    rows.data<float>()[0] = 5.0f;
    EXPECT_EQ(t.data<float>()[6], 5.0f);
    EXPECT_EQ(rows.shape(), (Shape{2, 6}));
    EXPECT_THROW(t.view(Shape{5, 5}), Error);
  }
  EXPECT_EQ(a->live_bytes(), before);
}

TEST(Tensor, ScalarAndItemConvert) {
  EXPECT_EQ(Tensor::scalar(2.5, DataType::kFloat64).item(), 2.5);
  EXPECT_EQ(Tensor::scalar(7, DataType::kInt64).item(), 7.0);
  EXPECT_EQ(Tensor::scalar(1.5, DataType::kFloat16).item(), 1.5);
  EXPECT_THROW(Tensor::zeros(Shape{2}, DataType::kFloat32).item(), Error);
}

TEST(Device, ParsesTypeAndIndex) {
  EXPECT_EQ(Device::parse("cpu").to_string(), "cpu:0");
  EXPECT_EQ(Device::parse("cuda:3").index, 3);
  EXPECT_THROW(Device::parse("tpu"), Error);
  EXPECT_THROW(Device::parse("cuda:x"), Error);
  EXPECT_THROW(Tensor::empty(Shape{2}, DataType::kFloat32, Device::parse("cuda:0")), Error);
}

}  // namespace
}  // namespace ofl
