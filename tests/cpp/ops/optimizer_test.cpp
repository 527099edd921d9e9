#include "oneflowlike/ops/optimizer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <utility>

#include "oneflowlike/cuda/device.h"
#include "oneflowlike/eager.h"
#include "oneflowlike/op.h"
#include "oneflowlike/ops/creation.h"
#include "oneflowlike/ops/reduce.h"
#include "tests/cpp/ops/test_util.h"

namespace ofl::testing {

namespace {

using testing::expect_error;

// torch.optim.SGD for one step, in double.
void sgd_reference(std::vector<double>& param, const std::vector<double>& grad,
                   std::vector<double>& buffer, bool first, double lr, const SgdParams& p) {
  for (size_t i = 0; i < param.size(); ++i) {
    double d = grad[i] + p.weight_decay * param[i];
    if (p.momentum != 0) {
      buffer[i] = first ? d : p.momentum * buffer[i] + (1 - p.dampening) * d;
      d = p.nesterov ? d + p.momentum * buffer[i] : buffer[i];
    }
    param[i] -= lr * d;
  }
}

// torch.optim.Adam / AdamW for one step, in double.
void adam_reference(std::vector<double>& param, const std::vector<double>& grad,
                    std::vector<double>& m, std::vector<double>& v, double lr, int step,
                    const AdamParams& p) {
  for (size_t i = 0; i < param.size(); ++i) {
    double g = grad[i];
    if (p.decoupled_weight_decay) {
      param[i] *= 1 - lr * p.weight_decay;
    } else {
      g += p.weight_decay * param[i];
    }
    m[i] = p.beta1 * m[i] + (1 - p.beta1) * g;
    v[i] = p.beta2 * v[i] + (1 - p.beta2) * g * g;
    const double bias_correction1 = 1 - std::pow(p.beta1, step);
    const double bias_correction2 = 1 - std::pow(p.beta2, step);
    const double denom = std::sqrt(v[i]) / std::sqrt(bias_correction2) + p.epsilon;
    param[i] -= lr / bias_correction1 * m[i] / denom;
  }
}

void run_sgd(const SgdParams& p, DataType dtype, double tol) {
  const Shape shape{3, 5};
  const Tensor param = random_tensor(shape, dtype, 1);
  const Tensor buffer = Tensor::zeros(shape, dtype);
  std::vector<double> ref_param = values_of(param), ref_buffer(shape.numel(), 0.0);
  for (int step = 1; step <= 4; ++step) {
    const Tensor grad = random_tensor(shape, dtype, 10 + step);
    const double lr = 0.1 / step;
    // Note [SGD first step]: a zero buffer and dampening 0 on the first step.
    const double dampening = step == 1 ? 0.0 : p.dampening;
    functional::sgd_update(param, grad, buffer, Tensor::scalar(lr, dtype), p.momentum, dampening,
                           p.weight_decay, p.nesterov);
    sgd_reference(ref_param, values_of(grad), ref_buffer, step == 1, lr, p);
    expect_close(param, ref_param, shape, tol, tol);
    if (p.momentum != 0) expect_close(buffer, ref_buffer, shape, tol, tol);
  }
}

void run_adam(const AdamParams& p, DataType dtype, double tol) {
  const Shape shape{4, 3};
  const Tensor param = random_tensor(shape, dtype, 2);
  const Tensor m = Tensor::zeros(shape, dtype), v = Tensor::zeros(shape, dtype);
  std::vector<double> ref_param = values_of(param), ref_m(shape.numel(), 0.0),
                      ref_v(shape.numel(), 0.0);
  for (int step = 1; step <= 5; ++step) {
    const Tensor grad = random_tensor(shape, dtype, 20 + step);
    const double lr = 0.01;
    functional::adam_update(param, grad, m, v, Tensor::scalar(lr, dtype),
                            Tensor::scalar(step, dtype), p.beta1, p.beta2, p.epsilon,
                            p.weight_decay, p.decoupled_weight_decay);
    adam_reference(ref_param, values_of(grad), ref_m, ref_v, lr, step, p);
    expect_close(param, ref_param, shape, tol, tol);
    expect_close(m, ref_m, shape, tol, tol);
    expect_close(v, ref_v, shape, tol, tol);
  }
}

}  // namespace

TEST(SgdUpdate, PlainStepsMatchTorchFormulas) {
  run_sgd(SgdParams{}, DataType::kFloat64, 1e-12);
  run_sgd(SgdParams{}, DataType::kFloat32, 1e-6);
}

TEST(SgdUpdate, MomentumDampeningAndWeightDecayMatchTorchFormulas) {
  run_sgd(SgdParams{/*momentum=*/0.9, /*dampening=*/0.3, /*weight_decay=*/0.01, false},
          DataType::kFloat64, 1e-12);
  run_sgd(SgdParams{0.9, 0.3, 0.01, false}, DataType::kFloat32, 1e-5);
}

TEST(SgdUpdate, NesterovMatchesTorchFormulas) {
  run_sgd(SgdParams{/*momentum=*/0.8, /*dampening=*/0.0, /*weight_decay=*/0.1, true},
          DataType::kFloat64, 1e-12);
}

TEST(SgdUpdate, LargeTensorUpdatesEveryElement) {
  const Shape shape{100000};
  const Tensor param = Tensor::zeros(shape, DataType::kFloat32);
  const Tensor grad = random_tensor(shape, DataType::kFloat32, 3);
  functional::sgd_update(param, grad, Tensor::zeros(shape, DataType::kFloat32),
                         Tensor::scalar(2.0, DataType::kFloat32), 0, 0, 0, false);
  std::vector<double> expected = values_of(grad);
  for (double& x : expected) x *= -2.0;
  expect_close(param, expected, shape);
}

TEST(AdamUpdate, AdamStepsMatchTorchFormulas) {
  run_adam(AdamParams{}, DataType::kFloat64, 1e-12);
  run_adam(AdamParams{0.8, 0.99, 1e-6, 0.05, false}, DataType::kFloat64, 1e-12);
  run_adam(AdamParams{}, DataType::kFloat32, 1e-5);
}

TEST(AdamUpdate, AdamWDecouplesWeightDecay) {
  run_adam(AdamParams{0.9, 0.999, 1e-8, /*weight_decay=*/0.1, /*decoupled_weight_decay=*/true},
           DataType::kFloat64, 1e-12);
}

TEST(AdamUpdate, MutatesParamAndBothMoments) {
  const OpSchema& adam = OpRegistry::global().find("adam_update");
  const OpSchema& sgd = OpRegistry::global().find("sgd_update");
  EXPECT_EQ(*adam.get<TMutatedInputs>(), (std::vector<int>{0, 2, 3}));
  EXPECT_EQ(*sgd.get<TMutatedInputs>(), (std::vector<int>{0, 2}));
  EXPECT_TRUE(adam.output_names().empty());
  EXPECT_FALSE(adam.has<FGradient>());
}

TEST(SgdUpdate, MismatchedInputsRaise) {
  const Tensor param = Tensor::zeros({2, 3}, DataType::kFloat32);
  const Tensor lr = Tensor::scalar(0.1, DataType::kFloat32);
  expect_error(
      [&] {
        functional::sgd_update(param, Tensor::zeros({3, 2}, DataType::kFloat32), param.clone(), lr,
                               0, 0, 0, false);
      },
      ErrorCode::kInvalidArgument, "grad must have the shape of param");
  expect_error(
      [&] {
        functional::sgd_update(param, Tensor::zeros({2, 3}, DataType::kFloat64), param.clone(), lr,
                               0, 0, 0, false);
      },
      ErrorCode::kTypeError, "grad must have the dtype of param");
  expect_error(
      [&] {
        functional::sgd_update(param, param.clone(), param.clone(),
                               Tensor::zeros({1}, DataType::kFloat32), 0, 0, 0, false);
      },
      ErrorCode::kInvalidArgument, "lr must be a scalar tensor");
  expect_error(
      [&] { functional::sgd_update(param, param.clone(), param.clone(), lr, 0.0, 0, 0, true); },
      ErrorCode::kInvalidArgument, "nesterov momentum requires");
  expect_error(
      [&] {
        const Tensor p = Tensor::zeros({2}, DataType::kInt64);
        functional::sgd_update(p, p.clone(), p.clone(), Tensor::scalar(1, DataType::kInt64), 0, 0,
                               0, false);
      },
      ErrorCode::kTypeError, "param must be float32 or float64");
}

TEST(AdamUpdate, MismatchedInputsRaise) {
  const Tensor param = Tensor::zeros({4}, DataType::kFloat64);
  const Tensor scalar = Tensor::scalar(1.0, DataType::kFloat64);
  expect_error(
      [&] {
        functional::adam_update(param, param.clone(), Tensor::zeros({5}, DataType::kFloat64),
                                param.clone(), scalar, scalar, 0.9, 0.999, 1e-8, 0, false);
      },
      ErrorCode::kInvalidArgument, "exp_avg must have the shape of param");
  expect_error(
      [&] {
        functional::adam_update(param, param.clone(), param.clone(), param.clone(), scalar,
                                Tensor::scalar(1.0, DataType::kFloat32), 0.9, 0.999, 1e-8, 0,
                                false);
      },
      ErrorCode::kTypeError, "step must have the dtype of param");
  expect_error(
      [&] {
        functional::adam_update(param, param.clone(), param.clone(), param.clone(), scalar, scalar,
                                1.0, 0.999, 1e-8, 0, false);
      },
      ErrorCode::kInvalidArgument, "betas must be in [0, 1)");
}

TEST(AdamUpdate, SbpSplitsAllTensorsAlikeAndKeepsScalarsWhole) {
  const OpSchema& op = OpRegistry::global().find("adam_update");
  const AnyParams params = AdamParams{};
  const TensorMeta t{Shape{4, 6}, DataType::kFloat32}, s{Shape{}, DataType::kFloat32};
  const std::vector<TensorMeta> metas = {t, t, t, t, s, s};
  std::vector<std::string> got;
  for (const auto& sig : (*op.get<FSbpSignatures>())(InferContext(op, params, metas))) {
    got.push_back(sig.to_string());
  }
  EXPECT_EQ(got, (std::vector<std::string>{"S(0) x S(0) x S(0) x S(0) x B x B -> ",
                                           "S(1) x S(1) x S(1) x S(1) x B x B -> ",
                                           "B x B x B x B x B x B -> "}));
}

// Note [Dynamic loss scaling].
TEST(DynamicLossScale, CountNonfiniteCountsInfAndNan) {
  for (DataType dtype :
       {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16, DataType::kBFloat16}) {
    std::vector<double> v(100000, 1.5);
    v[7] = std::numeric_limits<double>::infinity();
    v[70000] = -std::numeric_limits<double>::infinity();
    v[99999] = std::nan("");
    const Tensor count = functional::count_nonfinite(make_tensor(v, {100000}, dtype));
    EXPECT_EQ(count.dtype(), DataType::kFloat32);
    EXPECT_EQ(values_of(count), std::vector<double>{3.0}) << dtype_name(dtype);
  }
  // A float64 value beyond float32's range is finite.
  const Tensor big = make_tensor({1e300}, {1}, DataType::kFloat64);
  EXPECT_EQ(values_of(functional::count_nonfinite(big)), std::vector<double>{0.0});
}

TEST(DynamicLossScale, SkippableUpdatesLeaveEverythingWhenTold) {
  static OpHandle sgd("sgd_update_skippable"), adam("adam_update_skippable");
  for (double skip : {0.0, 1.0}) {
    const Tensor p = random_tensor({5}, DataType::kFloat32, 1);
    const Tensor g = random_tensor({5}, DataType::kFloat32, 2);
    const Tensor m = random_tensor({5}, DataType::kFloat32, 3);
    const Tensor v = make_tensor({0.1, 0.2, 0.3, 0.4, 0.5}, {5});
    const std::vector<double> before = values_of(p), m_before = values_of(m);
    const Tensor lr = Tensor::scalar(0.1, DataType::kFloat32);
    const Tensor step = Tensor::scalar(2.0, DataType::kFloat32);
    const Tensor flag = Tensor::scalar(skip, DataType::kFloat32);
    adam(AdamParams{}, {p, g, m, v, lr, step, flag});
    sgd(SgdParams{0.9, 0, 0, false}, {p, g, m, lr, flag});
    EXPECT_EQ(values_of(p) == before, skip != 0) << skip;
    EXPECT_EQ(values_of(m) == m_before, skip != 0) << skip;
  }
}

TEST(DynamicLossScale, TheScaleBacksOffAfterAnOverflowAndGrowsAfterGoodSteps) {
  const Tensor scale = Tensor::scalar(1024.0, DataType::kFloat32);
  const Tensor good = Tensor::scalar(0.0, DataType::kFloat32);
  const Tensor steps = Tensor::scalar(0.0, DataType::kFloat32);
  const LossScaleParams params{2.0, 0.5, 3};
  auto step = [&](double found) {
    functional::loss_scale_update(scale, good, steps, Tensor::scalar(found, DataType::kFloat32),
                                  params);
    return std::make_pair(values_of(scale)[0], values_of(good)[0]);
  };
  EXPECT_EQ(step(0), std::make_pair(1024.0, 1.0));
  EXPECT_EQ(step(0), std::make_pair(1024.0, 2.0));
  EXPECT_EQ(step(5), std::make_pair(512.0, 0.0));  // an overflow: back off, start counting again
  EXPECT_EQ(step(0), std::make_pair(512.0, 1.0));
  EXPECT_EQ(step(0), std::make_pair(512.0, 2.0));
  EXPECT_EQ(step(0), std::make_pair(1024.0, 0.0));  // growth_interval good steps: grow
  EXPECT_EQ(values_of(steps)[0], 5.0) << "the skipped step is not counted";
  expect_error(
      [&] {
        functional::loss_scale_update(scale, good, steps, Tensor::scalar(0.0, DataType::kFloat32),
                                      LossScaleParams{0.5, 0.5, 3});
      },
      ErrorCode::kInvalidArgument, "needs growth_factor > 1");
}

// ---- Note [Multi-tensor updates] ----

// Three tensors: a matrix, one longer than a thread's piece and a block of sums, and one element.
const std::vector<Shape> kMultiShapes = {Shape{3, 5}, Shape{70001}, Shape{1}};

struct MultiCase {
  std::vector<Tensor> params, grads, states_a, states_b;
};

MultiCase multi_case(DataType dtype) {
  MultiCase c;
  for (size_t j = 0; j < kMultiShapes.size(); ++j) {
    const uint64_t seed = 10 * j;
    c.params.push_back(random_tensor(kMultiShapes[j], dtype, seed + 1));
    c.grads.push_back(random_tensor(kMultiShapes[j], dtype, seed + 2));
    c.states_a.push_back(random_tensor(kMultiShapes[j], dtype, seed + 3));
    c.states_b.push_back(random_tensor(kMultiShapes[j], dtype, seed + 4, 0.1, 0.5));
  }
  return c;
}

MultiCase clone(const MultiCase& c) {
  MultiCase out;
  for (size_t j = 0; j < c.params.size(); ++j) {
    out.params.push_back(c.params[j].clone());
    out.grads.push_back(c.grads[j].clone());
    out.states_a.push_back(c.states_a[j].clone());
    out.states_b.push_back(c.states_b[j].clone());
  }
  return out;
}

// Equal but for the rounding of a multiply-add the compiler may fuse: the scaled gradient is
// computed in the update's expression, no longer stored by a mul kernel first.
void expect_same(const std::vector<Tensor>& got, const std::vector<Tensor>& want,
                 const std::string& what) {
  for (size_t j = 0; j < want.size(); ++j) {
    const double tol = want[j].dtype() == DataType::kFloat64 ? 1e-14 : 1e-6;
    const std::vector<double> g = values_of(got[j]), w = values_of(want[j]);
    ASSERT_EQ(g.size(), w.size());
    for (size_t i = 0; i < w.size(); ++i) {
      ASSERT_NEAR(g[i], w[i], tol * (1 + std::abs(w[i])))
          << what << " of tensor " << j << " at " << i;
    }
  }
}

// The multi-tensor update equals the single-tensor updates of the gradients multiplied by the
// scale (what the clip's mul and the per-variable update computed), and leaves everything when
// skipped.
TEST(MultiTensorUpdate, AdamIsTheSingleTensorUpdateOfTheScaledGradients) {
  static OpHandle multi("multi_tensor_adam_update"), mul("mul");
  for (DataType dtype : {DataType::kFloat32, DataType::kFloat64}) {
    for (double skip : {0.0, 1.0}) {
      const MultiCase c = multi_case(dtype), want = clone(c);
      const Tensor lr = Tensor::scalar(0.01, dtype), step = Tensor::scalar(3.0, dtype);
      const Tensor scale = Tensor::scalar(0.37, dtype);
      const MultiAdamParams p{0.8, 0.95, 1e-6, 0.1, true, /*scaled=*/true, /*skippable=*/true};
      std::vector<Tensor> inputs{lr, step, scale, Tensor::scalar(skip, dtype)};
      for (size_t j = 0; j < kMultiShapes.size(); ++j) {
        inputs.insert(inputs.end(), {c.params[j], c.grads[j], c.states_a[j], c.states_b[j]});
        if (skip == 0) {
          functional::adam_update(want.params[j], mul.call1(NoParams{}, {want.grads[j], scale}),
                                  want.states_a[j], want.states_b[j], lr, step, p.beta1, p.beta2,
                                  p.epsilon, p.weight_decay, p.decoupled_weight_decay);
        }
      }
      multi(p, inputs);
      const std::string what = str_cat(dtype_name(dtype), " skip ", skip);
      expect_same(c.params, want.params, "param " + what);
      expect_same(c.states_a, want.states_a, "exp_avg " + what);
      expect_same(c.states_b, want.states_b, "exp_avg_sq " + what);
      expect_same(c.grads, want.grads, "grad " + what);
    }
  }
}

TEST(MultiTensorUpdate, SgdIsTheSingleTensorUpdateWithAndWithoutAScale) {
  static OpHandle multi("multi_tensor_sgd_update"), mul("mul");
  for (bool scaled : {false, true}) {
    const MultiCase c = multi_case(DataType::kFloat32), want = clone(c);
    const Tensor lr = Tensor::scalar(0.1, DataType::kFloat32);
    const Tensor scale = Tensor::scalar(0.5, DataType::kFloat32);
    const MultiSgdParams p{0.9, 0.0, 0.01, true, scaled, /*skippable=*/false};
    std::vector<Tensor> inputs{lr};
    if (scaled) inputs.push_back(scale);
    for (size_t j = 0; j < kMultiShapes.size(); ++j) {
      inputs.insert(inputs.end(), {c.params[j], c.grads[j], c.states_a[j]});
      const Tensor g = scaled ? mul.call1(NoParams{}, {want.grads[j], scale}) : want.grads[j];
      functional::sgd_update(want.params[j], g, want.states_a[j], lr, p.momentum, p.dampening,
                             p.weight_decay, p.nesterov);
    }
    multi(p, inputs);
    expect_same(c.params, want.params, str_cat("param, scaled ", scaled));
    expect_same(c.states_a, want.states_a, str_cat("momentum, scaled ", scaled));
  }
}

// Note [Blocked sums]: each tensor's sum of squares is reduce_sum(x * x) bit for bit, and the
// tensors' sums are added in order, as the chain of adds the clip used to make.
TEST(MultiTensorUpdate, SumSquaresIsTheChainOfReduceSumsOfSquares) {
  static OpHandle sum_squares("multi_tensor_sum_squares"), mul("mul"), add("add"),
      reduce_sum("reduce_sum");
  for (DataType dtype : {DataType::kFloat32, DataType::kFloat64}) {
    const MultiCase c = multi_case(dtype);
    Tensor want;
    for (size_t j = 0; j < c.grads.size(); ++j) {
      const Tensor s =
          reduce_sum.call1(ReduceParams{}, {mul.call1(NoParams{}, {c.grads[j], c.grads[j]})});
      want = j == 0 ? s : add.call1(NoParams{}, {want, s});
    }
    const Tensor got = sum_squares.call1(NoParams{}, c.grads);
    EXPECT_EQ(got.dtype(), dtype);
    EXPECT_EQ(got.shape(), Shape{});
    EXPECT_EQ(values_of(got), values_of(want)) << dtype_name(dtype);
  }
}

TEST(MultiTensorUpdate, CountNonfiniteCountsAcrossTensors) {
  static OpHandle count("multi_tensor_count_nonfinite");
  for (DataType dtype :
       {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16, DataType::kBFloat16}) {
    std::vector<double> a(70001, 0.5), b(3, -2.0);
    a[0] = std::numeric_limits<double>::infinity();
    a[70000] = std::nan("");
    b[1] = -std::numeric_limits<double>::infinity();
    const Tensor got =
        count.call1(NoParams{}, {make_tensor(a, {70001}, dtype), make_tensor(b, {3}, dtype)});
    EXPECT_EQ(got.dtype(), DataType::kFloat32);
    EXPECT_EQ(values_of(got), std::vector<double>{3.0}) << dtype_name(dtype);
  }
  // Finite float64 values beyond float32's range are finite.
  EXPECT_EQ(values_of(count.call1(NoParams{}, {make_tensor({1e300}, {1}, DataType::kFloat64)})),
            std::vector<double>{0.0});
}

TEST(MultiTensorUpdate, BadInputsRaiseNamingTheInput) {
  static OpHandle adam("multi_tensor_adam_update"), sgd("multi_tensor_sgd_update"),
      sum_squares("multi_tensor_sum_squares");
  const Tensor lr = Tensor::scalar(0.1, DataType::kFloat32);
  const Tensor a = random_tensor({3, 2}, DataType::kFloat32, 1);
  const Tensor b = random_tensor({2, 3}, DataType::kFloat32, 2);
  expect_error(
      [&] {
        sgd(MultiSgdParams{}, {lr, a, a.clone()});
      },
      ErrorCode::kInvalidArgument, "[multi_tensor_sgd_update] takes 1 scalars, then 3 inputs");
  expect_error(
      [&] {
        sgd(MultiSgdParams{}, {lr, a, b, a.clone()});
      },
      ErrorCode::kInvalidArgument, "inputs[2] must have the shape of its param inputs[1]");
  expect_error(
      [&] {
        sgd(MultiSgdParams{}, {a, a, a, a});
      },
      ErrorCode::kInvalidArgument, "inputs[0] must be a scalar tensor");
  expect_error(
      [&] {
        adam(MultiAdamParams{}, {lr, Tensor::scalar(1.0, DataType::kFloat64), a, a, a, a});
      },
      ErrorCode::kTypeError, "inputs[1] must have the dtype of the first param");
  expect_error(
      [&] {
        adam(MultiAdamParams{0.9, 1.0}, {lr, lr, a, a, a, a});
      },
      ErrorCode::kInvalidArgument, "[multi_tensor_adam_update] betas must be in [0, 1)");
  expect_error(
      [&] {
        sum_squares(NoParams{}, {a, random_tensor({2}, DataType::kFloat64, 3)});
      },
      ErrorCode::kTypeError, "x[1] must have the dtype of x[0]");
}

// The multi-tensor kernels on a GPU do what the CPU's do.
TEST(MultiTensorUpdateCuda, TheKernelsDoWhatTheCpusDo) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device: " << cuda::why_no_device();
  static OpHandle adam("multi_tensor_adam_update"), sgd("multi_tensor_sgd_update"),
      sum_squares("multi_tensor_sum_squares"), count("multi_tensor_count_nonfinite");
  const Device gpu{DeviceType::kCUDA, 0};
  for (double skip : {0.0, 1.0}) {
    std::map<DeviceType, std::vector<std::vector<double>>> after;
    for (Device device : {Device::cpu(), gpu}) {
      MultiCase c = multi_case(DataType::kFloat32);
      for (auto* list : {&c.params, &c.grads, &c.states_a, &c.states_b}) {
        for (Tensor& t : *list) t = t.to(device);
      }
      const auto scalar = [&](double v) {
        return Tensor::scalar(v, DataType::kFloat32).to(device);
      };
      std::vector<Tensor> a_in{scalar(0.01), scalar(3.0), scalar(0.37), scalar(skip)};
      std::vector<Tensor> s_in{scalar(0.1), scalar(0.5)};
      for (size_t j = 0; j < kMultiShapes.size(); ++j) {
        a_in.insert(a_in.end(), {c.params[j], c.grads[j], c.states_a[j], c.states_b[j]});
      }
      adam(MultiAdamParams{0.8, 0.95, 1e-6, 0.1, true, true, true}, a_in);
      MultiCase d = multi_case(DataType::kFloat32);
      for (size_t j = 0; j < kMultiShapes.size(); ++j) {
        s_in.insert(s_in.end(),
                    {d.params[j].to(device), d.grads[j].to(device), d.states_a[j].to(device)});
      }
      sgd(MultiSgdParams{0.9, 0.0, 0.01, false, true, false}, s_in);
      for (const auto* list : {&c.params, &c.states_a, &c.states_b}) {
        for (const Tensor& t : *list) after[device.type].push_back(values_of(t.to(Device::cpu())));
      }
      for (size_t j = 0; j < kMultiShapes.size(); ++j) {
        after[device.type].push_back(values_of(s_in[2 + 3 * j].to(Device::cpu())));
      }
      after[device.type].push_back(
          values_of(sum_squares.call1(NoParams{}, c.grads).to(Device::cpu())));
      std::vector<double> bad(70001, 1.0);
      bad[5] = std::nan("");
      bad[70000] = std::numeric_limits<double>::infinity();
      after[device.type].push_back(values_of(
          count
              .call1(NoParams{}, {make_tensor(bad, {70001}, DataType::kBFloat16).to(device),
                                  functional::cast(c.grads[0], DataType::kBFloat16)})
              .to(Device::cpu())));
    }
    const auto& want = after[DeviceType::kCPU];
    const auto& got = after[DeviceType::kCUDA];
    ASSERT_EQ(got.size(), want.size());
    for (size_t k = 0; k < want.size(); ++k) {
      for (size_t i = 0; i < want[k].size(); ++i) {
        EXPECT_NEAR(got[k][i], want[k][i], 1e-5 * (1 + std::abs(want[k][i])))
            << "list " << k << " element " << i << " skip " << skip;
      }
    }
  }
}

