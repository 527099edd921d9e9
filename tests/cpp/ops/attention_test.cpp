// Fused attention (Note [Fused attention] in oneflowlike/ops/attention.h) against attention
// written out by plain loops in double: causal or not, with masks of several broadcast shapes,
// grouped-query heads, lengths that cut tiles unevenly; gradients against finite differences in
// float64; the errors of bad shapes and dtypes; the SBP signatures.

#include "oneflowlike/ops/attention.h"

#include <omp.h>

#include <cmath>
#include <limits>
#include <string>
#include <thread>

#include "oneflowlike/kernels/cpu/attention.h"
#include "oneflowlike/kernels/cpu/bf16_tiles.h"
#include "oneflowlike/op.h"
#include "oneflowlike/ops/creation.h"
#include "oneflowlike/ops/shape_ops.h"
#include "tests/cpp/ops/test_util.h"

namespace ofl {
namespace {

using testing::dtype_tolerance;
using testing::expect_close;
using testing::expect_error;
using testing::expect_error_phrases;
using testing::expect_gradients_match;
using testing::make_tensor;
using testing::random_tensor;
using testing::values_of;

struct Reference {
  std::vector<double> out, lse;
};

// softmax(q k^T * scale + mask) v by loops, the mask given by its broadcast strides.
Reference reference_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                              double scale, bool causal) {
  const AttentionDims d = attention_dims(q, k, v);
  const std::vector<double> vq = values_of(q), vk = values_of(k), vv = values_of(v);
  const std::vector<double> vm = mask.defined() ? values_of(mask) : std::vector<double>{};
  const MaskStrides ms = mask.defined() ? attention_mask_strides(mask.shape()) : MaskStrides{};
  Reference r;
  for (int64_t b = 0; b < d.batch; ++b) {
    for (int64_t h = 0; h < d.heads; ++h) {
      const int64_t kv = b * d.kv_heads + h / d.group();
      for (int64_t i = 0; i < d.queries; ++i) {
        std::vector<double> s(d.keys);
        double top = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < d.keys; ++j) {
          double dot = 0;
          for (int64_t c = 0; c < d.head_dim; ++c) {
            dot += vq[((b * d.heads + h) * d.queries + i) * d.head_dim + c] *
                   vk[(kv * d.keys + j) * d.head_dim + c];
          }
          s[j] = dot * scale;
          if (mask.defined()) s[j] += vm[b * ms.batch + h * ms.head + i * ms.query + j * ms.key];
          if (causal && j > i) s[j] = -std::numeric_limits<double>::infinity();
          top = std::max(top, s[j]);
        }
        double sum = 0;
        for (double& x : s) sum += (x = std::exp(x - top));
        for (int64_t c = 0; c < d.value_dim; ++c) {
          double acc = 0;
          for (int64_t j = 0; j < d.keys; ++j) {
            acc += s[j] / sum * vv[(kv * d.keys + j) * d.value_dim + c];
          }
          r.out.push_back(acc);
        }
        r.lse.push_back(top + std::log(sum));
      }
    }
  }
  return r;
}

struct Case {
  Shape q, k, v;
  bool causal = false;
  Shape mask = Shape();  // empty: no mask
};

std::vector<Case> cases() {
  return {
      {{2, 3, 5, 4}, {2, 3, 5, 4}, {2, 3, 5, 4}},
      {{2, 3, 5, 4}, {2, 3, 5, 4}, {2, 3, 5, 4}, true},
      // Several tiles, a last one cut short, causal across tile edges; value dim != head dim.
      {{1, 2, 150, 8}, {1, 2, 150, 8}, {1, 2, 150, 6}, true},
      {{1, 2, 70, 8}, {1, 2, 200, 8}, {1, 2, 200, 8}},
      // Grouped-query: 4 query heads over 2 key/value heads.
      {{2, 4, 9, 4}, {2, 2, 9, 4}, {2, 2, 9, 4}, true},
      // Masks: full, broadcast over batch and heads, a key-padding row, per head.
      {{2, 3, 5, 4}, {2, 3, 7, 4}, {2, 3, 7, 4}, false, {2, 3, 5, 7}},
      {{2, 3, 5, 4}, {2, 3, 7, 4}, {2, 3, 7, 4}, false, {5, 7}},
      {{2, 3, 5, 4}, {2, 3, 7, 4}, {2, 3, 7, 4}, false, {2, 1, 1, 7}},
      {{2, 3, 5, 4}, {2, 3, 7, 4}, {2, 3, 7, 4}, false, {3, 1, 7}},
  };
}

// Random q, k, v and the mask (undefined where the case has none), seeds ++*seed on.
struct Inputs {
  Tensor q, k, v, mask;
};
Inputs random_inputs(const Case& c, DataType dtype, int* seed) {
  Inputs in;
  in.q = random_tensor(c.q, dtype, ++*seed);
  in.k = random_tensor(c.k, dtype, ++*seed);
  in.v = random_tensor(c.v, dtype, ++*seed);
  if (c.mask.ndim() > 0) in.mask = random_tensor(c.mask, dtype, ++*seed);
  return in;
}

std::string describe(const Case& c, DataType dtype) {
  return str_cat(dtype_name(dtype), " q ", c.q.to_string(), " k ", c.k.to_string(),
                 c.causal ? " causal" : "", " mask ", c.mask.to_string());
}

TEST(Attention, MatchesAttentionWrittenOut) {
  for (DataType dtype : {DataType::kFloat32, DataType::kFloat64}) {
    int seed = 1;
    for (const Case& c : cases()) {
      SCOPED_TRACE(describe(c, dtype));
      const auto [q, k, v, mask] = random_inputs(c, dtype, &seed);
      const double scale = 1.0 / std::sqrt(static_cast<double>(c.q[3]));
      const auto out = functional::scaled_dot_product_attention(q, k, v, mask, scale, c.causal);
      ASSERT_EQ(out.size(), 2u);
      const Reference r = reference_attention(q, k, v, mask, scale, c.causal);
      const double tol = dtype == DataType::kFloat32 ? 1e-5 : 1e-12;
      expect_close(out[0], r.out, Shape{c.q[0], c.q[1], c.q[2], c.v[3]}, tol, tol);
      expect_close(out[1], r.lse, Shape{c.q[0], c.q[1], c.q[2]}, tol, tol);
    }
  }
}

// The 16-bit dtypes (bfloat16's tiles multiplied in bfloat16 where the CPU can, Note [bfloat16
// tile products], else widened to float32; float16 widened): against the float64 attention of the
// same rounded inputs, within a few roundings of the outputs (Note [Low-precision tolerances]).
TEST(Attention, SixteenBitDtypesMatchTheAttentionOfTheirInputs) {
  for (DataType dtype : {DataType::kBFloat16, DataType::kFloat16}) {
    int seed = 40;
    for (const Case& c : cases()) {
      SCOPED_TRACE(str_cat(dtype_name(dtype), " q ", c.q.to_string(), c.causal ? " causal" : ""));
      const auto [q, k, v, mask] = random_inputs(c, dtype, &seed);
      const auto out = functional::scaled_dot_product_attention(q, k, v, mask, 0.4, c.causal);
      EXPECT_EQ(out[0].dtype(), dtype);
      EXPECT_EQ(out[1].dtype(), DataType::kFloat32);
      const Reference r = reference_attention(q, k, v, mask, 0.4, c.causal);
      const double tol = testing::dtype_tolerance(dtype);
      expect_close(out[0], r.out, Shape{c.q[0], c.q[1], c.q[2], c.v[3]}, tol, tol);
      expect_close(out[1], r.lse, Shape{c.q[0], c.q[1], c.q[2]}, 1e-5, 1e-5);
      // The backward op runs too, in the same dtype.
      const auto grads = functional::scaled_dot_product_attention_grad(out[0], q, k, v, out[0],
                                                                       out[1], mask, 0.4, c.causal);
      EXPECT_EQ(grads[0].dtype(), dtype);
    }
  }
}

