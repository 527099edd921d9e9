#include "oneflowlike/op.h"

namespace ofl {

const std::string& InferContext::op_name() const { return op_.name(); }

std::vector<int> mutated_inputs(const OpSchema& op, const AnyParams& params, int num_inputs) {
  if (const auto* fixed = op.get<TMutatedInputs>()) return *fixed;
  if (const auto* fn = op.get<FMutatedInputs>()) return (*fn)(params, num_inputs);
  return {};
}

std::string InferContext::input_name(int i) const {
  const auto& names = op_.input_names();
  if (op_.has_variadic_inputs()) return str_cat(names.empty() ? "inputs" : names[0], "[", i, "]");
  return i < static_cast<int>(names.size()) ? names[i] : str_cat("input", i);
}

std::string InferContext::describe_inputs() const {
  std::string s;
  for (int i = 0; i < num_inputs(); ++i) {
    if (i > 0) s += ", ";
    s += str_cat(input_name(i), " ", shape(i).to_string(), " ", dtype_name(dtype(i)));
  }
  return s;
}

void OpSchema::add_kernel(DeviceType device, DataType dtype, KernelFn fn) {
  kernels_[static_cast<int>(device)][static_cast<int>(dtype)] = fn;
}

KernelFn OpSchema::find_kernel(DeviceType device, DataType dtype) const {
  return kernels_[static_cast<int>(device)][static_cast<int>(dtype)];
}

DataType OpSchema::kernel_dtype(const std::vector<DataType>& inputs,
                                std::optional<DataType> output0) const {
  const int* from = get<TKernelDtypeFrom>();
  const int which = from != nullptr ? *from : 0;
  if (which >= 0 && !inputs.empty()) return inputs.at(which);
  OFL_CHECK(output0.has_value(), "[", name_,
            "] picks its kernel by its output's dtype, but has no output.");
  return *output0;
}

std::string OpSchema::kernel_dtypes(DeviceType device) const {
  std::string s;
  for (int d = 0; d < kNumDataTypes; ++d) {
    if (kernels_[static_cast<int>(device)][d] == nullptr) continue;
    if (!s.empty()) s += ", ";
    s += dtype_name(static_cast<DataType>(d));
  }
  return s.empty() ? "none" : s;
}

std::vector<TensorMeta> OpSchema::infer(const AnyParams& params,
                                        const std::vector<TensorMeta>& inputs) const {
  OFL_CHECK_CODE(defined(), ErrorCode::kNotFound, "[", name_,
                 "] the op has kernels but was never defined (no FInferMeta).");
  OFL_CHECK_TYPE(params.type() == params_type_, "[", name_, "] expects parameters of type ",
                 params_name_, ". However, got ", params.type_name(), ".");
  if (variadic_inputs_) {
    OFL_CHECK(!inputs.empty(), "[", name_, "] needs at least one input. However, got none.");
  } else {
    OFL_CHECK(inputs.size() == input_names_.size(), "[", name_, "] takes ", input_names_.size(),
              " inputs. However, got ", inputs.size(), ".");
  }
  InferContext ctx(*this, params, inputs);
  std::vector<TensorMeta> outputs = (*get<FInferMeta>())(ctx);
  OFL_ASSERT(variadic_outputs_ || outputs.size() == output_names_.size())
      << name_ << " inferred " << outputs.size() << " outputs";
  return outputs;
}

OpRegistry& OpRegistry::global() {
  static OpRegistry* registry = new OpRegistry();
  return *registry;
}

OpSchema& OpRegistry::get_or_create(std::string_view name) {
  auto it = ops_.find(name);
  if (it == ops_.end()) {
    it = ops_.emplace(std::string(name), std::make_unique<OpSchema>(std::string(name))).first;
  }
  return *it->second;
}

const OpSchema* OpRegistry::try_find(std::string_view name) const {
  auto it = ops_.find(name);
  return it == ops_.end() ? nullptr : it->second.get();
}

const OpSchema& OpRegistry::find(std::string_view name) const {
  const OpSchema* op = try_find(name);
  OFL_CHECK_CODE(op != nullptr && op->defined(), ErrorCode::kNotFound,
                 "[op registry] no op named '", name, "' is registered.");
  return *op;
}

std::vector<std::string> OpRegistry::names() const {
  std::vector<std::string> out;
  for (const auto& [name, op] : ops_) {
    if (op->defined()) out.push_back(name);
  }
  return out;
}

}  // namespace ofl
