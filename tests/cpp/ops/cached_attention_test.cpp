// Attention over a KV cache extended in place (Note [Cached attention] in
// oneflowlike/ops/cached_attention.h): steps of a sequence (a prompt, single tokens, several
// after a prefix) give the rows of causal attention over the whole sequence, written out in
// double, with grouped-query heads and sliding windows; the caches hold the steps' rows and
// nothing else changes; the 16-bit dtypes against the float32 kernel; the errors of a step past
// the caches and of bad operands; the SBP signatures.

#include "oneflowlike/ops/cached_attention.h"

#include <cmath>
#include <limits>
#include <vector>

#include "oneflowlike/op.h"
#include "tests/cpp/ops/test_util.h"

namespace ofl {
namespace {

using testing::dtype_tolerance;
using testing::expect_close;
using testing::expect_error;
using testing::make_tensor;
using testing::values_of;

constexpr int64_t kB = 2, kH = 4, kHk = 2, kE = 8, kSlots = 16;
const std::vector<int64_t> kSteps{5, 1, 1, 4, 1};  // 12 positions

// Values of a (B, heads, N, E) sequence, position-major within a head.
std::vector<double> sequence(int64_t heads, int64_t n, uint64_t seed) {
  std::vector<double> v(kB * heads * n * kE);
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(0.37 * static_cast<double>(i) + seed);
  return v;
}

// Rows [from, from + t) of each (batch, head) of a (B, heads, n, E) sequence.
std::vector<double> rows(const std::vector<double>& seq, int64_t heads, int64_t n, int64_t from,
                         int64_t t) {
  std::vector<double> out;
  for (int64_t bh = 0; bh < kB * heads; ++bh) {
    out.insert(out.end(), seq.begin() + (bh * n + from) * kE,
               seq.begin() + (bh * n + from + t) * kE);
  }
  return out;
}

// Causal attention of query position `at` (head h, batch b) over keys (first, at] of the whole
// sequence, in double.
std::vector<double> reference(const std::vector<double>& q, const std::vector<double>& k,
                              const std::vector<double>& v, int64_t n, int64_t window,
                              double scale) {
  std::vector<double> out;
  for (int64_t b = 0; b < kB; ++b) {
    for (int64_t h = 0; h < kH; ++h) {
      const int64_t kv = b * kHk + h / (kH / kHk);
      for (int64_t i = 0; i < n; ++i) {
        const int64_t first = window > 0 ? std::max<int64_t>(0, i - window + 1) : 0;
        std::vector<double> s;
        double top = -std::numeric_limits<double>::infinity();
        for (int64_t j = first; j <= i; ++j) {
          double dot = 0;
          for (int64_t c = 0; c < kE; ++c) {
            dot += q[((b * kH + h) * n + i) * kE + c] * k[(kv * n + j) * kE + c];
          }
          s.push_back(dot * scale);
          top = std::max(top, s.back());
        }
        double sum = 0;
        for (double& x : s) sum += (x = std::exp(x - top));
        for (int64_t c = 0; c < kE; ++c) {
          double acc = 0;
          for (int64_t j = first; j <= i; ++j) acc += s[j - first] / sum * v[(kv * n + j) * kE + c];
          out.push_back(acc);
        }
      }
    }
  }
  return out;
}

// Runs the steps through one pair of caches of `dtype` (filled with 7 first); returns each
// step's out, in double, and the caches after.
struct StepRun {
  std::vector<std::vector<double>> outs;
  Tensor k_cache, v_cache;
};
StepRun run_steps(DataType dtype, int64_t window, double scale, const std::vector<double>& q,
                  const std::vector<double>& k, const std::vector<double>& v, int64_t n) {
  StepRun r;
  const std::vector<double> sevens(kB * kHk * kSlots * kE, 7.0);
  r.k_cache = make_tensor(sevens, Shape{kB, kHk, kSlots, kE}, dtype);
  r.v_cache = make_tensor(sevens, Shape{kB, kHk, kSlots, kE}, dtype);
  int64_t at = 0;
  for (int64_t t : kSteps) {
    const Tensor out = functional::cached_attention(
        make_tensor(rows(q, kH, n, at, t), Shape{kB, kH, t, kE}, dtype),
        make_tensor(rows(k, kHk, n, at, t), Shape{kB, kHk, t, kE}, dtype),
        make_tensor(rows(v, kHk, n, at, t), Shape{kB, kHk, t, kE}, dtype), r.k_cache, r.v_cache,
        make_tensor({static_cast<double>(at)}, Shape{1}, DataType::kInt64), scale, window);
    EXPECT_EQ(out.shape(), (Shape{kB, kH, t, kE}));
    r.outs.push_back(values_of(out));
    at += t;
  }
  return r;
}

class CachedAttentionSteps : public ::testing::TestWithParam<int64_t> {};

TEST_P(CachedAttentionSteps, GiveTheWholeSequencesRowsAndHoldItsKeys) {
  const int64_t window = GetParam(), n = 12;
  const double scale = 1.0 / std::sqrt(static_cast<double>(kE));
  const std::vector<double> q = sequence(kH, n, 1), k = sequence(kHk, n, 2),
                            v = sequence(kHk, n, 3);
  const std::vector<double> want = reference(q, k, v, n, window, scale);
  for (DataType dtype : {DataType::kFloat32, DataType::kFloat64}) {
    const StepRun r = run_steps(dtype, window, scale, q, k, v, n);
    int64_t at = 0;
    for (size_t s = 0; s < kSteps.size(); ++s) {
      const int64_t t = kSteps[s];
      std::vector<double> expected;  // the step's rows of every (batch, head)
      for (int64_t bh = 0; bh < kB * kH; ++bh) {
        expected.insert(expected.end(), want.begin() + (bh * n + at) * kE,
                        want.begin() + (bh * n + at + t) * kE);
      }
      const double tol = dtype_tolerance(dtype);
      ASSERT_EQ(r.outs[s].size(), expected.size());
      for (size_t i = 0; i < expected.size(); ++i) {
        EXPECT_NEAR(r.outs[s][i], expected[i], tol + tol * std::abs(expected[i]))
            << dtype_name(dtype) << " step " << s << " element " << i;
      }
      at += t;
    }
    // The caches: the sequence's keys and values at their positions, 7 after them.
    std::vector<double> k_held, v_held;
    for (int64_t bh = 0; bh < kB * kHk; ++bh) {
      k_held.insert(k_held.end(), k.begin() + bh * n * kE, k.begin() + (bh + 1) * n * kE);
      v_held.insert(v_held.end(), v.begin() + bh * n * kE, v.begin() + (bh + 1) * n * kE);
      k_held.insert(k_held.end(), (kSlots - n) * kE, 7.0);
      v_held.insert(v_held.end(), (kSlots - n) * kE, 7.0);
    }
    expect_close(r.k_cache, k_held, Shape{kB, kHk, kSlots, kE}, 1e-6, 1e-7);
    expect_close(r.v_cache, v_held, Shape{kB, kHk, kSlots, kE}, 1e-6, 1e-7);
  }
}

INSTANTIATE_TEST_SUITE_P(Windows, CachedAttentionSteps, ::testing::Values(0, 1, 3, 20));

TEST(CachedAttention, SixteenBitDtypesFollowTheFloat32Kernel) {
  const int64_t n = 12;
  const std::vector<double> q = sequence(kH, n, 4), k = sequence(kHk, n, 5),
                            v = sequence(kHk, n, 6);
  // The same inputs for each dtype: float32 runs on the 16-bit values.
  for (DataType dtype : {DataType::kBFloat16, DataType::kFloat16}) {
    auto rounded = [&](const std::vector<double>& x) {
      return values_of(make_tensor(x, Shape{static_cast<int64_t>(x.size())}, dtype));
    };
    const StepRun low = run_steps(dtype, 3, 0.5, rounded(q), rounded(k), rounded(v), n);
    const StepRun wide =
        run_steps(DataType::kFloat32, 3, 0.5, rounded(q), rounded(k), rounded(v), n);
    const double tol = 4 * dtype_tolerance(dtype);
    for (size_t s = 0; s < kSteps.size(); ++s) {
      for (size_t i = 0; i < wide.outs[s].size(); ++i) {
        EXPECT_NEAR(low.outs[s][i], wide.outs[s][i], tol + tol * std::abs(wide.outs[s][i]))
            << dtype_name(dtype) << " step " << s;
      }
    }
    EXPECT_EQ(values_of(low.k_cache), values_of(wide.k_cache)) << dtype_name(dtype);
  }
}

TEST(CachedAttention, RefusesAStepPastTheCachesAndBadOperands) {
  const Tensor cache =
      make_tensor(std::vector<double>(kB * kHk * kSlots * kE), Shape{kB, kHk, kSlots, kE});
  const Tensor q = make_tensor(std::vector<double>(kB * kH * 3 * kE), Shape{kB, kH, 3, kE});
  const Tensor k = make_tensor(std::vector<double>(kB * kHk * 3 * kE), Shape{kB, kHk, 3, kE});
  auto at = [](double p) { return make_tensor({p}, Shape{1}, DataType::kInt64); };
  expect_error([&] { functional::cached_attention(q, k, k, cache, cache.clone(), at(14), 1.0, 0); },
               ErrorCode::kOutOfRange,
               "[cached_attention] 3 new positions from position 14 do not fit the caches' 16");
  expect_error([&] { functional::cached_attention(q, k, k, cache, cache.clone(), at(-1), 1.0, 0); },
               ErrorCode::kOutOfRange, "from position -1 do not fit");
  expect_error(
      [&] {
        functional::cached_attention(q, make_tensor(values_of(k), k.shape(), DataType::kFloat64), k,
                                     cache, cache.clone(), at(0), 1.0, 0);
      },
      ErrorCode::kTypeError, "must have the caches' floating dtype");
  expect_error(
      [&] {
        functional::cached_attention(q, k, k, cache, cache.clone(),
                                     make_tensor({0}, Shape{1}, DataType::kInt32), 1.0, 0);
      },
      ErrorCode::kTypeError, "position must be one int64 (shape (1,))");
  const Tensor other_heads = make_tensor(std::vector<double>(kB * 3 * 3 * kE), Shape{kB, 3, 3, kE});
  expect_error(
      [&] {
        functional::cached_attention(q, other_heads, other_heads, cache, cache.clone(), at(0), 1.0,
                                     0);
      },
      ErrorCode::kInvalidArgument, "must fit the caches (B, Hk, L, E)");
  const Tensor long_q = make_tensor(std::vector<double>(kB * kH * 17 * kE), Shape{kB, kH, 17, kE});
  const Tensor long_k =
      make_tensor(std::vector<double>(kB * kHk * 17 * kE), Shape{kB, kHk, 17, kE});
  expect_error(
      [&] {
        functional::cached_attention(long_q, long_k, long_k, cache, cache.clone(), at(0), 1.0, 0);
      },
      ErrorCode::kInvalidArgument, "a step of 17 positions does not fit the caches' 16");
}

TEST(CachedAttention, WritesItsCachesInPlaceAndSplitsByBatchOrHeads) {
  const OpSchema& op = OpRegistry::global().find("cached_attention");
  EXPECT_EQ(mutated_inputs(op, AnyParams(CachedAttentionParams{}), 6), (std::vector<int>{3, 4}));
  const std::vector<TensorMeta> metas{{Shape{kB, kH, 1, kE}, DataType::kFloat32},
                                      {Shape{kB, kHk, 1, kE}, DataType::kFloat32},
                                      {Shape{kB, kHk, 1, kE}, DataType::kFloat32},
                                      {Shape{kB, kHk, kSlots, kE}, DataType::kFloat32},
                                      {Shape{kB, kHk, kSlots, kE}, DataType::kFloat32},
                                      {Shape{1}, DataType::kInt64}};
  const AnyParams params(CachedAttentionParams{});
  const std::vector<SbpSignature> sigs =
      (*op.get<FSbpSignatures>())(InferContext(op, params, metas));
  ASSERT_EQ(sigs.size(), 3u);
  for (int axis : {0, 1}) {
    EXPECT_EQ(sigs[axis].inputs,
              (std::vector<Sbp>{S(axis), S(axis), S(axis), S(axis), S(axis), B()}));
    EXPECT_EQ(sigs[axis].outputs, (std::vector<Sbp>{S(axis)}));
  }
  EXPECT_EQ(sigs[2].outputs, (std::vector<Sbp>{B()}));
}

}  // namespace
}  // namespace ofl