// bfloat16's backward (Note [bfloat16 tile products] where the CPU has AVX512-BF16: p and ds
// rounded to bfloat16 as operands, float32 sums; else the float32 kernel on widened copies)
// against the float32 kernel on the same values: within the dtype's tolerance, relative to the
// gradient's largest magnitude.
TEST(Attention, BfloatSixteenGradientsMatchTheFloat32Kernel) {
  int seed = 70;
  std::vector<Case> all = cases();
  // An odd head_dim (the products' last pair has one element), GQA over several key tiles.
  all.push_back({{1, 2, 70, 5}, {1, 2, 140, 5}, {1, 2, 140, 3}, true});
  all.push_back({{1, 4, 130, 8}, {1, 2, 130, 8}, {1, 2, 130, 8}, true});
  for (const Case& c : all) {
    SCOPED_TRACE(str_cat("q ", c.q.to_string(), " k ", c.k.to_string(), c.causal ? " causal" : "",
                         " mask ", c.mask.to_string(),
                         cpu::bf16_tiles::available() ? " (tile products)" : " (widened)"));
    const DataType bf16 = DataType::kBFloat16;
    const auto [q, k, v, mask] = random_inputs(c, bf16, &seed);
    const Tensor dout = random_tensor(Shape{c.q[0], c.q[1], c.q[2], c.v[3]}, bf16, ++seed);
    const auto up = [](const Tensor& t) {
      return t.defined() ? functional::cast(t, DataType::kFloat32) : Tensor();
    };
    const auto fwd = functional::scaled_dot_product_attention(q, k, v, mask, 0.4, c.causal);
    const auto grads = functional::scaled_dot_product_attention_grad(dout, q, k, v, fwd[0], fwd[1],
                                                                     mask, 0.4, c.causal);
    const auto fwd32 =
        functional::scaled_dot_product_attention(up(q), up(k), up(v), up(mask), 0.4, c.causal);
    const auto want = functional::scaled_dot_product_attention_grad(
        up(dout), up(q), up(k), up(v), fwd32[0], fwd32[1], up(mask), 0.4, c.causal);
    for (int i = 0; i < 3; ++i) {
      SCOPED_TRACE(std::string("d") + "qkv"[i]);
      ASSERT_EQ(grads[i].dtype(), bf16);
      const std::vector<double> expected = values_of(want[i]);
      double largest = 0;
      for (double x : expected) largest = std::max(largest, std::abs(x));
      const double tol = testing::dtype_tolerance(bf16);
      expect_close(grads[i], expected, want[i].shape(), tol, tol * largest);
    }
  }
}

TEST(Attention, GradientsMatchFiniteDifferences) {
  for (const Case& c : cases()) {
    if (c.q[2] > 10 || c.k[2] > 10) continue;  // the small cases: finite differences are slow
    SCOPED_TRACE(
        str_cat("q ", c.q.to_string(), c.causal ? " causal" : "", " mask ", c.mask.to_string()));
    const Tensor mask = c.mask.ndim() > 0 ? random_tensor(c.mask, DataType::kFloat64, 9) : Tensor();
    expect_gradients_match(
        [&](const std::vector<Tensor>& in) {
          return std::vector<Tensor>{functional::scaled_dot_product_attention(
              in[0], in[1], in[2], mask, 0.7, c.causal)[0]};
        },
        {random_tensor(c.q, DataType::kFloat64, 3), random_tensor(c.k, DataType::kFloat64, 4),
         random_tensor(c.v, DataType::kFloat64, 5)},
        1e-6, 1e-6);
  }
}

// Note [Attention workspace]: the most the bfloat16 kernel holds on a thread during a call (its
// packed tiles and rounded probabilities) is what attention_workspace_bytes counts over the
// float32 kernel's scratch, plus the backward's float32 sums of dq, dk and dv; the thread frees
// it when the call ends, so a forward after a backward holds the forward's again. One kernel
// thread, on a thread of the test's own.
TEST(Attention, WorkspaceCountsWhatTheBfloatSixteenKernelHolds) {
  if (!cpu::bf16_tiles::available()) {
    GTEST_SKIP() << "this CPU has no AVX512-BF16: bfloat16 attention widens to float32 there";
  }
  const DataType bf16 = DataType::kBFloat16;
  struct Shapes {
    Shape q, k, v;
    bool causal;
    int64_t zigzag = 0;
  };
  for (const Shapes& c :
       std::vector<Shapes>{{{1, 4, 130, 8}, {1, 2, 200, 8}, {1, 2, 200, 6}, false},
                           {{2, 2, 150, 5}, {2, 2, 150, 5}, {2, 2, 150, 3}, true},
                           {{1, 3, 40, 16}, {1, 3, 40, 16}, {1, 3, 40, 16}, true},
                           // Causal with fewer queries than keys: the key tiles past the last query
                           // are never read, so never packed.
                           {{1, 2, 70, 8}, {1, 2, 300, 8}, {1, 2, 300, 8}, true},
                           // The zigzag order over 2 pieces: key tiles cut at the 60-row chunks'
                           // edges (Note [Zigzag order]).
                           {{1, 2, 240, 8}, {1, 2, 240, 8}, {1, 2, 240, 8}, true, 2}}) {
    SCOPED_TRACE(str_cat("q ", c.q.to_string(), " k ", c.k.to_string(), " v ", c.v.to_string(),
                         c.causal ? " causal" : "", " zigzag ", c.zigzag));
    const Tensor q = random_tensor(c.q, bf16, 1), k = random_tensor(c.k, bf16, 2),
                 v = random_tensor(c.v, bf16, 3);
    const Tensor dout = random_tensor(Shape{c.q[0], c.q[1], c.q[2], c.v[3]}, bf16, 4);
    AttentionDims d = attention_dims(q, k, v);
    d.zigzag = c.zigzag;
    auto forward_op = [&] {
      return functional::scaled_dot_product_attention(q, k, v, Tensor(), 0.4, c.causal, false,
                                                      c.zigzag);
    };
    const auto fwd = forward_op();
    int64_t forward = 0, backward = 0, forward_again = 0;
    std::thread([&] {
      omp_set_num_threads(1);
      cpu::attention_thread_peak_bytes();  // from here
      forward_op();
      forward = cpu::attention_thread_peak_bytes();
      functional::scaled_dot_product_attention_grad(dout, q, k, v, fwd[0], fwd[1], Tensor(), 0.4,
                                                    c.causal, false, c.zigzag);
      backward = cpu::attention_thread_peak_bytes();
      forward_op();
      forward_again = cpu::attention_thread_peak_bytes();
    }).join();
    auto extra = [&](bool grad) {
      return cpu::attention_workspace_bytes(grad, bf16, d, c.causal, 1) -
             cpu::attention_workspace_bytes(grad, DataType::kFloat32, d, c.causal, 1);
    };
    EXPECT_GT(forward, 0);
    EXPECT_EQ(extra(false), forward);
    const int64_t grad_sums =
        4 * (d.group() * d.queries * d.head_dim + d.keys * (d.head_dim + d.value_dim));
    EXPECT_EQ(extra(true), backward + grad_sums);
    EXPECT_EQ(forward_again, forward);
    // On more threads each holds its own, up to one per task.
    EXPECT_EQ(cpu::attention_workspace_bytes(false, bf16, d, c.causal, 2),
              2 * cpu::attention_workspace_bytes(false, bf16, d, c.causal, 1));
  }
}

