#include "oneflowlike/dtype.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "oneflowlike/common/error.h"
#include "oneflowlike/half.h"

namespace ofl {
namespace {

TEST(DataType, NamesRoundTripThroughParsing) {
  for (int i = 0; i < kNumDataTypes; ++i) {
    const auto dtype = static_cast<DataType>(i);
    EXPECT_EQ(dtype_from_name(dtype_name(dtype)), dtype);
  }
  EXPECT_EQ(dtype_from_name("float"), DataType::kFloat32);
  EXPECT_EQ(dtype_from_name("long"), DataType::kInt64);
}

TEST(DataType, SizesMatchTheCppTypes) {
  EXPECT_EQ(dtype_size(DataType::kFloat32), 4u);
  EXPECT_EQ(dtype_size(DataType::kFloat64), 8u);
  EXPECT_EQ(dtype_size(DataType::kFloat16), 2u);
  EXPECT_EQ(dtype_size(DataType::kBFloat16), 2u);
  EXPECT_EQ(dtype_size(DataType::kInt8), 1u);
  EXPECT_EQ(dtype_size(DataType::kInt32), 4u);
  EXPECT_EQ(dtype_size(DataType::kInt64), 8u);
  EXPECT_EQ(dtype_size(DataType::kBool), 1u);
}

TEST(DataType, UnknownNameIsATypeError) {
  try {
    dtype_from_name("complex64");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kTypeError);
    EXPECT_NE(std::string(e.what()).find("complex64"), std::string::npos);
  }
}

TEST(DataType, PromotionIsSymmetricAndFollowsTheTable) {
  for (int i = 0; i < kNumDataTypes; ++i) {
    for (int j = 0; j < kNumDataTypes; ++j) {
      const auto a = static_cast<DataType>(i), b = static_cast<DataType>(j);
      EXPECT_EQ(promote_types(a, b), promote_types(b, a)) << dtype_name(a) << " " << dtype_name(b);
    }
    EXPECT_EQ(promote_types(static_cast<DataType>(i), static_cast<DataType>(i)),
              static_cast<DataType>(i));
  }
  EXPECT_EQ(promote_types(DataType::kInt32, DataType::kFloat32), DataType::kFloat32);
  EXPECT_EQ(promote_types(DataType::kInt32, DataType::kInt64), DataType::kInt64);
  EXPECT_EQ(promote_types(DataType::kFloat16, DataType::kBFloat16), DataType::kFloat32);
  EXPECT_EQ(promote_types(DataType::kBool, DataType::kInt8), DataType::kInt8);
  EXPECT_EQ(promote_types(DataType::kFloat32, DataType::kFloat64), DataType::kFloat64);
}

TEST(Half, Float16RoundsToNearestEvenAndKeepsSpecials) {
  EXPECT_EQ(static_cast<float>(float16(1.0f)), 1.0f);
  EXPECT_EQ(static_cast<float>(float16(-2.5f)), -2.5f);
  EXPECT_EQ(static_cast<float>(float16(65504.0f)), 65504.0f);
  EXPECT_TRUE(std::isinf(static_cast<float>(float16(1e6f))));
  EXPECT_TRUE(std::isnan(static_cast<float>(float16(std::nanf("")))));
  // 1 + 2^-11 is halfway between 1 and the next half (1 + 2^-10): ties to even gives 1.
  EXPECT_EQ(static_cast<float>(float16(1.0f + std::ldexp(1.0f, -11))), 1.0f);
  // Smallest subnormal half is 2^-24.
  EXPECT_EQ(static_cast<float>(float16(std::ldexp(1.0f, -24))), std::ldexp(1.0f, -24));
  EXPECT_EQ(float16(0.1f).bits, 0x2e66);
}

TEST(Half, BFloat16KeepsTheExponentRangeOfFloat) {
  EXPECT_EQ(static_cast<float>(bfloat16(1.0f)), 1.0f);
  const float big = static_cast<float>(bfloat16(3e38f));  // beyond float16, not bfloat16
  EXPECT_TRUE(std::isfinite(big));
  EXPECT_NEAR(big / 3e38f, 1.0f, 1.0f / 128);
  EXPECT_EQ(static_cast<float>(bfloat16(1.0f + 1.0f / 256)), 1.0f);  // ties to even
  EXPECT_EQ(bfloat16(1.0f).bits, 0x3f80);
}

// The vectorised float16 conversions give the scalar ones' bits (NaN payloads aside), across
// normal, subnormal, overflowing and halfway values, and tails shorter than a vector.
TEST(Half, BulkConversionsMatchTheScalarOnes) {
  std::vector<float> x;
  for (float v : {0.0f, -0.0f, 1.0f, 65504.0f, 65520.0f, 1e6f, -1e6f, 6e-8f, 3e-8f, 1e-5f,
                  std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(),
                  1.00048828125f, 1.00146484375f}) {
    x.push_back(v);
  }
  uint32_t state = 12345;
  for (int i = 0; i < 1000; ++i) {
    state = state * 1664525u + 1013904223u;
    uint32_t bits = state;
    float v;
    std::memcpy(&v, &bits, 4);
    if (std::isfinite(v) && std::fabs(v) < 1e6f) x.push_back(v);
  }
  x.resize(x.size() / 8 * 8 + 5);  // a tail
  std::vector<float16> bulk(x.size());
  floats_to_halves(x.data(), bulk.data(), static_cast<int64_t>(x.size()));
  std::vector<float> back(x.size());
  halves_to_floats(bulk.data(), back.data(), static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    const float16 scalar(x[i]);
    if (std::isnan(x[i])) {
      EXPECT_TRUE(std::isnan(back[i]));
      continue;
    }
    EXPECT_EQ(bulk[i].bits, scalar.bits) << x[i];
    EXPECT_EQ(back[i], static_cast<float>(scalar)) << x[i];
  }
}

}  // namespace
}  // namespace ofl