// Note [One launch per tensor list]: more tensors than one launch takes (kListTensors), some
// without elements, of sizes around the pieces: the CPU's results, the sums in the same order.
TEST(MultiTensorUpdateCuda, ManyTensorsInFewLaunchesDoWhatTheCpusDo) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device: " << cuda::why_no_device();
  static OpHandle adam("multi_tensor_adam_update"), sgd("multi_tensor_sgd_update"),
      sum_squares("multi_tensor_sum_squares"), count("multi_tensor_count_nonfinite");
  const Device gpu{DeviceType::kCUDA, 0};
  std::vector<Shape> shapes;
  for (int j = 0; j < 80; ++j) {
    const int64_t sizes[] = {0, 1, 1023, 1024, 1025, 16385, 3 * j + 7};
    shapes.push_back(Shape{sizes[j % 7]});
  }
  std::map<DeviceType, std::vector<std::vector<double>>> after;
  for (Device device : {Device::cpu(), gpu}) {
    std::vector<Tensor> a_in{Tensor::scalar(0.01, DataType::kFloat32).to(device),
                             Tensor::scalar(4.0, DataType::kFloat32).to(device)};
    std::vector<Tensor> s_in{Tensor::scalar(0.1, DataType::kFloat32).to(device)};
    std::vector<Tensor> grads;
    for (size_t j = 0; j < shapes.size(); ++j) {
      for (int k = 0; k < 4; ++k) {  // exp_avg_sq (k = 3) not negative
        a_in.push_back(k == 3 ? random_tensor(shapes[j], DataType::kFloat32, 100 * j + k, 0.1, 0.5)
                              : random_tensor(shapes[j], DataType::kFloat32, 100 * j + k));
        a_in.back() = a_in.back().to(device);
      }
      for (int k = 0; k < 3; ++k) {
        s_in.push_back(random_tensor(shapes[j], DataType::kFloat32, 100 * j + 10 + k).to(device));
      }
      grads.push_back(a_in[a_in.size() - 3]);
    }
    adam(MultiAdamParams{0.9, 0.99, 1e-8, 0.01, true, false, false}, a_in);
    sgd(MultiSgdParams{0.9, 0.0, 0.0, false, false, false}, s_in);
    for (const Tensor& t : a_in) after[device.type].push_back(values_of(t.to(Device::cpu())));
    for (const Tensor& t : s_in) after[device.type].push_back(values_of(t.to(Device::cpu())));
    after[device.type].push_back(values_of(sum_squares.call1(NoParams{}, grads).to(Device::cpu())));
    after[device.type].push_back(values_of(count.call1(NoParams{}, grads).to(Device::cpu())));
  }
  const auto& want = after[DeviceType::kCPU];
  const auto& got = after[DeviceType::kCUDA];
  ASSERT_EQ(got.size(), want.size());
  for (size_t k = 0; k < want.size(); ++k) {
    ASSERT_EQ(got[k].size(), want[k].size()) << "list " << k;
    for (size_t i = 0; i < want[k].size(); ++i) {
      EXPECT_NEAR(got[k][i], want[k][i], 1e-5 * (1 + std::abs(want[k][i])))
          << "list " << k << " element " << i;
    }
  }
}