// The backward op over several tiles (too large for finite differences) against the gradient
// of attention written out: dv = p^T dout, dq and dk through ds = p (dp - D).
TEST(Attention, BackwardOpMatchesTheGradientWrittenOut) {
  const Shape qs{1, 2, 150, 8}, vs{1, 2, 150, 6};
  const Tensor q = random_tensor(qs, DataType::kFloat64, 11);
  const Tensor k = random_tensor(qs, DataType::kFloat64, 12);
  const Tensor v = random_tensor(vs, DataType::kFloat64, 13);
  const Tensor dout = random_tensor(Shape{1, 2, 150, 6}, DataType::kFloat64, 14);
  const double scale = 0.3;
  const auto fwd = functional::scaled_dot_product_attention(q, k, v, Tensor(), scale, true);
  const auto grads = functional::scaled_dot_product_attention_grad(dout, q, k, v, fwd[0], fwd[1],
                                                                   Tensor(), scale, true);
  const std::vector<double> vq = values_of(q), vk = values_of(k), vv = values_of(v),
                            vd = values_of(dout);
  const int64_t n = 150, e = 8, ev = 6;
  std::vector<double> dq(2 * n * e, 0.0), dk(2 * n * e, 0.0), dv(2 * n * ev, 0.0);
  for (int64_t h = 0; h < 2; ++h) {
    const double* Q = vq.data() + h * n * e;
    const double* K = vk.data() + h * n * e;
    const double* V = vv.data() + h * n * ev;
    const double* G = vd.data() + h * n * ev;
    for (int64_t i = 0; i < n; ++i) {
      std::vector<double> p(i + 1);
      double top = -1e300, sum = 0;
      for (int64_t j = 0; j <= i; ++j) {
        double dot = 0;
        for (int64_t c = 0; c < e; ++c) dot += Q[i * e + c] * K[j * e + c];
        top = std::max(top, p[j] = dot * scale);
      }
      for (double& x : p) sum += (x = std::exp(x - top));
      for (double& x : p) x /= sum;
      std::vector<double> dp(i + 1);
      double big_d = 0;
      for (int64_t j = 0; j <= i; ++j) {
        for (int64_t c = 0; c < ev; ++c) {
          dv[(h * n + j) * ev + c] += p[j] * G[i * ev + c];
          dp[j] += G[i * ev + c] * V[j * ev + c];
        }
        big_d += p[j] * dp[j];
      }
      for (int64_t j = 0; j <= i; ++j) {
        const double ds = p[j] * (dp[j] - big_d) * scale;
        for (int64_t c = 0; c < e; ++c) {
          dq[(h * n + i) * e + c] += ds * K[j * e + c];
          dk[(h * n + j) * e + c] += ds * Q[i * e + c];
        }
      }
    }
  }
  expect_close(grads[0], dq, qs, 1e-10, 1e-10);
  expect_close(grads[1], dk, qs, 1e-10, 1e-10);
  expect_close(grads[2], dv, vs, 1e-10, 1e-10);
}

// Note [Rows with every key masked]: out 0, as PyTorch's SDPA gives.
TEST(Attention, AFullyMaskedRowIsZeroAsInPyTorch) {
  const Tensor q = random_tensor({1, 1, 2, 4}, DataType::kFloat32, 1);
  const Tensor k = random_tensor({1, 1, 3, 4}, DataType::kFloat32, 2);
  std::vector<double> m(6, 0.0);
  for (int j = 0; j < 3; ++j) m[j] = -std::numeric_limits<double>::infinity();  // row 0 hidden
  const Tensor mask = testing::make_tensor(m, {2, 3}, DataType::kFloat32);
  const auto out = functional::scaled_dot_product_attention(q, k, k, mask, 0.5, false);
  const std::vector<double> o = values_of(out[0]);
  for (int c = 0; c < 4; ++c) {
    EXPECT_EQ(o[c], 0.0) << c;
    EXPECT_FALSE(std::isnan(o[4 + c])) << c;
    EXPECT_NE(o[4 + c], 0.0) << c;
  }
}

TEST(Attention, BadShapesAndDtypesRaiseNamingThem) {
  const auto f32 = DataType::kFloat32;
  const Tensor q = random_tensor({2, 4, 5, 8}, f32, 1);
  const Tensor k = random_tensor({2, 4, 6, 8}, f32, 2);
  expect_error(
      [&] {
        functional::scaled_dot_product_attention(q, random_tensor({2, 4, 6, 7}, f32, 3), k,
                                                 Tensor(), 1.0, false);
      },
      ErrorCode::kInvalidArgument,
      "q and k must have one head_dim (the last axis). However, got q (2, 4, 5, 8) float32, k "
      "(2, 4, 6, 7) float32");
  expect_error(
      [&] {
        functional::scaled_dot_product_attention(q, random_tensor({2, 3, 6, 8}, f32, 3),
                                                 random_tensor({2, 3, 6, 8}, f32, 4), Tensor(), 1.0,
                                                 false);
      },
      ErrorCode::kInvalidArgument, "dividing q's (grouped-query attention)");
  expect_error(
      [&] {
        functional::scaled_dot_product_attention(random_tensor({4, 5, 8}, f32, 3), k, k, Tensor(),
                                                 1.0, false);
      },
      ErrorCode::kInvalidArgument, "q, k and v must be 4-d");
  expect_error(
      [&] {
        functional::scaled_dot_product_attention(q, k, k, random_tensor({5, 5}, f32, 5), 1.0,
                                                 false);
      },
      ErrorCode::kInvalidArgument,
      "attn_mask must broadcast to (batch, heads, L, S) (2, 4, 5, 6). However, got attn_mask (5, "
      "5)");
  expect_error(
      [&] {
        functional::scaled_dot_product_attention(
            q, random_tensor({2, 4, 6, 8}, DataType::kFloat64, 6), k, Tensor(), 1.0, false);
      },
      ErrorCode::kTypeError, "q, k and v must have one floating dtype");
  // A bfloat16 backward reads its lse in float32 (what the forward gives): another dtype is
  // refused, not read as float32.
  const auto bf16 = DataType::kBFloat16;
  const Tensor qb = random_tensor({1, 2, 5, 8}, bf16, 7);
  expect_error(
      [&] {
        functional::scaled_dot_product_attention_grad(
            qb, qb, qb, qb, qb, random_tensor({1, 2, 5}, bf16, 8), Tensor(), 1.0, false);
      },
      ErrorCode::kTypeError,
      "[scaled_dot_product_attention_grad] lse must be float32 (what the forward op gives for "
      "bfloat16)");
}

