// Random ops and the global generator. The kernels compute every element from (seed, offset,
// logical index) alone (Note [Random element counters] in philox.h), so any split is valid.

#include "oneflowlike/ops/random.h"

#include <cmath>
#include <mutex>

#include "oneflowlike/eager.h"
#include "oneflowlike/op.h"

namespace ofl {

namespace {

struct GlobalGenerator {
  std::mutex mu;
  uint64_t seed = kDefaultRandomSeed;  // GUARDED_BY(mu)
  uint64_t offset = 0;                 // GUARDED_BY(mu)
};

GlobalGenerator& global_generator() {
  static GlobalGenerator* generator = new GlobalGenerator();
  return *generator;
}

void check_random_common(const InferContext& ctx, const RandomParams& p) {
  OFL_CHECK_TYPE(is_floating(p.dtype), "[", ctx.op_name(),
                 "] dtype must be floating (float32, float64, float16 or bfloat16). However, got ",
                 dtype_name(p.dtype), ".");
  for (int64_t d : p.shape.dims()) {
    OFL_CHECK(d >= 0, "[", ctx.op_name(), "] shape must have non-negative extents. However, got ",
              p.shape.to_string(), ".");
  }
}

std::vector<TensorMeta> infer_random_normal(const InferContext& ctx) {
  const auto& p = ctx.params<RandomParams>();
  check_random_common(ctx, p);
  OFL_CHECK(std::isfinite(p.a) && std::isfinite(p.b) && p.b >= 0,
            "[random_normal] mean must be finite and std finite and non-negative. However, got "
            "mean=",
            p.a, ", std=", p.b, ".");
  return {TensorMeta{p.shape, p.dtype}};
}

std::vector<TensorMeta> infer_random_uniform(const InferContext& ctx) {
  const auto& p = ctx.params<RandomParams>();
  check_random_common(ctx, p);
  OFL_CHECK(std::isfinite(p.a) && std::isfinite(p.b) && p.a <= p.b,
            "[random_uniform] low and high must be finite with low <= high. However, got low=", p.a,
            ", high=", p.b, ".");
  return {TensorMeta{p.shape, p.dtype}};
}

// No inputs: the output may be split on any axis (each rank draws its own region) or whole.
std::vector<SbpSignature> random_signatures(const InferContext& ctx) {
  const Shape& shape = ctx.params<RandomParams>().shape;
  std::vector<SbpSignature> sigs;
  for (int i = 0; i < shape.ndim(); ++i) {
    if (shape[i] != 1) sigs.push_back({{}, {S(i)}});
  }
  sigs.push_back({{}, {B()}});
  return sigs;
}

std::vector<TensorMeta> infer_dropout(const InferContext& ctx) {
  OFL_CHECK_TYPE(is_floating(ctx.dtype(0)), "[dropout] x must have a floating dtype. However, got ",
                 ctx.describe_inputs(), ".");
  check_dropout_probability(ctx.params<DropoutParams>().p);
  return {ctx.input(0)};
}

// Elementwise with a mask fixed by position, and linear in x: so also P -> P.
std::vector<SbpSignature> dropout_signatures(const InferContext& ctx) {
  const Shape& x = ctx.shape(0);
  std::vector<SbpSignature> sigs;
  for (int i = 0; i < x.ndim(); ++i) {
    if (x[i] != 1) sigs.push_back({{S(i)}, {S(i)}});
  }
  sigs.push_back({{B()}, {B()}});
  sigs.push_back({{P()}, {P()}});
  return sigs;
}

// y = x * m / (1 - p) with a mask m fixed by (seed, offset): dx = dropout(dy) with the same
// parameters, so no mask tensor is saved.
void dropout_gradient(GradBuilder& g) {
  const GradBuilder::Value dy = g.output_grad(0);
  if (dy == GradBuilder::kNone) return;
  g.set_input_grad(0, g.apply1("dropout", g.params<DropoutParams>(), {dy}));
}

}  // namespace

void manual_seed(uint64_t seed) {
  GlobalGenerator& gen = global_generator();
  std::lock_guard<std::mutex> lock(gen.mu);
  gen.seed = seed;
  gen.offset = 0;
}

uint64_t initial_seed() {
  GlobalGenerator& gen = global_generator();
  std::lock_guard<std::mutex> lock(gen.mu);
  return gen.seed;
}

RandomState reserve_random(int64_t count) {
  OFL_ASSERT(count >= 0);
  GlobalGenerator& gen = global_generator();
  std::lock_guard<std::mutex> lock(gen.mu);
  RandomState state{static_cast<int64_t>(gen.seed), static_cast<int64_t>(gen.offset)};
  gen.offset += static_cast<uint64_t>(count);  // counters wrap at 2^64
  return state;
}

int64_t next_offset(int64_t count) { return reserve_random(count).offset; }

RandomState random_state() { return reserve_random(0); }

void set_random_state(const RandomState& state) {
  GlobalGenerator& gen = global_generator();
  std::lock_guard<std::mutex> lock(gen.mu);
  gen.seed = static_cast<uint64_t>(state.seed);
  gen.offset = static_cast<uint64_t>(state.offset);
}

void check_dropout_probability(double p) {
  OFL_CHECK(p >= 0.0 && p <= 1.0, "[dropout] p must be a probability in [0, 1]. However, got p=", p,
            ".");
}

OFL_REGISTER_OP("random_normal")
    .inputs({})
    .outputs({"out"})
    .set<TPositionDependent>(true)
    .params<RandomParams>()
    .set<FInferMeta>(infer_random_normal)
    .set<FSbpSignatures>(random_signatures);

OFL_REGISTER_OP("random_uniform")
    .inputs({})
    .outputs({"out"})
    .set<TPositionDependent>(true)
    .params<RandomParams>()
    .set<FInferMeta>(infer_random_uniform)
    .set<FSbpSignatures>(random_signatures);

OFL_REGISTER_OP("dropout")
    .inputs({"x"})
    .outputs({"y"})
    .set<TPositionDependent>(true)
    .set<TUnderAmp>(AmpCategory::kFollow)
    .params<DropoutParams>()
    .set<FInferMeta>(infer_dropout)
    .set<FSbpSignatures>(dropout_signatures)
    .set<FGradient>(dropout_gradient);

namespace functional {

Tensor random_normal(const Shape& shape, DataType dtype, double mean, double std, int64_t seed,
                     int64_t offset, const Device& device) {
  static OpHandle op("random_normal");
  return op.call1_on(device, RandomParams{shape, dtype, mean, std, seed, offset});
}

Tensor random_uniform(const Shape& shape, DataType dtype, double low, double high, int64_t seed,
                      int64_t offset, const Device& device) {
  static OpHandle op("random_uniform");
  return op.call1_on(device, RandomParams{shape, dtype, low, high, seed, offset});
}

Tensor dropout_with_seed(const Tensor& x, double p, int64_t seed, int64_t offset) {
  static OpHandle op("dropout");
  return op.call1(DropoutParams{p, seed, offset}, {x});
}

namespace {

// numel of a shape that may still hold negative extents (inference reports those).
int64_t count_of(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape.dims()) n *= d > 0 ? d : 0;
  return n;
}

}  // namespace

Tensor normal(double mean, double std, const Shape& shape, DataType dtype, const Device& device) {
  const RandomState s = reserve_random(count_of(shape));
  return random_normal(shape, dtype, mean, std, s.seed, s.offset, device);
}

Tensor uniform(double low, double high, const Shape& shape, DataType dtype, const Device& device) {
  const RandomState s = reserve_random(count_of(shape));
  return random_uniform(shape, dtype, low, high, s.seed, s.offset, device);
}

Tensor random_region(bool normal, double a, double b, const Shape& shape, DataType dtype,
                     int64_t seed, int64_t offset, const std::vector<Range>& region) {
  static OpHandle normal_op("random_normal");
  static OpHandle uniform_op("random_uniform");
  return apply_source_op_region(normal ? normal_op.get() : uniform_op.get(),
                                RandomParams{shape, dtype, a, b, seed, offset}, region);
}

std::optional<Tensor> normal_region(double mean, double std, const Shape& shape, DataType dtype,
                                    const std::optional<std::vector<Range>>& region) {
  const RandomState s = reserve_random(count_of(shape));
  if (!region) return std::nullopt;
  return random_region(true, mean, std, shape, dtype, s.seed, s.offset, *region);
}

std::optional<Tensor> uniform_region(double low, double high, const Shape& shape, DataType dtype,
                                     const std::optional<std::vector<Range>>& region) {
  const RandomState s = reserve_random(count_of(shape));
  if (!region) return std::nullopt;
  return random_region(false, low, high, shape, dtype, s.seed, s.offset, *region);
}

Tensor randn(const Shape& shape, DataType dtype, const Device& device) {
  return normal(0.0, 1.0, shape, dtype, device);
}

Tensor rand(const Shape& shape, DataType dtype, const Device& device) {
  return uniform(0.0, 1.0, shape, dtype, device);
}

Tensor dropout(const Tensor& x, double p, bool training) {
  check_dropout_probability(p);
  if (!training || p == 0.0) return x;
  const RandomState s = reserve_random(x.defined() ? x.numel() : 0);
  return dropout_with_seed(x, p, s.seed, s.offset);
}

}  // namespace functional

}  // namespace ofl
