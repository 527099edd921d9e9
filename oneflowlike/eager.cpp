#include "oneflowlike/eager.h"

#include <algorithm>
#include <optional>

#include "oneflowlike/autocast.h"
#include "oneflowlike/autograd.h"
#include "oneflowlike/cuda/device.h"
#include "oneflowlike/lazy.h"
#include "oneflowlike/ops/creation.h"

namespace ofl {

namespace {

// Note [Eager autocast] in autocast.h: the dtypes `op`'s inputs take in this thread's scope.
std::vector<DataType> autocast_dtypes(const OpSchema& op, const std::vector<Tensor>& inputs) {
  std::vector<DataType> dtypes;
  for (const Tensor& t : inputs) dtypes.push_back(t.defined() ? t.dtype() : DataType::kBool);
  return amp_input_dtypes(op, std::move(dtypes), autocast_dtype());
}

// Whether an input of `op` takes another dtype than it has (`dtypes`, from autocast_dtypes).
bool autocasts(const std::vector<Tensor>& inputs, const std::vector<DataType>& dtypes) {
  for (size_t k = 0; k < inputs.size(); ++k) {
    if (inputs[k].defined() && inputs[k].dtype() != dtypes[k]) return true;
  }
  return false;
}

std::vector<Tensor> apply_autocast(const OpSchema& op, const AnyParams& params,
                                   const std::vector<Tensor>& inputs,
                                   const std::vector<DataType>& dtypes) {
  static const OpSchema& cast = OpRegistry::global().find("cast");
  const AutocastScope off(DataType::kFloat32);
  std::vector<Tensor> cast_inputs;
  for (size_t k = 0; k < inputs.size(); ++k) {
    const Tensor& t = inputs[k];
    if (!t.defined() || t.dtype() == dtypes[k]) {
      cast_inputs.push_back(t);
      continue;
    }
    Tensor cast_t = cached_weight_cast(t, dtypes[k]);  // Note [Autocast weight cache]
    if (!cast_t.defined()) {
      cast_t = apply_op1(cast, CastParams{dtypes[k]}, {t});
      cache_weight_cast(t, cast_t);
    }
    cast_inputs.push_back(cast_t);
  }
  return apply_op(op, params, cast_inputs);
}

// Note [CPU scalars on a device]: as in torch, a 0-d CPU tensor (a number an op made into a
// tensor: a fill value, a scale, an ignore index) goes with tensors on another device, which it
// is copied to. Not one that requires grad or that the op writes in place: its gradient or the
// write would land on the copy, so those keep the one-device check. nullopt: nothing to move.
std::optional<std::vector<Tensor>> scalars_moved(const OpSchema& op, const AnyParams& params,
                                                 const std::vector<Tensor>& inputs) {
  if (inputs.size() < 2) return std::nullopt;
  const Tensor* on_device = nullptr;
  for (const Tensor& t : inputs) {
    if (t.defined() && t.device().type != DeviceType::kCPU) {
      on_device = &t;
      break;
    }
  }
  if (on_device == nullptr) return std::nullopt;
  const std::vector<int> written = mutated_inputs(op, params, static_cast<int>(inputs.size()));
  std::optional<std::vector<Tensor>> moved;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    if (!t.defined() || t.device().type != DeviceType::kCPU || t.ndim() != 0 || t.requires_grad() ||
        std::find(written.begin(), written.end(), static_cast<int>(i)) != written.end()) {
      continue;
    }
    if (!moved) moved = inputs;
    (*moved)[i] = t.to(on_device->device());
  }
  return moved;
}

}  // namespace

std::vector<Tensor> apply_op(const OpSchema& op, const AnyParams& params,
                             const std::vector<Tensor>& inputs) {
  return apply_op(op, params, inputs, Device::cpu());
}