// Batches, heads and queries split; split along the queries, k and v are whole and their
// gradients partial (Note [Sequence-split attention]).
TEST(Attention, SbpSignaturesSplitBatchesHeadsAndQueries) {
  auto signatures = [](const char* name, std::vector<TensorMeta> metas) {
    const OpSchema& op = OpRegistry::global().find(name);
    const AnyParams params = AttentionParams{0.5, true};
    std::vector<std::string> got;
    for (const auto& s : (*op.get<FSbpSignatures>())(InferContext(op, params, metas))) {
      got.push_back(s.to_string());
    }
    return got;
  };
  const TensorMeta x{Shape{2, 4, 5, 8}, DataType::kFloat32};
  EXPECT_EQ(signatures("scaled_dot_product_attention", {x, x, x}),
            (std::vector<std::string>{"S(0) x S(0) x S(0) -> S(0), S(0)",
                                      "S(1) x S(1) x S(1) -> S(1), S(1)",
                                      "S(2) x B x B -> S(2), S(2)", "B x B x B -> B, B"}));
  // Grouped-query heads split too: the op is TAlignedSplits, so SBP inference takes S(1) only
  // where both head counts divide evenly (Note [Aligned splits]; the SBP sweep checks it).
  const TensorMeta kv{Shape{2, 2, 5, 8}, DataType::kFloat32};
  EXPECT_EQ(signatures("scaled_dot_product_attention", {x, kv, kv}),
            (std::vector<std::string>{"S(0) x S(0) x S(0) -> S(0), S(0)",
                                      "S(1) x S(1) x S(1) -> S(1), S(1)",
                                      "S(2) x B x B -> S(2), S(2)", "B x B x B -> B, B"}));
  EXPECT_TRUE(OpRegistry::global().find("scaled_dot_product_attention").has<TAlignedSplits>());
  // A key-padding mask (batch, 1, 1, S) splits with the batch and stays whole across heads.
  const TensorMeta pad{Shape{2, 1, 1, 5}, DataType::kFloat32};
  EXPECT_EQ(signatures("scaled_dot_product_attention_masked", {x, x, x, pad}),
            (std::vector<std::string>{"S(0) x S(0) x S(0) x S(0) -> S(0), S(0)",
                                      "S(1) x S(1) x S(1) x B -> S(1), S(1)",
                                      "S(2) x B x B x B -> S(2), S(2)", "B x B x B x B -> B, B"}));
  // A mask per query row splits with the queries.
  const TensorMeta rows{Shape{5, 5}, DataType::kFloat32};
  EXPECT_EQ(signatures("scaled_dot_product_attention_masked", {x, x, x, rows})[2],
            "S(2) x B x B x S(0) -> S(2), S(2)");
  const TensorMeta lse{Shape{2, 4, 5}, DataType::kFloat32};
  EXPECT_EQ(signatures("scaled_dot_product_attention_grad", {x, x, x, x, x, lse}),
            (std::vector<std::string>{"S(0) x S(0) x S(0) x S(0) x S(0) x S(0) -> S(0), S(0), S(0)",
                                      "S(1) x S(1) x S(1) x S(1) x S(1) x S(1) -> S(1), S(1), S(1)",
                                      "S(2) x S(2) x B x B x S(2) x S(2) -> S(2), P, P",
                                      "P x B x B x B x B x B -> P, P, P",
                                      "B x B x B x B x B x B -> B, B, B"}));
}

// Rows [begin, end) of `t` along `axis`.
Tensor rows_between(const Tensor& t, int axis, int64_t begin, int64_t end) {
  std::vector<int64_t> start(t.shape().ndim(), 0), stop = t.shape().dims();
  start[axis] = begin;
  stop[axis] = end;
  return functional::slice(t, start, stop, std::vector<int64_t>(t.shape().ndim(), 1));
}

// The region of `shape` a piece of rows [begin, end) along `axis` covers.
std::vector<Range> piece_region(const Shape& shape, int axis, int64_t begin, int64_t end) {
  std::vector<Range> region;
  for (int64_t n : shape.dims()) region.push_back({0, n});
  region[axis] = {begin, end};
  return region;
}

// Runs the CPU kernel of `op` on `inputs` as the task of the piece `region` of output 0 (the
// compiler's position-dependent tasks get their region so); outputs shaped `shapes`.
std::vector<Tensor> run_piece(const char* op, const AttentionParams& params,
                              const std::vector<Tensor>& inputs, const std::vector<Shape>& shapes,
                              const std::vector<DataType>& dtypes, const std::vector<Range>& region,
                              const Shape& logical) {
  const OpSchema& schema = OpRegistry::global().find(op);
  const KernelFn kernel = schema.find_kernel(DeviceType::kCPU, inputs[0].dtype());
  std::vector<Tensor> outputs;
  for (size_t i = 0; i < shapes.size(); ++i) outputs.push_back(Tensor::empty(shapes[i], dtypes[i]));
  const AnyParams any = params;
  KernelContext ctx{any, inputs, outputs};
  ctx.output_region = &region;
  ctx.logical_output_shape = &logical;
  kernel(ctx);
  return outputs;
}

// Note [Sequence-split attention]: causal attention computed by pieces of the queries (uneven,
// across query and key tiles), each kernel told its piece's place, gives the rows of the whole
// op, forward and dq, and dk and dv as the sum of the pieces' partial gradients: within the
// dtype's tolerance, not bit for bit, since a tile's products block their sums by its number of
// rows. Heads-first and sequence-first, grouped-query heads, float32, float64 and bfloat16
// (tiles where the CPU has them). Without the offsets a piece's rows would see the wrong keys.
TEST(Attention, CausalPiecesOfTheQueriesGiveTheWholeOpsRows) {
  const int64_t L = 200;
  // Offsets 40 and 170: the backward's first query tile of a later key tile is then neither 0
  // nor the tile of the key itself.
  const std::vector<std::pair<int64_t, int64_t>> pieces{{0, 40}, {40, 170}, {170, 200}};
  for (DataType dtype : {DataType::kFloat32, DataType::kFloat64, DataType::kBFloat16}) {
    for (bool sequence_first : {false, true}) {
      SCOPED_TRACE(str_cat(dtype_name(dtype), sequence_first ? " sequence-first" : ""));
      const int axis = sequence_first ? 1 : 2;  // the queries' axis of q, out, dq
      auto shaped = [&](int64_t heads, int64_t rows, int64_t width) {
        return sequence_first ? Shape{2, rows, heads, width} : Shape{2, heads, rows, width};
      };
      const Tensor q = random_tensor(shaped(4, L, 8), dtype, 1);
      const Tensor k = random_tensor(shaped(2, L, 8), dtype, 2);
      const Tensor v = random_tensor(shaped(2, L, 6), dtype, 3);
      const AttentionParams params{0.3, true, sequence_first};
      const auto whole =
          functional::scaled_dot_product_attention(q, k, v, Tensor(), 0.3, true, sequence_first);
      const Tensor dout = random_tensor(whole[0].shape(), dtype, 4);
      const auto grads = functional::scaled_dot_product_attention_grad(
          dout, q, k, v, whole[0], whole[1], Tensor(), 0.3, true, sequence_first);
      std::vector<double> dk(values_of(grads[1]).size()), dv(values_of(grads[2]).size());
      for (const auto& [begin, end] : pieces) {
        SCOPED_TRACE(str_cat("queries [", begin, ", ", end, ")"));
        auto rows = [&](const Tensor& t, int at) { return rows_between(t, at, begin, end); };
        const std::vector<Range> region = piece_region(whole[0].shape(), axis, begin, end);
        const Tensor qp = rows(q, axis), doutp = rows(dout, axis);
        const auto out = run_piece("scaled_dot_product_attention", params, {qp, k, v},
                                   {rows(whole[0], axis).shape(), rows(whole[1], 2).shape()},
                                   {dtype, whole[1].dtype()}, region, whole[0].shape());
        const double tol = dtype_tolerance(dtype);
        expect_close(out[0], values_of(rows(whole[0], axis)), out[0].shape(), tol, tol);
        expect_close(out[1], values_of(rows(whole[1], 2)), out[1].shape(), tol, tol);
        const auto g = run_piece(
            "scaled_dot_product_attention_grad", params, {doutp, qp, k, v, out[0], out[1]},
            {qp.shape(), k.shape(), v.shape()}, {dtype, dtype, dtype}, region, q.shape());
        expect_close(g[0], values_of(rows(grads[0], axis)), g[0].shape(), tol, tol);
        const std::vector<double> gk = values_of(g[1]), gv = values_of(g[2]);
        for (size_t i = 0; i < dk.size(); ++i) dk[i] += gk[i];
        for (size_t i = 0; i < dv.size(); ++i) dv[i] += gv[i];
      }
      // Each piece's partial sums were rounded once.
      const double tol = 4 * dtype_tolerance(dtype);
      expect_close(grads[1], dk, k.shape(), tol, tol);
      expect_close(grads[2], dv, v.shape(), tol, tol);
    }
  }
}

