#pragma once
// Eager execution of one op on local tensors: infer, allocate, run the kernel, record autograd.

#include <vector>

#include "oneflowlike/op.h"
#include "oneflowlike/tensor.h"

namespace ofl {

/// Runs `op` on `inputs` now and returns its outputs. Raises on user error (names the op and
/// the inputs).
std::vector<Tensor> apply_op(const OpSchema& op, const AnyParams& params,
                             const std::vector<Tensor>& inputs);

/// apply_op that runs an op without inputs (fill, arange, random_normal, ...) on `device`; an op
/// with inputs runs on its inputs' device whatever `device` says. A tracer (graph mode) takes
/// CPU only: its placements say where ops run.
std::vector<Tensor> apply_op(const OpSchema& op, const AnyParams& params,
                             const std::vector<Tensor>& inputs, const Device& device);

/// Runs op `op` without inputs (a creation op) for the part `region` of its logical output
/// only, on the CPU: the piece of the whole result that `region` (one range per axis) covers,
/// computed without making the rest (Note [Sharded creation] in ops/random.h).
Tensor apply_source_op_region(const OpSchema& op, const AnyParams& params,
                              const std::vector<Range>& region);

/// apply_op for single-output ops.
Tensor apply_op1(const OpSchema& op, const AnyParams& params, const std::vector<Tensor>& inputs);

/// Looks the op up by name once and keeps it: `static OpHandle add("add");`.
class OpHandle {
 public:
  explicit OpHandle(std::string_view name) : name_(name) {}
  const OpSchema& get() const {
    if (op_ == nullptr) op_ = &OpRegistry::global().find(name_);
    return *op_;
  }
  std::vector<Tensor> operator()(const AnyParams& params, const std::vector<Tensor>& inputs) const {
    return apply_op(get(), params, inputs);
  }
  Tensor call1(const AnyParams& params, const std::vector<Tensor>& inputs) const {
    return apply_op1(get(), params, inputs);
  }
  /// Runs this op without inputs on `device`.
  Tensor call1_on(const Device& device, const AnyParams& params) const {
    std::vector<Tensor> out = apply_op(get(), params, {}, device);
    OFL_ASSERT(out.size() == 1) << name_ << " has " << out.size() << " outputs";
    return std::move(out[0]);
  }

 private:
  std::string_view name_;
  mutable const OpSchema* op_ = nullptr;
};

}  // namespace ofl