std::vector<Tensor> apply_op(const OpSchema& op, const AnyParams& params,
                             const std::vector<Tensor>& inputs, const Device& device_if_no_inputs) {
  if (autocast_dtype() != DataType::kFloat32) {
    const std::vector<DataType> dtypes = autocast_dtypes(op, inputs);
    if (autocasts(inputs, dtypes)) return apply_autocast(op, params, inputs, dtypes);
  }
  if (OpTracer* tracer = current_op_tracer()) {
    OFL_CHECK_CODE(!inputs.empty() || device_if_no_inputs == Device::cpu(),
                   ErrorCode::kUnimplemented, "[", op.name(),
                   "] in a graph, ops run where the placement says: a device for an op without "
                   "inputs is for eager mode. However, got device ",
                   device_if_no_inputs.to_string(), ".");
    return tracer->trace(op, params, inputs);
  }
  if (std::optional<std::vector<Tensor>> moved = scalars_moved(op, params, inputs)) {
    return apply_op(op, params, *moved, device_if_no_inputs);
  }
  std::vector<TensorMeta> metas;
  metas.reserve(inputs.size());
  Device device = device_if_no_inputs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    OFL_CHECK(inputs[i].defined(), "[", op.name(), "] input ", i, " is an undefined tensor.");
    metas.push_back(TensorMeta{inputs[i].shape(), inputs[i].dtype()});
    if (i == 0) device = inputs[0].device();
    OFL_CHECK(inputs[i].device() == device, "[", op.name(),
              "] all inputs must be on one device. However, got input 0 on ", device.to_string(),
              " and input ", i, " on ", inputs[i].device().to_string(), ".");
  }
  const std::vector<TensorMeta> out_metas = op.infer(params, metas);

  std::vector<Tensor> outputs;
  outputs.reserve(out_metas.size());
  if (const int* view_of = op.get<TViewOfInput>()) {
    outputs.push_back(inputs[*view_of].view(out_metas[0].shape));
  } else {
    const FOutputDevice::type* output_device = op.get<FOutputDevice>();
    const Device out_device = output_device ? (*output_device)(params) : device;
    for (const TensorMeta& m : out_metas)
      outputs.push_back(Tensor::empty(m.shape, m.dtype, out_device));
    std::vector<DataType> input_dtypes;
    for (const Tensor& t : inputs) input_dtypes.push_back(t.dtype());
    const DataType kernel_dtype = op.kernel_dtype(
        input_dtypes,
        out_metas.empty() ? std::nullopt : std::optional<DataType>(out_metas[0].dtype));
    const DeviceType kernel_device = kernel_device_type(device);
    KernelFn kernel = op.find_kernel(kernel_device, kernel_dtype);
    OFL_CHECK_TYPE(kernel != nullptr, "[", op.name(), "] has no ", device_type_name(kernel_device),
                   " kernel for dtype ", dtype_name(kernel_dtype), " (kernels exist for ",
                   op.kernel_dtypes(kernel_device), ").");
    std::unique_ptr<Storage> temp;
    if (const TempBytesFn* temp_bytes = op.get<FTempBytes>()) {
      const size_t bytes = (*temp_bytes)(InferContext(op, params, metas));
      if (bytes > 0) temp = std::make_unique<Storage>(bytes, allocator_for(device));
    }
    KernelContext ctx{params, inputs, outputs};
    if (temp) {
      ctx.temp = temp->data();
      ctx.temp_bytes = temp->bytes();
    }
    // A CUDA kernel launches with its device current (Note [Current devices]).
    std::optional<cuda::DeviceGuard> on_device;
    if (kernel_device == DeviceType::kCUDA) on_device.emplace(device.index);
    kernel(ctx);
    for (int i : mutated_inputs(op, params, static_cast<int>(inputs.size()))) {
      inputs.at(i).impl()->storage->bump_version();  // Note [Versions]
    }
  }
  record_autograd(op, params, inputs, outputs);
  return outputs;
}

Tensor apply_source_op_region(const OpSchema& op, const AnyParams& params,
                              const std::vector<Range>& region) {
  const std::vector<Tensor> no_inputs;
  const std::vector<TensorMeta> metas = op.infer(params, {});
  OFL_CHECK(metas.size() == 1, "[", op.name(), "] a piece can be made of one-output ops only.");
  const TensorMeta& whole = metas[0];
  OFL_CHECK(static_cast<int>(region.size()) == whole.shape.ndim(), "[", op.name(),
            "] the region must have one range per axis of ", whole.shape.to_string(),
            ". However, got ", region.size(), " ranges.");
  std::vector<int64_t> dims;
  for (int d = 0; d < whole.shape.ndim(); ++d) {
    const Range& r = region[d];
    OFL_CHECK(0 <= r.begin && r.begin <= r.end && r.end <= whole.shape[d], "[", op.name(),
              "] range ", d, " [", r.begin, ", ", r.end, ") is outside the axis of extent ",
              whole.shape[d], ".");
    dims.push_back(r.size());
  }
  const std::vector<Tensor> outputs{Tensor::empty(Shape(std::move(dims)), whole.dtype)};
  KernelFn kernel = op.find_kernel(DeviceType::kCPU, whole.dtype);
  OFL_CHECK_TYPE(kernel != nullptr, "[", op.name(), "] has no CPU kernel for dtype ",
                 dtype_name(whole.dtype), ".");
  KernelContext ctx{params, no_inputs, outputs};
  ctx.output_region = &region;
  ctx.logical_output_shape = &whole.shape;
  if (outputs[0].numel() > 0) kernel(ctx);
  return outputs[0];
}

Tensor apply_op1(const OpSchema& op, const AnyParams& params, const std::vector<Tensor>& inputs) {
  std::vector<Tensor> out = apply_op(op, params, inputs);
  OFL_ASSERT(out.size() == 1) << op.name() << " has " << out.size() << " outputs";
  return std::move(out[0]);
}

}  // namespace ofl