// `t` with axis `axis` cut in 2n chunks put in Note [Zigzag order]'s order (chunks 0, 2n-1, 1,
// 2n-2, ...), or with `back` returned to the sequence's order.
Tensor zigzag_rows(const Tensor& t, int axis, int64_t n, bool back = false) {
  const int64_t chunk = t.shape()[axis] / (2 * n);
  std::vector<Tensor> chunks;
  for (int64_t s = 0; s < 2 * n; ++s) {
    const int64_t c =
        back ? (s < n ? 2 * s : 2 * (2 * n - 1 - s) + 1) : (s % 2 == 0 ? s / 2 : 2 * n - 1 - s / 2);
    chunks.push_back(rows_between(t, axis, c * chunk, (c + 1) * chunk));
  }
  return functional::concat(chunks, axis);
}

// Note [Zigzag order]: q, k and v stored in the zigzag order over n pieces give the rows of
// attention in the sequence's order, put in that order: whole, and by contiguous pieces of the
// stored queries (the n pieces context parallelism gives them, and cuts inside chunks and
// tiles), forward and backward, dk and dv the pieces' sums. Chunks of 60 and 40 rows straddle
// the 64-row query tiles; chunks of 150 make key tiles cut at 128 rows and at a chunk's end.
// Without the positions mapped back a stored row would see the keys of its stored index.
TEST(Attention, ZigzagOrderedQueriesGiveTheSequencesRowsInThatOrder) {
  const int64_t L = 240;
  for (DataType dtype : {DataType::kFloat32, DataType::kFloat64, DataType::kBFloat16}) {
    for (bool sequence_first : {false, true}) {
      for (int64_t n : {2, 3}) {
        SCOPED_TRACE(
            str_cat(dtype_name(dtype), sequence_first ? " sequence-first" : "", " zigzag ", n));
        const int axis = sequence_first ? 1 : 2;  // the queries' axis of q, out, dq
        auto shaped = [&](int64_t heads, int64_t width) {
          return sequence_first ? Shape{2, L, heads, width} : Shape{2, heads, L, width};
        };
        const Tensor q = random_tensor(shaped(4, 8), dtype, 1);
        const Tensor k = random_tensor(shaped(2, 8), dtype, 2);
        const Tensor v = random_tensor(shaped(2, 6), dtype, 3);
        const auto whole =
            functional::scaled_dot_product_attention(q, k, v, Tensor(), 0.3, true, sequence_first);
        const Tensor dout = random_tensor(whole[0].shape(), dtype, 4);
        const auto grads = functional::scaled_dot_product_attention_grad(
            dout, q, k, v, whole[0], whole[1], Tensor(), 0.3, true, sequence_first);
        const Tensor qz = zigzag_rows(q, axis, n), doutz = zigzag_rows(dout, axis, n);
        const Tensor kz = zigzag_rows(k, axis, n), vz = zigzag_rows(v, axis, n);
        const std::vector<double> dk_z = values_of(zigzag_rows(grads[1], axis, n)),
                                  dv_z = values_of(zigzag_rows(grads[2], axis, n));
        const double tol = dtype_tolerance(dtype);
        // The whole op.
        const auto outz = functional::scaled_dot_product_attention(qz, kz, vz, Tensor(), 0.3, true,
                                                                   sequence_first, n);
        expect_close(outz[0], values_of(zigzag_rows(whole[0], axis, n)), outz[0].shape(), tol, tol);
        expect_close(outz[1], values_of(zigzag_rows(whole[1], 2, n)), outz[1].shape(), tol, tol);
        const auto gz = functional::scaled_dot_product_attention_grad(
            doutz, qz, kz, vz, outz[0], outz[1], Tensor(), 0.3, true, sequence_first, n);
        expect_close(zigzag_rows(gz[0], axis, n, /*back=*/true), values_of(grads[0]), q.shape(),
                     tol, tol);
        expect_close(gz[1], dk_z, k.shape(), 4 * tol, 4 * tol);
        expect_close(gz[2], dv_z, v.shape(), 4 * tol, 4 * tol);
        // By pieces of the stored queries: the n even ones, and uneven cuts.
        const AttentionParams params{0.3, true, sequence_first, n};
        std::vector<std::vector<int64_t>> cuts{{0}, {0, 37, 170}};
        for (int64_t i = 1; i < n; ++i) cuts[0].push_back(i * L / n);
        for (std::vector<int64_t> starts : cuts) {
          starts.push_back(L);
          std::vector<double> dk(values_of(k).size()), dv(values_of(v).size());
          for (size_t p = 0; p + 1 < starts.size(); ++p) {
            const int64_t begin = starts[p], end = starts[p + 1];
            SCOPED_TRACE(str_cat("stored queries [", begin, ", ", end, ")"));
            auto rows = [&](const Tensor& t, int at) { return rows_between(t, at, begin, end); };
            const std::vector<Range> region = piece_region(whole[0].shape(), axis, begin, end);
            const Tensor qp = rows(qz, axis);
            const auto out = run_piece("scaled_dot_product_attention", params, {qp, kz, vz},
                                       {rows(outz[0], axis).shape(), rows(outz[1], 2).shape()},
                                       {dtype, outz[1].dtype()}, region, whole[0].shape());
            expect_close(out[0], values_of(rows(outz[0], axis)), out[0].shape(), tol, tol);
            expect_close(out[1], values_of(rows(outz[1], 2)), out[1].shape(), tol, tol);
            const auto g = run_piece("scaled_dot_product_attention_grad", params,
                                     {rows(doutz, axis), qp, kz, vz, out[0], out[1]},
                                     {qp.shape(), k.shape(), v.shape()}, {dtype, dtype, dtype},
                                     region, q.shape());
            expect_close(g[0], values_of(rows(gz[0], axis)), g[0].shape(), tol, tol);
            const std::vector<double> gk = values_of(g[1]), gv = values_of(g[2]);
            for (size_t i = 0; i < dk.size(); ++i) dk[i] += gk[i];
            for (size_t i = 0; i < dv.size(); ++i) dv[i] += gv[i];
          }
          expect_close(zigzag_rows(grads[1], axis, n), dk, k.shape(), 4 * tol, 4 * tol);
          expect_close(zigzag_rows(grads[2], axis, n), dv, v.shape(), 4 * tol, 4 * tol);
        }
      }
    }
  }
}

