// Creation ops (fill, arange), cast and to_device.

#include "oneflowlike/ops/creation.h"

#include <cmath>

#include "oneflowlike/eager.h"
#include "oneflowlike/op.h"

namespace ofl {

namespace {

std::vector<TensorMeta> infer_fill(const InferContext& ctx) {
  const auto& p = ctx.params<FillParams>();
  for (int64_t d : p.shape.dims()) {
    OFL_CHECK(d >= 0, "[fill] every extent of the shape must be non-negative. However, got ",
              p.shape.to_string(), ".");
  }
  return {TensorMeta{p.shape, p.dtype}};
}

// Ops with no inputs may produce any split of their output (each rank makes its own piece).
std::vector<SbpSignature> source_signatures(const Shape& out) {
  std::vector<SbpSignature> sigs;
  for (int i = 0; i < out.ndim(); ++i) sigs.push_back({{}, {S(i)}});
  sigs.push_back({{}, {B()}});
  return sigs;
}

int64_t arange_length(const ArangeParams& p) {
  return std::max<int64_t>(0, static_cast<int64_t>(std::ceil((p.end - p.start) / p.step)));
}

std::vector<TensorMeta> infer_arange(const InferContext& ctx) {
  const auto& p = ctx.params<ArangeParams>();
  OFL_CHECK(p.step != 0, "[arange] step must be non-zero. However, got step=0.");
  OFL_CHECK(std::isfinite(p.start) && std::isfinite(p.end) && std::isfinite(p.step),
            "[arange] start, end and step must be finite. However, got start=", p.start,
            ", end=", p.end, ", step=", p.step, ".");
  OFL_CHECK_TYPE(p.dtype != DataType::kBool, "[arange] dtype must be numeric. However, got bool.");
  return {TensorMeta{Shape{arange_length(p)}, p.dtype}};
}

std::vector<TensorMeta> infer_cast(const InferContext& ctx) {
  return {TensorMeta{ctx.shape(0), ctx.params<CastParams>().dtype}};
}

std::vector<SbpSignature> cast_signatures(const InferContext& ctx) {
  std::vector<SbpSignature> sigs;
  for (int i = 0; i < ctx.shape(0).ndim(); ++i) sigs.push_back({{S(i)}, {S(i)}});
  sigs.push_back({{B()}, {B()}});
  // Casting is linear only between floating types (to an integer it rounds each addend).
  if (is_floating(ctx.dtype(0)) && is_floating(ctx.params<CastParams>().dtype)) {
    sigs.push_back({{P()}, {P()}});
  }
  return sigs;
}

void cast_gradient(GradBuilder& g) {
  const GradBuilder::Value dy = g.output_grad(0);
  if (dy == GradBuilder::kNone || !g.needs_input_grad(0)) return;
  g.set_input_grad(0, g.apply1("cast", CastParams{g.meta(g.input(0)).dtype}, {dy}));
}

// The same layouts in and out: a copy keeps whatever it is given, partial sums included.
std::vector<SbpSignature> copy_signatures(const InferContext& ctx) {
  std::vector<SbpSignature> sigs;
  for (int i = 0; i < ctx.shape(0).ndim(); ++i) sigs.push_back({{S(i)}, {S(i)}});
  sigs.push_back({{B()}, {B()}});
  sigs.push_back({{P()}, {P()}});
  return sigs;
}

// One kernel for both device types: Tensor::copy_from moves bytes between any two devices (a
// memcpy between host memories, else on the CUDA device's compute stream, where the kernels
// before it ran).
template <class T>
struct ToDeviceKernel {
  static void run(const KernelContext& ctx) { ctx.out(0).copy_from(ctx.in(0)); }
};

void to_device_gradient(GradBuilder& g) {
  const GradBuilder::Value dy = g.output_grad(0);
  if (dy == GradBuilder::kNone || !g.needs_input_grad(0)) return;
  const auto& p = g.params<ToDeviceParams>();
  g.set_input_grad(0, g.apply1("to_device", ToDeviceParams{p.from, p.to}, {dy}));
}

}  // namespace

OFL_REGISTER_OP("fill")
    .inputs({})
    .outputs({"out"})
    .params<FillParams>()
    .set<FInferMeta>(infer_fill)
    .set<FSbpSignatures>([](const InferContext& ctx) {
      return source_signatures(ctx.params<FillParams>().shape);
    })
    .set<TKernelDtypeFrom>(-1);

OFL_REGISTER_OP("arange")
    .inputs({})
    .outputs({"out"})
    .set<TPositionDependent>(true)
    .params<ArangeParams>()
    .set<FInferMeta>(infer_arange)
    .set<FSbpSignatures>([](const InferContext& ctx) {
      return source_signatures(Shape{arange_length(ctx.params<ArangeParams>())});
    })
    .set<TKernelDtypeFrom>(-1);

OFL_REGISTER_OP("cast")
    .inputs({"x"})
    .outputs({"out"})
    .set<TUnderAmp>(AmpCategory::kFollow)
    .params<CastParams>()
    .set<FInferMeta>(infer_cast)
    .set<FSbpSignatures>(cast_signatures)
    .set<FGradient>(cast_gradient);

OFL_REGISTER_OP("to_device")
    .inputs({"x"})
    .outputs({"out"})
    .set<TUnderAmp>(AmpCategory::kFollow)
    .params<ToDeviceParams>()
    .set<FInferMeta>([](const InferContext& ctx) {
      return std::vector<TensorMeta>{TensorMeta{ctx.shape(0), ctx.dtype(0)}};
    })
    .set<FSbpSignatures>(copy_signatures)
    .set<FOutputDevice>([](const AnyParams& params) {
      return Device::parse(params.as<ToDeviceParams>().to);
    })
    .set<FGradient>(to_device_gradient);
OFL_REGISTER_KERNEL("to_device", kCPU, ToDeviceKernel, float, double, float16, bfloat16, int8_t,
                    int32_t, int64_t, bool);
OFL_REGISTER_KERNEL("to_device", kCUDA, ToDeviceKernel, float, double, float16, bfloat16, int8_t,
                    int32_t, int64_t, bool);

namespace functional {

Tensor fill(const Shape& shape, DataType dtype, double value, const Device& device) {
  static OpHandle op("fill");
  return op.call1_on(device, FillParams{shape, dtype, value});
}

Tensor cast(const Tensor& x, DataType dtype) {
  static OpHandle op("cast");
  if (x.dtype() == dtype) return x;
  return op.call1(CastParams{dtype}, {x});
}

Tensor arange(double start, double end, double step, DataType dtype, const Device& device) {
  static OpHandle op("arange");
  return op.call1_on(device, ArangeParams{start, end, step, dtype});
}

Tensor to_device(const Tensor& x, const Device& device) {
  static OpHandle op("to_device");
  if (x.device() == device) return x;
  return op.call1(ToDeviceParams{device.to_string(), x.device().to_string()}, {x});
}

}  // namespace functional

}  // namespace ofl
