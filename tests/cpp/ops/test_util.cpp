#include "tests/cpp/ops/test_util.h"

#include <cmath>
#include <filesystem>
#include <random>

#include "oneflowlike/autograd.h"
#include "oneflowlike/ops/elementwise.h"
#include "oneflowlike/ops/reduce.h"

namespace ofl::testing {

Tensor make_tensor(const std::vector<double>& values, const Shape& shape, DataType dtype) {
  EXPECT_EQ(static_cast<int64_t>(values.size()), shape.numel());
  Tensor t = Tensor::empty(shape, dtype);
  visit_dtype(dtype, [&]<class T>() {
    T* p = t.data<T>();
    for (size_t i = 0; i < values.size(); ++i) {
      if constexpr (std::is_same_v<T, float16> || std::is_same_v<T, bfloat16>) {
        p[i] = T(static_cast<float>(values[i]));
      } else {
        p[i] = static_cast<T>(values[i]);
      }
    }
  });
  return t;
}

Tensor random_tensor(const Shape& shape, DataType dtype, uint64_t seed, double lo, double hi) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(shape.numel());
  for (double& x : v) x = dist(gen);
  return make_tensor(v, shape, dtype);
}

std::vector<double> values_of(const Tensor& t) {
  std::vector<double> out(t.numel());
  visit_dtype(t.dtype(), [&]<class T>() {
    const T* p = t.data<T>();
    for (int64_t i = 0; i < t.numel(); ++i) {
      if constexpr (std::is_same_v<T, float16> || std::is_same_v<T, bfloat16>) {
        out[i] = static_cast<float>(p[i]);
      } else {
        out[i] = static_cast<double>(p[i]);
      }
    }
  });
  return out;
}

std::vector<double> map_values(const Tensor& x, const std::function<double(double)>& f) {
  std::vector<double> out = values_of(x);
  for (double& v : out) v = f(v);
  return out;
}

void expect_close(const Tensor& actual, const std::vector<double>& expected, const Shape& shape,
                  double rtol, double atol) {
  ASSERT_EQ(actual.shape(), shape);
  const std::vector<double> got = values_of(actual);
  ASSERT_EQ(got.size(), expected.size());
  int reported = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double tol = atol + rtol * std::abs(expected[i]);
    if (!(std::abs(got[i] - expected[i]) <= tol) && reported++ < 5) {
      ADD_FAILURE() << "element " << i << ": got " << got[i] << ", expected " << expected[i];
    }
  }
}

namespace {

// L = sum_k sum(outputs[k] * weights[k]).
double weighted_sum(const std::vector<Tensor>& outputs, const std::vector<std::vector<double>>& w) {
  double total = 0;
  for (size_t k = 0; k < outputs.size(); ++k) {
    const std::vector<double> v = values_of(outputs[k]);
    for (size_t i = 0; i < v.size(); ++i) total += v[i] * w[k][i];
  }
  return total;
}

}  // namespace

void expect_gradients_match(const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& f,
                            const std::vector<Tensor>& inputs, double eps, double tol) {
  std::vector<Tensor> leaves;
  for (const Tensor& x : inputs) {
    Tensor leaf = x.clone();
    if (is_floating(leaf.dtype())) leaf.set_requires_grad(true);
    leaves.push_back(leaf);
  }
  std::vector<Tensor> outputs = f(leaves);
  std::mt19937_64 gen(7);
  std::uniform_real_distribution<double> dist(0.5, 1.5);
  std::vector<std::vector<double>> weights;
  std::vector<Tensor> roots, root_grads;
  for (const Tensor& y : outputs) {
    std::vector<double> w(y.numel());
    for (double& x : w) x = dist(gen);
    weights.push_back(w);
    if (!y.requires_grad()) continue;
    roots.push_back(y);
    root_grads.push_back(make_tensor(w, y.shape(), y.dtype()));
  }
  ASSERT_FALSE(roots.empty()) << "no output requires grad";
  backward(roots, root_grads);

  NoGradGuard no_grad;
  for (size_t k = 0; k < leaves.size(); ++k) {
    if (!leaves[k].requires_grad()) continue;
    ASSERT_TRUE(leaves[k].grad().defined()) << "input " << k << " got no gradient";
    const std::vector<double> analytic = values_of(leaves[k].grad());
    for (int64_t i = 0; i < leaves[k].numel(); ++i) {
      std::vector<Tensor> plus, minus;
      for (size_t j = 0; j < leaves.size(); ++j) {
        plus.push_back(leaves[j].detach().clone());
        minus.push_back(leaves[j].detach().clone());
      }
      double* pp = plus[k].data<double>();
      double* pm = minus[k].data<double>();
      pp[i] += eps;
      pm[i] -= eps;
      const double numeric =
          (weighted_sum(f(plus), weights) - weighted_sum(f(minus), weights)) / (2 * eps);
      EXPECT_NEAR(analytic[i], numeric, tol * std::max(1.0, std::abs(numeric)))
          << "input " << k << " element " << i;
    }
  }
}

double dtype_tolerance(DataType dtype) {
  switch (dtype) {
    case DataType::kBFloat16:
      return 4.0 / 256;
    case DataType::kFloat16:
      return 4.0 / 2048;
    case DataType::kFloat64:
      return 1e-12;
    default:
      return 1e-5;
  }
}

int process_threads() {
  int n = 0;
  for ([[maybe_unused]] const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    ++n;
  }
  return n;
}

}  // namespace ofl::testing