// Runs `op` and its gradient op ("<op>_grad") on the stored queries [0, 37), [37, 170) and
// [170, L) of qkvd = {q, k, v, dout} (each piece told its place, `extra` inputs whole), and
// checks each piece's out, lse and dq against the rows of the whole op's `out` and `grads`, and
// the pieces' dk and dv summed against the whole's. `axis`: the queries' axis of q.
void expect_pieces_give_the_whole(const std::string& op, const AttentionParams& params,
                                  const std::vector<Tensor>& qkvd, const std::vector<Tensor>& extra,
                                  const std::vector<Tensor>& out, const std::vector<Tensor>& grads,
                                  int axis) {
  const Tensor &q = qkvd[0], &k = qkvd[1], &v = qkvd[2], &dout = qkvd[3];
  const DataType dtype = q.dtype();
  const double tol = dtype_tolerance(dtype);
  const int64_t L = q.shape()[axis];
  std::vector<double> dk(values_of(k).size()), dv(values_of(v).size());
  for (const auto& [begin, end] :
       std::vector<std::pair<int64_t, int64_t>>{{0, 37}, {37, 170}, {170, L}}) {
    SCOPED_TRACE(str_cat("stored queries [", begin, ", ", end, ")"));
    auto rows = [&](const Tensor& t, int at) { return rows_between(t, at, begin, end); };
    const std::vector<Range> region = piece_region(out[0].shape(), axis, begin, end);
    const Tensor qp = rows(q, axis);
    std::vector<Tensor> inputs{qp, k, v};
    inputs.insert(inputs.end(), extra.begin(), extra.end());
    const auto piece =
        run_piece(op.c_str(), params, inputs, {rows(out[0], axis).shape(), rows(out[1], 2).shape()},
                  {dtype, out[1].dtype()}, region, out[0].shape());
    expect_close(piece[0], values_of(rows(out[0], axis)), piece[0].shape(), tol, tol);
    expect_close(piece[1], values_of(rows(out[1], 2)), piece[1].shape(), tol, tol);
    std::vector<Tensor> grad_inputs{rows(dout, axis), qp, k, v, piece[0], piece[1]};
    grad_inputs.insert(grad_inputs.end(), extra.begin(), extra.end());
    const auto g =
        run_piece((op + "_grad").c_str(), params, grad_inputs, {qp.shape(), k.shape(), v.shape()},
                  {dtype, dtype, dtype}, region, q.shape());
    expect_close(g[0], values_of(rows(grads[0], axis)), g[0].shape(), tol, tol);
    const std::vector<double> gk = values_of(g[1]), gv = values_of(g[2]);
    for (size_t i = 0; i < dk.size(); ++i) dk[i] += gk[i];
    for (size_t i = 0; i < dv.size(); ++i) dv[i] += gv[i];
  }
  expect_close(grads[1], dk, k.shape(), 4 * tol, 4 * tol);
  expect_close(grads[2], dv, v.shape(), 4 * tol, 4 * tol);
}

// Note [Sliding window]: causal attention whose queries see their w latest keys gives the
// attention of a mask hiding the others (the masked op, not causal), forward and backward:
// windows of one key, inside one tile, across key tiles, and longer than the sequence; in the
// sequence's order and the zigzag order (whole, and by uneven pieces of the stored queries);
// float32, float64 and bfloat16, heads-first and sequence-first. A window as long as the
// sequence is causal attention, bit for bit. Without the rows' first keys the rows would see
// the hidden keys too.
TEST(Attention, SlidingWindowIsTheMaskOfItsLatestKeys) {
  const int64_t L = 240;
  const double inf = std::numeric_limits<double>::infinity();
  for (DataType dtype : {DataType::kFloat32, DataType::kFloat64, DataType::kBFloat16}) {
    for (bool sequence_first : {false, true}) {
      const int axis = sequence_first ? 1 : 2;  // the queries' axis of q, out, dq
      auto shaped = [&](int64_t heads, int64_t width) {
        return sequence_first ? Shape{2, L, heads, width} : Shape{2, heads, L, width};
      };
      const Tensor q = random_tensor(shaped(4, 8), dtype, 1);
      const Tensor k = random_tensor(shaped(2, 8), dtype, 2);
      const Tensor v = random_tensor(shaped(2, 6), dtype, 3);
      const auto causal =
          functional::scaled_dot_product_attention(q, k, v, Tensor(), 0.3, true, sequence_first);
      const Tensor dout = random_tensor(causal[0].shape(), dtype, 4);
      const double tol = dtype_tolerance(dtype);
      for (int64_t w : {1, 50, 130, 300}) {
        SCOPED_TRACE(
            str_cat(dtype_name(dtype), sequence_first ? " sequence-first" : "", " window ", w));
        std::vector<double> hidden(L * L, 0.0);
        for (int64_t i = 0; i < L; ++i) {
          for (int64_t j = 0; j < L; ++j) {
            if (j > i || j <= i - w) hidden[i * L + j] = -inf;
          }
        }
        const Tensor mask = make_tensor(hidden, Shape{L, L}, dtype);
        const auto masked =
            functional::scaled_dot_product_attention(q, k, v, mask, 0.3, false, sequence_first);
        const auto masked_grads = functional::scaled_dot_product_attention_grad(
            dout, q, k, v, masked[0], masked[1], mask, 0.3, false, sequence_first);
        for (int64_t n : {0, 2}) {
          SCOPED_TRACE(str_cat("zigzag ", n));
          // In the zigzag order the inputs are stored in it, and the results compared in it.
          auto stored = [&](const Tensor& t, int at) { return n ? zigzag_rows(t, at, n) : t; };
          const Tensor qz = stored(q, axis), kz = stored(k, axis), vz = stored(v, axis);
          const Tensor doutz = stored(dout, axis);
          const auto out = functional::scaled_dot_product_attention(qz, kz, vz, Tensor(), 0.3, true,
                                                                    sequence_first, n, w);
          expect_close(out[0], values_of(stored(masked[0], axis)), out[0].shape(), tol, tol);
          expect_close(out[1], values_of(stored(masked[1], 2)), out[1].shape(), tol, tol);
          const auto grads = functional::scaled_dot_product_attention_grad(
              doutz, qz, kz, vz, out[0], out[1], Tensor(), 0.3, true, sequence_first, n, w);
          for (int i = 0; i < 3; ++i) {
            expect_close(grads[i], values_of(stored(masked_grads[i], axis)), grads[i].shape(),
                         4 * tol, 4 * tol);
          }
          if (w >= L && n == 0) {  // no key hidden but the later ones: causal attention's bits
            EXPECT_EQ(values_of(out[0]), values_of(causal[0]));
            EXPECT_EQ(values_of(out[1]), values_of(causal[1]));
          }
          if (n == 0 || w != 50) continue;
          // By uneven pieces of the stored queries, each told its place.
          expect_pieces_give_the_whole("scaled_dot_product_attention",
                                       AttentionParams{0.3, true, sequence_first, n, w},
                                       {qz, kz, vz, doutz}, {}, out, grads, axis);
        }
      }
    }
  }
}

