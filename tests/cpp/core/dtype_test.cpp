#include "oneflowlike/dtype.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "oneflowlike/common/error.h"
#include "oneflowlike/half.h"

#if defined(__F16C__)
#include <immintrin.h>
#endif

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

// Note [Vectorisable float16 conversions]: the branch-free scalar conversions give F16C's bits:
// every float16 widened, and float32 values narrowed around every rounding boundary (the 13
// dropped bits at 0, 1, halfway -1/0/+1 and all ones, with both parities, under every sign,
// exponent and high mantissa bits), plus a stride through all of float32.
TEST(Half, ScalarConversionsGiveF16CBits) {
#if defined(__F16C__)
  for (uint32_t h = 0; h < 65536; ++h) {
    float16 v;
    v.bits = static_cast<uint16_t>(h);
    const float mine = static_cast<float>(v);
    const float f16c = _cvtsh_ss(static_cast<uint16_t>(h));
    if (std::isnan(f16c)) {
      ASSERT_TRUE(std::isnan(mine)) << h;
      ASSERT_EQ(std::signbit(mine), std::signbit(f16c)) << h;
      continue;
    }
    uint32_t a, b;
    std::memcpy(&a, &mine, 4);
    std::memcpy(&b, &f16c, 4);
    ASSERT_EQ(a, b) << std::hex << h;
  }
  const auto check = [](uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    const uint16_t f16c = _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
    const uint16_t mine = float16(f).bits;
    if (std::isnan(f)) {
      ASSERT_EQ(mine, (f16c & 0x8000u) | 0x7e00u) << std::hex << u;
    } else {
      ASSERT_EQ(mine, f16c) << std::hex << u;
    }
  };
  for (uint32_t high = 0; high < (1u << 19); ++high) {
    for (uint32_t low : {0x0u, 0x1u, 0xfffu, 0x1000u, 0x1001u, 0x1fffu}) check(high << 13 | low);
  }
  for (uint64_t u = 0; u < (uint64_t{1} << 32); u += 257) check(static_cast<uint32_t>(u));
#else
  GTEST_SKIP() << "built without F16C";
#endif
}

}  // namespace
}  // namespace ofl
