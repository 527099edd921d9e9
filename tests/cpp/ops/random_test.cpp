#include "oneflowlike/ops/random.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <tuple>
#include <vector>

#include "oneflowlike/autograd.h"
#include "oneflowlike/cuda/device.h"
#include "oneflowlike/eager.h"
#include "oneflowlike/kernels/cpu/philox_lanes.h"
#include "oneflowlike/op.h"
#include "oneflowlike/ops/creation.h"
#include "oneflowlike/philox.h"
#include "tests/cpp/ops/test_util.h"

namespace ofl {
namespace {

using testing::expect_gradients_match;
using testing::make_tensor;
using testing::random_tensor;
using testing::values_of;

double mean_of(const std::vector<double>& v) {
  return std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

double std_of(const std::vector<double>& v) {
  const double m = mean_of(v);
  double s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return std::sqrt(s / static_cast<double>(v.size()));
}

// Runs the kernel of `op` on `device` (the CPU by default) directly on a piece of a logical
// tensor, as a rank would; inputs are on that device, and so is the result.
Tensor run_kernel_on_region(const std::string& op_name, const AnyParams& params,
                            const std::vector<Tensor>& inputs, DataType dtype, const Shape& logical,
                            const std::vector<Range>& region, Device device = Device::cpu(),
                            uint64_t random_stream = 0) {
  std::vector<int64_t> dims;
  for (const Range& r : region) dims.push_back(r.size());
  std::vector<Tensor> outputs = {Tensor::empty(Shape(dims), dtype, device)};
  const KernelFn kernel = OpRegistry::global().find(op_name).find_kernel(device.type, dtype);
  EXPECT_NE(kernel, nullptr);
  KernelContext ctx{params, inputs, outputs};
  ctx.output_region = &region;
  ctx.logical_output_shape = &logical;
  ctx.random_stream = random_stream;
  kernel(ctx);
  return outputs[0];
}

// The values of `full` (rows, cols) inside `region`, row-major.
std::vector<double> slice_of(const Tensor& full, const std::vector<Range>& region) {
  const std::vector<double> v = values_of(full);
  const int64_t cols = full.shape()[1];
  std::vector<double> out;
  for (int64_t r = region[0].begin; r < region[0].end; ++r) {
    for (int64_t c = region[1].begin; c < region[1].end; ++c) out.push_back(v[r * cols + c]);
  }
  return out;
}

using testing::expect_error;

TEST(Philox, MatchesTheRandom123KnownAnswers) {
  using philox::Block;
  EXPECT_EQ(philox::philox4x32({0, 0, 0, 0}, 0, 0),
            (Block{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}));
  EXPECT_EQ(philox::philox4x32({~0u, ~0u, ~0u, ~0u}, ~0u, ~0u),
            (Block{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}));
  EXPECT_EQ(philox::philox4x32({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, 0xa4093822u,
                               0x299f31d0u),
            (Block{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}));
}

// Note [Philox in lanes]: sixteen counters at once give each element's own block, also where
// the counter wraps past 2^64.
TEST(Philox, LanesGiveEveryElementItsOwnBits) {
  const uint64_t wraps = ~uint64_t{0} - 5;
  for (const auto& [seed, offset, index] : std::vector<std::tuple<uint64_t, uint64_t, uint64_t>>{
           {0, 0, 0}, {42, 7, 1000003}, {~uint64_t{0}, wraps, 0}, {0x123456789abcdefull, 99, 3}}) {
    cpu::PhiloxLanes lanes;
    cpu::element_bits_lanes(seed, offset, index, lanes);
    for (int i = 0; i < cpu::kPhiloxLanes; ++i) {
      EXPECT_EQ(lanes.block(i), philox::element_bits(seed, offset, index + i))
          << "seed " << seed << " offset " << offset << " lane " << i;
    }
  }
}

// The CPU kernels draw sixteen elements' bits at once; every element, those of a last partial
// group included, has the value the per-element definition gives (what the CUDA kernels use).
TEST(RandomUniform, EveryElementHasItsDefinedValue) {
  const int64_t n = 37;  // two groups of sixteen and five more
  const Tensor u = functional::random_uniform({n}, DataType::kFloat32, -1.0, 3.0, 11, 5);
  const Tensor g = functional::random_normal({n}, DataType::kFloat64, 0.5, 2.0, 13, 17);
  const Tensor h = functional::random_normal({n}, DataType::kFloat32, 0.5, 2.0, 13, 17);
  const std::vector<double> uv = values_of(u), gv = values_of(g), hv = values_of(h);
  const float below = std::nextafter(3.0f, -1.0f);
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_EQ(static_cast<float>(uv[i]),
              philox::uniform_value<float>(philox::element_bits(11, 5, i), -1.0f, 3.0f, below))
        << i;
    EXPECT_EQ(gv[i], philox::normal_value<double>(philox::element_bits(13, 17, i), 0.5, 2.0)) << i;
    // The kernel's vectorised (AVX-512 where the CPU has it) Box-Muller gives the bits of this
    // scalar one (Note [Box-Muller in float arithmetic]).
    EXPECT_EQ(static_cast<float>(hv[i]),
              philox::normal_value<float>(philox::element_bits(13, 17, i), 0.5f, 2.0f))
        << i;
  }
}

// Note [Box-Muller in float arithmetic]: the float32 log and cos against float64's, over every
// input they get (2^24 each), and the normal they make over 2^20 draws. Errors in ulp of the
// float nearest the float64 value; the bounds sit just above the measured 0.85, 0.99 and 2.56.
TEST(BoxMuller, LogAndCosAreWithinAnUlpOfFloat64OverEveryInput) {
  const auto ulps = [](float got, double want) {
    const float w = static_cast<float>(want);
    const double ulp = std::nextafter(std::fabs(w), INFINITY) - std::fabs(w);
    return std::fabs(static_cast<double>(got) - want) / ulp;
  };
  double log_worst = 0, cos_worst = 0, normal_worst = 0;
  for (uint32_t a = 0; a < (1u << 24); ++a) {
    const float u = 1.0f - static_cast<float>(a) * 0x1.0p-24f;
    if (a > 0) log_worst = std::max(log_worst, ulps(philox::log_of_unit(u), std::log(double{u})));
    const double turn = static_cast<double>(a) * 0x1.0p-24;
    if (a % (1u << 23) == 1u << 22) {  // a quarter or three quarters of a turn: exactly zero
      ASSERT_EQ(philox::cos_two_pi(a), 0.0f) << a;
    } else {
      cos_worst = std::max(cos_worst, ulps(philox::cos_two_pi(a), std::cos(2 * M_PI * turn)));
    }
  }
  EXPECT_EQ(philox::log_of_unit(1.0f), 0.0f);
  EXPECT_EQ(philox::cos_two_pi(0), 1.0f);
  EXPECT_EQ(philox::cos_two_pi(1u << 23), -1.0f);
  for (uint64_t i = 0; i < (1u << 20); ++i) {
    const philox::Block r = philox::element_bits(5, 0, i);
    const double u1 = 1.0 - static_cast<double>(r[0] >> 8) * 0x1.0p-24;
    const double u2 = static_cast<double>(r[1] >> 8) * 0x1.0p-24;
    const double want = std::sqrt(-2 * std::log(u1)) * std::cos(2 * M_PI * u2);
    if (std::fabs(want) > 1e-6) {
      normal_worst = std::max(normal_worst, ulps(philox::normal_from_bits<float>(r), want));
    }
  }
  EXPECT_LT(log_worst, 0.9);
  EXPECT_LT(cos_worst, 1.0);
  EXPECT_LT(normal_worst, 3.0);
}

TEST(Philox, UniformsStayInsideTheUnitInterval) {
  EXPECT_EQ(philox::uniform_float(0u), 0.0f);
  EXPECT_LT(philox::uniform_float(~0u), 1.0f);
  EXPECT_EQ(philox::uniform_double(0u, 0u), 0.0);
  EXPECT_LT(philox::uniform_double(~0u, ~0u), 1.0);
}

TEST(RandomNormal, LargeSampleHasTheRequestedMeanAndStd) {
  for (DataType dtype : {DataType::kFloat32, DataType::kFloat64}) {
    const int64_t n = 200000;
    const Tensor y = functional::random_normal({n}, dtype, 2.0, 3.0, /*seed=*/42, /*offset=*/0);
    EXPECT_EQ(y.dtype(), dtype);
    const std::vector<double> v = values_of(y);
    // Standard errors: 3 / sqrt(n) ~ 0.0067 for the mean, ~0.0047 for the std.
    EXPECT_NEAR(mean_of(v), 2.0, 0.04);
    EXPECT_NEAR(std_of(v), 3.0, 0.03);
    int64_t within_one_std = 0;
    for (double x : v) within_one_std += std::abs(x - 2.0) < 3.0;
    EXPECT_NEAR(static_cast<double>(within_one_std) / n, 0.6827, 0.01);
    for (double x : v) ASSERT_TRUE(std::isfinite(x));
  }
}

TEST(RandomUniform, ValuesCoverTheHalfOpenRange) {
  for (DataType dtype : {DataType::kFloat32, DataType::kFloat64}) {
    const int64_t n = 100000;
    const Tensor y = functional::random_uniform({n}, dtype, -1.0, 3.0, /*seed=*/7, /*offset=*/5);
    const std::vector<double> v = values_of(y);
    double lo = 10, hi = -10;
    for (double x : v) {
      lo = std::min(lo, x);
      hi = std::max(hi, x);
    }
    EXPECT_GE(lo, -1.0);
    EXPECT_LT(hi, 3.0);
    EXPECT_LT(lo, -0.99);
    EXPECT_GT(hi, 2.99);
    EXPECT_NEAR(mean_of(v), 1.0, 0.03);                   // (a + b) / 2
    EXPECT_NEAR(std_of(v), 4.0 / std::sqrt(12.0), 0.02);  // (b - a) / sqrt(12)
  }
}

TEST(RandomUniform, EqualBoundsGiveThatValue) {
  const Tensor y = functional::random_uniform({5}, DataType::kFloat32, 2.5, 2.5, 1, 0);
  for (double x : values_of(y)) EXPECT_EQ(x, 2.5);
}

TEST(RandomNormal, SameSeedAndOffsetGiveSameValues) {
  const Tensor a = functional::random_normal({4, 5}, DataType::kFloat64, 0, 1, 3, 100);
  const Tensor b = functional::random_normal({4, 5}, DataType::kFloat64, 0, 1, 3, 100);
  const Tensor c = functional::random_normal({4, 5}, DataType::kFloat64, 0, 1, 4, 100);
  EXPECT_EQ(values_of(a), values_of(b));
  EXPECT_NE(values_of(a), values_of(c));
}

TEST(RandomNormal, OffsetShiftsTheStreamByElements) {
  // Element e of a draw at offset o is element e + k of a draw at offset o - k.
  const std::vector<double> a =
      values_of(functional::random_normal({10}, DataType::kFloat32, 0, 1, 9, 0));
  const std::vector<double> b =
      values_of(functional::random_normal({6}, DataType::kFloat32, 0, 1, 9, 4));
  for (int i = 0; i < 6; ++i) EXPECT_EQ(b[i], a[i + 4]);
}

TEST(RandomGenerator, ManualSeedMakesDrawsReproducible) {
  manual_seed(123);
  EXPECT_EQ(initial_seed(), 123u);
  const Tensor a1 = functional::randn({3, 4});
  const Tensor a2 = functional::rand({3, 4}, DataType::kFloat64);
  manual_seed(123);
  const Tensor b1 = functional::randn({3, 4});
  const Tensor b2 = functional::rand({3, 4}, DataType::kFloat64);
  EXPECT_EQ(values_of(a1), values_of(b1));
  EXPECT_EQ(values_of(a2), values_of(b2));
  EXPECT_EQ(a2.dtype(), DataType::kFloat64);
  // Successive draws get fresh counters.
  manual_seed(123);
  const Tensor c1 = functional::randn({3, 4});
  const Tensor c2 = functional::randn({3, 4});
  EXPECT_NE(values_of(c1), values_of(c2));
}

TEST(RandomGenerator, NextOffsetReservesCounters) {
  manual_seed(5);
  EXPECT_EQ(next_offset(10), 0);
  EXPECT_EQ(next_offset(3), 10);
  const RandomState s = reserve_random(0);
  EXPECT_EQ(s.seed, 5);
  EXPECT_EQ(s.offset, 13);
  manual_seed(5);
  EXPECT_EQ(next_offset(1), 0);
}

TEST(RandomGenerator, NormalAndUniformUseTheirArguments) {
  manual_seed(1);
  const std::vector<double> u = values_of(functional::uniform(10.0, 11.0, {1000}));
  for (double x : u) {
    EXPECT_GE(x, 10.0);
    EXPECT_LT(x, 11.0);
  }
  const std::vector<double> v =
      values_of(functional::normal(-5.0, 0.5, {20000}, DataType::kFloat64));
  EXPECT_NEAR(mean_of(v), -5.0, 0.02);
  EXPECT_NEAR(std_of(v), 0.5, 0.02);
}

TEST(RandomNormal, RowSliceOfASplitTensorMatchesTheWholeTensor) {
  const Shape logical{7, 3};
  const RandomParams params{logical, DataType::kFloat32, 0.0, 1.0, /*seed=*/11, /*offset=*/17};
  const Tensor full = apply_op1(OpRegistry::global().find("random_normal"), params, {});
  const std::vector<Range> rows = {{2, 5}, {0, 3}};
  const Tensor piece =
      run_kernel_on_region("random_normal", params, {}, DataType::kFloat32, logical, rows);
  EXPECT_EQ(piece.shape(), Shape({3, 3}));
  EXPECT_EQ(values_of(piece), slice_of(full, rows));
}

TEST(RandomUniform, ColumnSliceOfASplitTensorMatchesTheWholeTensor) {
  const Shape logical{7, 3};
  const RandomParams params{logical, DataType::kFloat64, -2.0, 2.0, /*seed=*/11, /*offset=*/17};
  const Tensor full = apply_op1(OpRegistry::global().find("random_uniform"), params, {});
  // Axis 1 over 2 ranks: columns [0, 2) and [2, 3).
  for (const std::vector<Range>& region :
       {std::vector<Range>{{0, 7}, {0, 2}}, std::vector<Range>{{0, 7}, {2, 3}}}) {
    const Tensor piece =
        run_kernel_on_region("random_uniform", params, {}, DataType::kFloat64, logical, region);
    EXPECT_EQ(values_of(piece), slice_of(full, region));
  }
}

TEST(RandomNormal, RegionOfAThreeDimensionalTensorMatchesTheWholeTensor) {
  const Shape logical{3, 4, 5};
  const RandomParams params{logical, DataType::kFloat64, 1.0, 2.0, /*seed=*/2, /*offset=*/0};
  const std::vector<double> full =
      values_of(apply_op1(OpRegistry::global().find("random_normal"), params, {}));
  const std::vector<Range> region = {{1, 3}, {1, 4}, {2, 5}};  // (S(0), S(1), S(2)) piece
  const Tensor piece =
      run_kernel_on_region("random_normal", params, {}, DataType::kFloat64, logical, region);
  std::vector<double> expected;
  for (int64_t i = 1; i < 3; ++i) {
    for (int64_t j = 1; j < 4; ++j) {
      for (int64_t k = 2; k < 5; ++k) expected.push_back(full[(i * 4 + j) * 5 + k]);
    }
  }
  EXPECT_EQ(values_of(piece), expected);
}

TEST(Dropout, SplitInputGivesTheSliceOfTheWholeResult) {
  const Shape logical{7, 3};
  const DropoutParams params{0.4, /*seed=*/3, /*offset=*/9};
  const Tensor x = random_tensor(logical, DataType::kFloat32, 1, 0.5, 1.5);
  const Tensor full = functional::dropout_with_seed(x, 0.4, 3, 9);
  const std::vector<double> xv = values_of(x);
  for (const std::vector<Range>& region :
       {std::vector<Range>{{2, 5}, {0, 3}}, std::vector<Range>{{0, 7}, {1, 3}}}) {
    const std::vector<double> xs = slice_of(x, region);
    const Shape piece_shape{region[0].size(), region[1].size()};
    const Tensor x_piece = make_tensor(xs, piece_shape, DataType::kFloat32);
    const Tensor y_piece =
        run_kernel_on_region("dropout", params, {x_piece}, DataType::kFloat32, logical, region);
    EXPECT_EQ(values_of(y_piece), slice_of(full, region));
  }
}

// The CUDA kernels' logical indexing, which the Python tests cannot reach (no CUDA graphs yet):
// every region of a split tensor, at any random stream, holds the CPU's values (Note [Random
// values on every device]: uniform and dropout bit for bit, normal within a few ulp).
TEST(RandomCuda, EveryRegionHoldsTheValuesOfTheCpu) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device: " << cuda::why_no_device();
  const Device gpu{DeviceType::kCUDA, 0};
  const Shape logical{5, 7, 33};
  for (const std::vector<Range>& region :
       {std::vector<Range>{{0, 5}, {0, 7}, {0, 33}}, std::vector<Range>{{1, 4}, {2, 7}, {5, 32}},
        std::vector<Range>{{4, 5}, {0, 7}, {32, 33}}}) {
    for (uint64_t stream : {uint64_t{0}, uint64_t{3}}) {
      for (DataType dtype : {DataType::kFloat32, DataType::kFloat64}) {
        SCOPED_TRACE(dtype_name(dtype));
        const RandomParams params{logical, dtype, -1.5, 2.5, /*seed=*/77, /*offset=*/1000};
        const auto on = [&](const std::string& op, Device device) {
          return values_of(
              run_kernel_on_region(op, params, {}, dtype, logical, region, device, stream)
                  .to(Device::cpu()));
        };
        EXPECT_EQ(on("random_uniform", gpu), on("random_uniform", Device::cpu()));
        const std::vector<double> want = on("random_normal", Device::cpu());
        const std::vector<double> got = on("random_normal", gpu);
        ASSERT_EQ(got.size(), want.size());
        if (dtype == DataType::kFloat32) {  // Note [Box-Muller in float arithmetic]
          EXPECT_EQ(got, want);
          continue;
        }
        const double rtol = 1e-13;  // libm's log and cos against CUDA's
        for (size_t i = 0; i < got.size(); ++i) {
          EXPECT_NEAR(got[i], want[i], rtol * std::abs(want[i]) + rtol * 2.5) << i;
        }
      }
      for (DataType dtype :
           {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16, DataType::kBFloat16}) {
        SCOPED_TRACE(dtype_name(dtype));
        const DropoutParams params{0.3, /*seed=*/5, /*offset=*/(int64_t{1} << 40)};
        std::vector<int64_t> dims;
        for (const Range& r : region) dims.push_back(r.size());
        const Tensor x = random_tensor(Shape(dims), dtype, 8, 0.5, 1.5);
        const Tensor want = run_kernel_on_region("dropout", params, {x}, dtype, logical, region,
                                                 Device::cpu(), stream);
        const Tensor got = run_kernel_on_region("dropout", params, {x.to(gpu)}, dtype, logical,
                                                region, gpu, stream);
        EXPECT_EQ(values_of(got.to(Device::cpu())), values_of(want));
      }
    }
  }
}

TEST(Dropout, KeepsTheExpectedFractionAndScales) {
  const int64_t n = 100000;
  const double p = 0.3;
  const Tensor x = make_tensor(std::vector<double>(n, 2.0), {n}, DataType::kFloat32);
  const std::vector<double> y = values_of(functional::dropout_with_seed(x, p, 8, 0));
  int64_t kept = 0;
  for (double v : y) {
    if (v != 0.0) {
      ++kept;
      EXPECT_NEAR(v, 2.0 / (1 - p), 1e-5);
    }
  }
  // Binomial standard error sqrt(0.21 / n) ~ 0.0015.
  EXPECT_NEAR(static_cast<double>(kept) / n, 1 - p, 0.01);
}

TEST(Dropout, MaskIsTheSameForEveryDtype) {
  const Tensor x32 = random_tensor({50}, DataType::kFloat32, 2, 1.0, 2.0);
  const Tensor x64 = random_tensor({50}, DataType::kFloat64, 2, 1.0, 2.0);
  const Tensor xbf = random_tensor({50}, DataType::kBFloat16, 2, 1.0, 2.0);
  const std::vector<double> y32 = values_of(functional::dropout_with_seed(x32, 0.5, 1, 2));
  const std::vector<double> y64 = values_of(functional::dropout_with_seed(x64, 0.5, 1, 2));
  const std::vector<double> ybf = values_of(functional::dropout_with_seed(xbf, 0.5, 1, 2));
  for (int i = 0; i < 50; ++i) {
    EXPECT_EQ(y32[i] == 0.0, y64[i] == 0.0) << i;
    EXPECT_EQ(y32[i] == 0.0, ybf[i] == 0.0) << i;
  }
}

TEST(Dropout, ProbabilityZeroOrNotTrainingIsIdentityAndOneGivesZeros) {
  const Tensor x = random_tensor({4, 6}, DataType::kFloat32, 3);
  EXPECT_TRUE(functional::dropout(x, 0.5, /*training=*/false).shares_storage_with(x));
  EXPECT_TRUE(functional::dropout(x, 0.0).shares_storage_with(x));
  EXPECT_EQ(values_of(functional::dropout_with_seed(x, 0.0, 1, 0)), values_of(x));
  for (double v : values_of(functional::dropout_with_seed(x, 1.0, 1, 0))) EXPECT_EQ(v, 0.0);
  for (double v : values_of(functional::dropout(x, 1.0))) EXPECT_EQ(v, 0.0);
}

TEST(Dropout, GradientIsTheMaskScaled) {
  const double p = 0.25;
  const Tensor x = random_tensor({6, 5}, DataType::kFloat64, 4, 0.5, 1.5);
  Tensor leaf = x.clone();
  leaf.set_requires_grad(true);
  const Tensor y = functional::dropout_with_seed(leaf, p, 21, 3);
  backward({y}, {make_tensor(std::vector<double>(30, 1.0), {6, 5}, DataType::kFloat64)});
  const std::vector<double> g = values_of(leaf.grad());
  const std::vector<double> yv = values_of(y);
  for (int i = 0; i < 30; ++i) EXPECT_NEAR(g[i], yv[i] != 0.0 ? 1.0 / (1 - p) : 0.0, 1e-12);
}

TEST(Dropout, GradientsMatchFiniteDifferences) {
  expect_gradients_match(
      [](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{functional::dropout_with_seed(in[0], 0.4, 13, 2)};
      },
      {random_tensor({3, 7}, DataType::kFloat64, 5)});
}

TEST(Dropout, RejectsBadProbabilityAndIntegerInput) {
  const Tensor x = random_tensor({2, 3}, DataType::kFloat32, 1);
  expect_error([&] { functional::dropout_with_seed(x, 1.5, 0, 0); }, ErrorCode::kInvalidArgument,
               "p must be a probability in [0, 1]. However, got p=1.5");
  expect_error([&] { functional::dropout(x, -0.1, /*training=*/false); },
               ErrorCode::kInvalidArgument, "[dropout] p must be a probability");
  const Tensor xi = make_tensor({1, 2, 3}, {3}, DataType::kInt64);
  expect_error([&] { functional::dropout_with_seed(xi, 0.5, 0, 0); }, ErrorCode::kTypeError,
               "x must have a floating dtype. However, got x (3,) int64");
}

// Note [16-bit random values]: the float32 draw rounded to nearest; a uniform value that rounds
// up to high becomes the largest 16-bit value below it.
TEST(RandomOps, SixteenBitDrawsAreTheFloat32DrawsRounded) {
  for (DataType dtype : {DataType::kFloat16, DataType::kBFloat16}) {
    const Tensor normal = functional::random_normal({4000}, dtype, 0.5, 2, 7, 11);
    const Tensor want = functional::cast(
        functional::random_normal({4000}, DataType::kFloat32, 0.5, 2, 7, 11), dtype);
    EXPECT_EQ(values_of(normal), values_of(want)) << dtype_name(dtype);
    const Tensor u = functional::random_uniform({100000}, dtype, 0, 1, 7, 11);
    const std::vector<double> got = values_of(u);
    const std::vector<double> rounded = values_of(functional::cast(
        functional::random_uniform({100000}, DataType::kFloat32, 0, 1, 7, 11), dtype));
    int clamped = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_LT(got[i], 1.0) << dtype_name(dtype);
      if (rounded[i] == 1.0) {
        ++clamped;
        EXPECT_EQ(got[i], dtype == DataType::kBFloat16 ? 1.0 - 1.0 / 256 : 1.0 - 1.0 / 2048);
      } else {
        EXPECT_EQ(got[i], rounded[i]);
      }
    }
    EXPECT_GT(clamped, 0) << dtype_name(dtype);
  }
}

TEST(RandomOps, RejectBadShapeDtypeAndBounds) {
  expect_error(
      [] {
        functional::random_normal({2, 3}, DataType::kInt64, 0, 1, 0, 0);
      },
      ErrorCode::kTypeError, "[random_normal] dtype must be floating");
  expect_error(
      [] {
        functional::random_normal({2, -1}, DataType::kFloat32, 0, 1, 0, 0);
      },
      ErrorCode::kInvalidArgument, "non-negative extents. However, got (2, -1)");
  expect_error([] { functional::normal(0.0, -1.0, {2}); }, ErrorCode::kInvalidArgument,
               "std finite and non-negative. However, got mean=0, std=-1");
  expect_error([] { functional::uniform(2.0, 1.0, {2}); }, ErrorCode::kInvalidArgument,
               "[random_uniform] low and high must be finite with low <= high");
}

TEST(RandomOps, SbpSignaturesSplitAnyAxisOrBroadcast) {
  const OpSchema& normal = OpRegistry::global().find("random_normal");
  const AnyParams params = RandomParams{Shape{4, 1, 6}, DataType::kFloat32, 0, 1, 0, 0};
  const std::vector<TensorMeta> none;
  const std::vector<SbpSignature> sigs =
      (*normal.get<FSbpSignatures>())(InferContext(normal, params, none));
  const std::vector<SbpSignature> expected = {{{}, {S(0)}}, {{}, {S(2)}}, {{}, {B()}}};
  EXPECT_EQ(sigs, expected);

  const OpSchema& dropout = OpRegistry::global().find("dropout");
  const AnyParams dparams = DropoutParams{0.5, 0, 0};
  const std::vector<TensorMeta> x = {TensorMeta{Shape{2, 1, 3}, DataType::kFloat32}};
  const std::vector<SbpSignature> dsigs =
      (*dropout.get<FSbpSignatures>())(InferContext(dropout, dparams, x));
  const std::vector<SbpSignature> dexpected = {
      {{S(0)}, {S(0)}}, {{S(2)}, {S(2)}}, {{B()}, {B()}}, {{P()}, {P()}}};
  EXPECT_EQ(dsigs, dexpected);
}

}  // namespace
}  // namespace ofl