// Note [Packed documents]: document ids give the attention of a mask that hides every key of
// another document (the masked op), forward and backward: causal, causal with a window, and not
// causal; batch row 0 packs documents of 70, 5, 100 and 65 positions (across query and key
// tiles), row 1 repeats two ids in turn (ids need not rise: the tiles' ranges of ids meet
// everywhere); int32 and int64 ids; in the zigzag order (ids stored in it too), whole and by
// uneven pieces of the stored queries; float32, float64 and bfloat16, both layouts. Without the
// ids' mask, or with a tile skipped whose ids meet the queries', the rows would differ.
TEST(Attention, DocumentIdsAreTheMaskOfEachTokensDocument) {
  const int64_t L = 240;
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> ids(2 * L);
  for (int64_t j = 0; j < L; ++j) {
    ids[j] = j < 70 ? 0 : j < 75 ? 1 : j < 175 ? 2 : 3;
    ids[L + j] = (j / 30) % 2;
  }
  struct Kind {
    bool causal;
    int64_t window;
  };
  for (DataType dtype : {DataType::kFloat32, DataType::kFloat64, DataType::kBFloat16}) {
    for (bool sequence_first : {false, true}) {
      const int axis = sequence_first ? 1 : 2;  // the queries' axis of q, out, dq
      auto shaped = [&](int64_t heads, int64_t width) {
        return sequence_first ? Shape{2, L, heads, width} : Shape{2, heads, L, width};
      };
      const Tensor q = random_tensor(shaped(4, 8), dtype, 1);
      const Tensor k = random_tensor(shaped(2, 8), dtype, 2);
      const Tensor v = random_tensor(shaped(2, 6), dtype, 3);
      const Tensor dout = random_tensor(shaped(4, 6), dtype, 4);
      const double tol = dtype_tolerance(dtype);
      for (const Kind kind : {Kind{true, 0}, Kind{true, 50}, Kind{false, 0}}) {
        SCOPED_TRACE(str_cat(dtype_name(dtype), sequence_first ? " sequence-first" : "",
                             kind.causal ? " causal" : "", " window ", kind.window));
        std::vector<double> hidden(2 * L * L, 0.0);
        for (int64_t b = 0; b < 2; ++b) {
          for (int64_t i = 0; i < L; ++i) {
            for (int64_t j = 0; j < L; ++j) {
              const bool seen = ids[b * L + i] == ids[b * L + j] && (!kind.causal || j <= i) &&
                                (kind.window == 0 || j > i - kind.window);
              if (!seen) hidden[(b * L + i) * L + j] = -inf;
            }
          }
        }
        const Tensor mask = make_tensor(hidden, Shape{2, 1, L, L}, dtype);
        const auto masked =
            functional::scaled_dot_product_attention(q, k, v, mask, 0.3, false, sequence_first);
        const auto masked_grads = functional::scaled_dot_product_attention_grad(
            dout, q, k, v, masked[0], masked[1], mask, 0.3, false, sequence_first);
        for (int64_t n : {0, 2}) {
          if (n && !kind.causal) continue;
          for (DataType id_type : {DataType::kInt64, DataType::kInt32}) {
            SCOPED_TRACE(str_cat("zigzag ", n, " ids ", dtype_name(id_type)));
            auto stored = [&](const Tensor& t, int at) { return n ? zigzag_rows(t, at, n) : t; };
            const Tensor qz = stored(q, axis), kz = stored(k, axis), vz = stored(v, axis);
            const Tensor doutz = stored(dout, axis);
            const Tensor docs = stored(make_tensor(ids, Shape{2, L}, id_type), 1);
            const auto out = functional::scaled_dot_product_attention(
                qz, kz, vz, Tensor(), 0.3, kind.causal, sequence_first, n, kind.window, docs);
            expect_close(out[0], values_of(stored(masked[0], axis)), out[0].shape(), tol, tol);
            expect_close(out[1], values_of(stored(masked[1], 2)), out[1].shape(), tol, tol);
            const auto grads = functional::scaled_dot_product_attention_grad(
                doutz, qz, kz, vz, out[0], out[1], Tensor(), 0.3, kind.causal, sequence_first, n,
                kind.window, docs);
            for (int i = 0; i < 3; ++i) {
              expect_close(grads[i], values_of(stored(masked_grads[i], axis)), grads[i].shape(),
                           4 * tol, 4 * tol);
            }
            if (n == 0 || id_type == DataType::kInt32) continue;
            // By uneven pieces of the stored queries, each told its place; the ids whole.
            expect_pieces_give_the_whole(
                "scaled_dot_product_attention_documents",
                AttentionParams{0.3, kind.causal, sequence_first, n, kind.window},
                {qz, kz, vz, doutz}, {docs}, out, grads, axis);
          }
        }
      }
    }
  }
}

// Document ids of another shape or dtype, or with a mask, are refused naming them.
TEST(Attention, DocumentIdsAreCheckedAsTheyAre) {
  const Tensor q = random_tensor({2, 2, 12, 8}, DataType::kFloat32, 1);
  const Tensor ids = make_tensor(std::vector<double>(24, 0.0), Shape{2, 12}, DataType::kInt64);
  expect_error_phrases(
      [&] {
        functional::scaled_dot_product_attention(
            q, q, q, Tensor(), 1.0, true, false, 0, 0,
            make_tensor(std::vector<double>(12, 0.0), Shape{12}, DataType::kInt64));
      },
      ErrorCode::kInvalidArgument,
      {"[scaled_dot_product_attention_documents] document_ids (Note [Packed documents]) give "
       "each position of self-attention its document: q and k must have one sequence length L "
       "and document_ids must be (batch, L) (2, 12). However, got",
       "document_ids (12,) int64"});
  const Tensor k = random_tensor({2, 2, 10, 8}, DataType::kFloat32, 2);
  expect_error(
      [&] {
        functional::scaled_dot_product_attention(q, k, k, Tensor(), 1.0, false, false, 0, 0, ids);
      },
      ErrorCode::kInvalidArgument, "q and k must have one sequence length L");
  expect_error(
      [&] {
        functional::scaled_dot_product_attention(
            q, q, q, Tensor(), 1.0, true, false, 0, 0,
            make_tensor(std::vector<double>(24, 0.0), Shape{2, 12}, DataType::kFloat32));
      },
      ErrorCode::kTypeError, "document_ids must be int32 or int64. However, got float32.");
  expect_error(
      [&] {
        functional::scaled_dot_product_attention(
            q, q, q, random_tensor({12, 12}, DataType::kFloat32, 3), 1.0, false, false, 0, 0, ids);
      },
      ErrorCode::kInvalidArgument,
      "takes an attn_mask or document_ids, not both (fold the documents into the mask). "
      "However, got attn_mask (12, 12) and document_ids (2, 12).");
}