// The loss-scaling kernels on a GPU do what the CPU's do (float16 training on CUDA
// placements: Note [Dynamic loss scaling]).
TEST(DynamicLossScaleCuda, TheKernelsDoWhatTheCpusDo) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device: " << cuda::why_no_device();
  const Device gpu{DeviceType::kCUDA, 0};
  const auto on = [](const Tensor& t, Device device) { return t.to(device); };
  for (DataType dtype :
       {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16, DataType::kBFloat16}) {
    std::vector<double> v(100000, 1.5);
    v[7] = std::numeric_limits<double>::infinity();
    v[99999] = std::nan("");
    const Tensor x = make_tensor(v, {100000}, dtype);
    EXPECT_EQ(values_of(functional::count_nonfinite(on(x, gpu)).to(Device::cpu())),
              std::vector<double>{2.0})
        << dtype_name(dtype);
  }
  static OpHandle adam("adam_update_skippable");
  for (double skip : {0.0, 1.0}) {
    std::map<DeviceType, std::vector<std::vector<double>>> after;
    for (Device device : {Device::cpu(), gpu}) {
      const Tensor p = on(random_tensor({300}, DataType::kFloat32, 1), device);
      const Tensor m = on(random_tensor({300}, DataType::kFloat32, 3), device);
      const Tensor v = on(random_tensor({300}, DataType::kFloat32, 4, 0.1, 0.5), device);
      adam(AdamParams{}, {p, on(random_tensor({300}, DataType::kFloat32, 2), device), m, v,
                          on(Tensor::scalar(0.1, DataType::kFloat32), device),
                          on(Tensor::scalar(2.0, DataType::kFloat32), device),
                          on(Tensor::scalar(skip, DataType::kFloat32), device)});
      for (const Tensor& t : {p, m, v})
        after[device.type].push_back(values_of(t.to(Device::cpu())));
    }
    for (size_t k = 0; k < 3; ++k) {
      const std::vector<double>& want = after[DeviceType::kCPU][k];
      const std::vector<double>& got = after[DeviceType::kCUDA][k];
      for (size_t i = 0; i < want.size(); ++i) {
        EXPECT_NEAR(got[i], want[i], 1e-6 * (1 + std::abs(want[i]))) << "skip " << skip;
      }
    }
  }
  std::map<DeviceType, std::vector<double>> scales;
  for (Device device : {Device::cpu(), gpu}) {
    const Tensor scale = on(Tensor::scalar(1024.0, DataType::kFloat32), device);
    const Tensor good = on(Tensor::scalar(0.0, DataType::kFloat32), device);
    const Tensor steps = on(Tensor::scalar(0.0, DataType::kFloat32), device);
    for (double found : {0.0, 0.0, 5.0, 0.0, 0.0, 0.0}) {
      functional::loss_scale_update(scale, good, steps,
                                    on(Tensor::scalar(found, DataType::kFloat32), device),
                                    LossScaleParams{2.0, 0.5, 3});
      scales[device.type].push_back(values_of(scale.to(Device::cpu()))[0]);
    }
    scales[device.type].push_back(values_of(steps.to(Device::cpu()))[0]);
  }
  EXPECT_EQ(scales[DeviceType::kCUDA], scales[DeviceType::kCPU]);
  EXPECT_EQ(scales[DeviceType::kCPU], (std::vector<double>{1024, 1024, 512, 512, 512, 1024, 5}));
}

}  // namespace ofl::testing
