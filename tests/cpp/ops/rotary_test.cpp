#include "oneflowlike/ops/rotary.h"

#include <cmath>
#include <string>

#include "oneflowlike/op.h"
#include "tests/cpp/ops/test_util.h"

namespace ofl {
namespace {

using testing::expect_close;
using testing::expect_error;
using testing::expect_gradients_match;
using testing::make_tensor;
using testing::random_tensor;
using testing::values_of;

struct Tables {
  Tensor cos, sin;
};
// LLaMA's tables: angle(t, i) = t * base^(-2i / D).
Tables llama_tables(int64_t seq, int64_t head_dim, DataType dtype) {
  std::vector<double> c, s;
  for (int64_t t = 0; t < seq; ++t) {
    for (int64_t i = 0; i < head_dim / 2; ++i) {
      const double angle = t * std::pow(10000.0, -2.0 * i / head_dim);
      c.push_back(std::cos(angle));
      s.push_back(std::sin(angle));
    }
  }
  return {make_tensor(c, {seq, head_dim / 2}, dtype), make_tensor(s, {seq, head_dim / 2}, dtype)};
}

// x (B, T, H, D) with seq axis 1, rotated by plain loops.
std::vector<double> reference(const Tensor& x, const Tables& tab, bool interleaved) {
  const std::vector<double> v = values_of(x), c = values_of(tab.cos), s = values_of(tab.sin);
  const auto& dims = x.shape().dims();
  const int64_t B = dims[0], T = dims[1], H = dims[2], D = dims[3];
  std::vector<double> y(v.size());
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t h = 0; h < H; ++h) {
        const int64_t row = ((b * T + t) * H + h) * D;
        for (int64_t i = 0; i < D / 2; ++i) {
          const int64_t j1 = interleaved ? 2 * i : i, j2 = interleaved ? 2 * i + 1 : i + D / 2;
          const double cc = c[t * D / 2 + i], ss = s[t * D / 2 + i];
          y[row + j1] = v[row + j1] * cc - v[row + j2] * ss;
          y[row + j2] = v[row + j2] * cc + v[row + j1] * ss;
        }
      }
    }
  }
  return y;
}

TEST(Rotary, BothPairingsMatchTheReferenceAndTheInverseUndoesThem) {
  for (DataType dtype : {DataType::kFloat32, DataType::kFloat64}) {
    const Tensor x = random_tensor({2, 5, 3, 8}, dtype, 1);
    const Tables tab = llama_tables(5, 8, dtype);
    for (bool interleaved : {false, true}) {
      const Tensor y = functional::rotary_embedding(x, tab.cos, tab.sin, 1, interleaved);
      expect_close(y, reference(x, tab, interleaved), x.shape(), 1e-6, 1e-6);
      const Tensor back = functional::rotary_embedding(y, tab.cos, tab.sin, 1, interleaved, true);
      expect_close(back, values_of(x), x.shape(), 1e-6, 1e-6);
    }
  }
}

TEST(Rotary, SeqAxisMinusTwoReadsHeadsFirstLayout) {
  // (B, H, T, D) with seq_axis -2 equals (B, T, H, D) with seq_axis 1 after a transpose.
  const Tensor x = random_tensor({2, 5, 3, 4}, DataType::kFloat64, 2);  // (B, T, H, D)
  const Tables tab = llama_tables(5, 4, DataType::kFloat64);
  const std::vector<double> v = values_of(x), expected = reference(x, tab, false);
  std::vector<double> xt(v.size()), yt_expected(v.size());
  for (int b = 0; b < 2; ++b)
    for (int t = 0; t < 5; ++t)
      for (int h = 0; h < 3; ++h)
        for (int d = 0; d < 4; ++d) {
          xt[((b * 3 + h) * 5 + t) * 4 + d] = v[((b * 5 + t) * 3 + h) * 4 + d];
          yt_expected[((b * 3 + h) * 5 + t) * 4 + d] = expected[((b * 5 + t) * 3 + h) * 4 + d];
        }
  const Tensor y = functional::rotary_embedding(make_tensor(xt, {2, 3, 5, 4}, DataType::kFloat64),
                                                tab.cos, tab.sin);
  expect_close(y, yt_expected, Shape{2, 3, 5, 4}, 1e-12, 1e-12);
}

TEST(Rotary, GradientMatchesFiniteDifferences) {
  const Tables tab = llama_tables(4, 6, DataType::kFloat64);
  for (bool interleaved : {false, true}) {
    expect_gradients_match(
        [&](const std::vector<Tensor>& in) {
          return std::vector<Tensor>{
              functional::rotary_embedding(in[0], tab.cos, tab.sin, -2, interleaved)};
        },
        {random_tensor({2, 3, 4, 6}, DataType::kFloat64, 3)}, 1e-6, 1e-6);
  }
}

TEST(Rotary, BadShapesAndDtypesRaiseNamingTheInput) {
  const Tensor x = random_tensor({2, 5, 3, 8}, DataType::kFloat32, 1);
  const Tables tab = llama_tables(5, 8, DataType::kFloat32);
  expect_error([&] { functional::rotary_embedding(x, tab.cos, tab.sin); },
               ErrorCode::kInvalidArgument,
               "[rotary_embedding] cos must be shaped (sequence length, head size / 2) (3, 4)");
  expect_error([&] { functional::rotary_embedding(x, tab.cos, tab.sin, 3); },
               ErrorCode::kInvalidArgument, "seq_axis must not be the last axis");
  const Tensor odd = random_tensor({5, 7}, DataType::kFloat32, 1);
  expect_error([&] { functional::rotary_embedding(odd, tab.cos, tab.sin, 0); },
               ErrorCode::kInvalidArgument, "must be even");
  const Tables wide = llama_tables(5, 8, DataType::kFloat64);
  expect_error([&] { functional::rotary_embedding(x, wide.cos, wide.sin, 1); },
               ErrorCode::kTypeError, "one floating dtype");
}

TEST(Rotary, SbpSignaturesSplitEveryAxisButTheHeadAxisAndTheSequenceTakesTableRows) {
  const OpSchema& op = OpRegistry::global().find("rotary_embedding");
  const std::vector<TensorMeta> metas{{Shape{2, 3, 5, 8}, DataType::kFloat32},
                                      {Shape{5, 4}, DataType::kFloat32},
                                      {Shape{5, 4}, DataType::kFloat32}};
  std::vector<std::string> got;
  for (const auto& s : (*op.get<FSbpSignatures>())(InferContext(op, RotaryParams{}, metas))) {
    got.push_back(s.to_string());
  }
  EXPECT_EQ(got, (std::vector<std::string>{"S(0) x B x B -> S(0)", "S(1) x B x B -> S(1)",
                                           "S(2) x S(0) x S(0) -> S(2)", "B x B x B -> B",
                                           "P x B x B -> P"}));
}

}  // namespace
}  // namespace ofl