// A window is how many keys a causal query sees: anything else is refused naming it.
TEST(Attention, SlidingWindowRefusesWhatIsNotCausalAttention) {
  const Tensor q = random_tensor({1, 2, 12, 8}, DataType::kFloat32, 1);
  const Tensor lse = random_tensor({1, 2, 12}, DataType::kFloat32, 2);
  expect_error(
      [&] { functional::scaled_dot_product_attention(q, q, q, Tensor(), 1.0, false, false, 0, 4); },
      ErrorCode::kInvalidArgument,
      "[scaled_dot_product_attention] window (Note [Sliding window]) is how many of the latest "
      "keys each query of causal attention sees: it must be at least 1, with is_causal and no "
      "attn_mask. However, got window 4, is_causal false and no mask.");
  expect_error(
      [&] { functional::scaled_dot_product_attention(q, q, q, Tensor(), 1.0, true, false, 0, -3); },
      ErrorCode::kInvalidArgument, "However, got window -3");
  expect_error(
      [&] {
        functional::scaled_dot_product_attention_grad(q, q, q, q, q, lse, Tensor(), 1.0, false,
                                                      false, 0, 2);
      },
      ErrorCode::kInvalidArgument, "[scaled_dot_product_attention_grad] window");
}

// The zigzag order is causal attention's, over sequences 2n divides, without a mask: anything
// else is refused naming it.
TEST(Attention, ZigzagOrderRefusesWhatItCannotOrder) {
  const Tensor q = random_tensor({1, 2, 12, 8}, DataType::kFloat32, 1);
  expect_error(
      [&] { functional::scaled_dot_product_attention(q, q, q, Tensor(), 1.0, false, false, 2); },
      ErrorCode::kInvalidArgument,
      "[scaled_dot_product_attention] zigzag (Note [Zigzag order]) orders causal attention's "
      "queries over zigzag pieces: it must be at least 1, with is_causal and no attn_mask. "
      "However, got zigzag 2, is_causal false and no mask.");
  expect_error(
      [&] {
        functional::scaled_dot_product_attention(
            q, q, q, random_tensor({12, 12}, DataType::kFloat32, 2), 1.0, true, false, 2);
      },
      ErrorCode::kInvalidArgument, "is_causal true and a mask.");
  expect_error(
      [&] { functional::scaled_dot_product_attention(q, q, q, Tensor(), 1.0, true, false, -1); },
      ErrorCode::kInvalidArgument, "However, got zigzag -1");
  expect_error_phrases(
      [&] { functional::scaled_dot_product_attention(q, q, q, Tensor(), 1.0, true, false, 4); },
      ErrorCode::kInvalidArgument,
      {"[scaled_dot_product_attention] zigzag 4 cuts the sequence in 8 chunks: q and k must have "
       "one sequence length that it divides.",
       "(1, 2, 12, 8)"});
  const Tensor k = random_tensor({1, 2, 8, 8}, DataType::kFloat32, 3);
  expect_error(
      [&] { functional::scaled_dot_product_attention(q, k, k, Tensor(), 1.0, true, false, 1); },
      ErrorCode::kInvalidArgument, "q and k must have one sequence length");
}

// Note [Sequence-first attention]: q, k, v as (B, L, H, E) give the heads-first op's results
// transposed, bit for bit (the kernels' sums run in one order whatever the strides), forward
// and backward, in every dtype, with grouped-query heads, masks, causal and uneven tiles.
TEST(Attention, SequenceFirstGivesTheHeadsFirstResultsBitForBit) {
  const auto swap = [](const Tensor& t) { return functional::transpose(t, {0, 2, 1, 3}); };
  for (DataType dtype :
       {DataType::kFloat32, DataType::kFloat64, DataType::kBFloat16, DataType::kFloat16}) {
    int seed = 100;
    for (const Case& c : cases()) {
      SCOPED_TRACE(describe(c, dtype));
      const auto [q, k, v, mask] = random_inputs(c, dtype, &seed);
      const double scale = 0.3;
      const auto heads = functional::scaled_dot_product_attention(q, k, v, mask, scale, c.causal);
      const auto rows = functional::scaled_dot_product_attention(swap(q), swap(k), swap(v), mask,
                                                                 scale, c.causal, true);
      ASSERT_EQ(rows[0].shape(), swap(heads[0]).shape());
      EXPECT_EQ(values_of(rows[0]), values_of(swap(heads[0])));
      EXPECT_EQ(values_of(rows[1]), values_of(heads[1]));  // lse stays (B, H, L)
      const Tensor dout = random_tensor(heads[0].shape(), dtype, ++seed);
      const auto grads = functional::scaled_dot_product_attention_grad(
          dout, q, k, v, heads[0], heads[1], mask, scale, c.causal);
      const auto row_grads = functional::scaled_dot_product_attention_grad(
          swap(dout), swap(q), swap(k), swap(v), rows[0], rows[1], mask, scale, c.causal, true);
      for (int i = 0; i < 3; ++i) {
        EXPECT_EQ(values_of(row_grads[i]), values_of(swap(grads[i]))) << "gradient " << i;
      }
    }
  }
}

TEST(Attention, SequenceFirstShapesAreCheckedAsTheyAre) {
  const Tensor q = random_tensor(Shape{2, 5, 4, 8}, DataType::kFloat32, 1);  // (B, L, H, E)
  const Tensor k = random_tensor(Shape{2, 7, 2, 8}, DataType::kFloat32, 2);
  const Tensor v = random_tensor(Shape{2, 7, 2, 6}, DataType::kFloat32, 3);
  const auto out = functional::scaled_dot_product_attention(q, k, v, Tensor(), 0.5, false, true);
  EXPECT_EQ(out[0].shape(), Shape({2, 5, 4, 6}));
  EXPECT_EQ(out[1].shape(), Shape({2, 4, 5}));
  // Three key heads do not divide four query heads: the error shows the shapes as given.
  const Tensor k3 = random_tensor(Shape{2, 7, 3, 8}, DataType::kFloat32, 4);
  expect_error_phrases(
      [&] { functional::scaled_dot_product_attention(q, k3, k3, Tensor(), 0.5, false, true); },
      ErrorCode::kInvalidArgument, {"dividing q's", Shape({2, 7, 3, 8}).to_string()});
}

TEST(Attention, SequenceFirstSbpSignaturesSplitItsAxes) {
  const OpSchema& op = OpRegistry::global().find("scaled_dot_product_attention");
  const AnyParams params = AttentionParams{0.5, true, /*sequence_first=*/true};
  const TensorMeta x{Shape{2, 5, 4, 8}, DataType::kFloat32};
  std::vector<std::string> got;
  for (const auto& s : (*op.get<FSbpSignatures>())(InferContext(op, params, {x, x, x}))) {
    got.push_back(s.to_string());
  }
  EXPECT_EQ(got, (std::vector<std::string>{"S(0) x S(0) x S(0) -> S(0), S(0)",
                                           "S(2) x S(2) x S(2) -> S(2), S(1)",
                                           "S(1) x B x B -> S(1), S(2)", "B x B x B -> B, B"}));
  const OpSchema& grad = OpRegistry::global().find("scaled_dot_product_attention_grad");
  const TensorMeta lse{Shape{2, 4, 5}, DataType::kFloat32};
  got.clear();
  for (const auto& s :
       (*grad.get<FSbpSignatures>())(InferContext(grad, params, {x, x, x, x, x, lse}))) {
    got.push_back(s.to_string());
  }
  EXPECT_EQ(got[1], "S(2) x S(2) x S(2) x S(2) x S(2) x S(1) -> S(2), S(2), S(2)");
  EXPECT_EQ(got[2], "S(1) x S(1) x B x B x S(1) x S(2) -> S(1), P, P");
}

}  // namespace
}  // namespace ofl
