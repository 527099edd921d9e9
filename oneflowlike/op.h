#pragma once
// The op registry (NNVM style). An op is registered once, by name, in the file of its family
// (ops/<family>.cpp), with its typed parameter struct and attributes:
//
//   OFL_REGISTER_OP("matmul")
//       .inputs({"a", "b"})
//       .outputs({"out"})
//       .params<MatmulParams>()
//       .set<FInferMeta>(infer_matmul)
//       .set<FSbpSignatures>(matmul_signatures)
//       .set<FGradient>(matmul_gradient);
//
// Kernels are added per device and dtype from kernels/<device>/<family>.cpp with
// OFL_REGISTER_KERNEL. Each pass reads only the attributes it needs; a new attribute is a new
// tag struct (F... for functions, T... for values) set from any file, with no change here.

#include <any>
#include <array>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <typeindex>
#include <unordered_map>
#include <vector>

#include "oneflowlike/params.h"
#include "oneflowlike/sbp.h"
#include "oneflowlike/tensor.h"

namespace ofl {

class OpSchema;

/// What meta inference knows of a tensor.
struct TensorMeta {
  Shape shape;
  DataType dtype = DataType::kFloat32;
  bool operator==(const TensorMeta& o) const { return shape == o.shape && dtype == o.dtype; }
};

/// Input of meta inference (and of SBP signature and temp-size functions).
class InferContext {
 public:
  InferContext(const OpSchema& op, const AnyParams& params, const std::vector<TensorMeta>& inputs)
      : op_(op), params_(params), inputs_(inputs) {}

  const OpSchema& op() const { return op_; }
  const std::string& op_name() const;
  template <class P>
  const P& params() const {
    return params_.as<P>();
  }
  const AnyParams& any_params() const { return params_; }
  int num_inputs() const { return static_cast<int>(inputs_.size()); }
  const TensorMeta& input(int i) const { return inputs_[i]; }
  const Shape& shape(int i) const { return inputs_[i].shape; }
  DataType dtype(int i) const { return inputs_[i].dtype; }
  /// Names of input i for messages: "a", or "inputs[2]" for a variadic op.
  std::string input_name(int i) const;
  /// "a (4, 8) float32, b (6, 5) float32": the actual values for the "However, got" part.
  std::string describe_inputs() const;

 private:
  const OpSchema& op_;
  const AnyParams& params_;
  const std::vector<TensorMeta>& inputs_;
};

/// Everything a kernel sees. Kernels assume valid input: all checks happen in inference.
struct KernelContext {
  const AnyParams& params;
  const std::vector<Tensor>& inputs;
  const std::vector<Tensor>& outputs;
  void* temp = nullptr;  // FTempBytes bytes of scratch memory
  size_t temp_bytes = 0;
  // The part of the logical tensor that output 0 holds, for kernels whose values depend on the
  // logical position (random numbers, arange; their ops have TPositionDependent): one range per
  // axis. Empty means "all of it".
  const std::vector<Range>* output_region = nullptr;
  // Logical shape of output 0 when output_region is set.
  const Shape* logical_output_shape = nullptr;
  // Which draw of a random op this is within a compiled plan (iteration * micro-batches +
  // micro-batch): random kernels move their counters on by one output's worth per stream, so
  // every iteration and micro-batch gets fresh numbers and a recomputation within the same one
  // repeats them. 0 in eager mode, where every call reserves fresh counters instead.
  uint64_t random_stream = 0;

  template <class P>
  const P& p() const {
    return params.as<P>();
  }
  const Tensor& in(int i) const { return inputs[i]; }
  const Tensor& out(int i) const { return outputs[i]; }
};

/// How a gradient builder emits backward ops. The eager engine implements it over tensors and
/// the compiler over graph values, so each gradient is written once (Note [One gradient]).
class GradBuilder {
 public:
  using Value = int;  // handle of a tensor in the builder; kNone for "no tensor"
  static constexpr Value kNone = -1;

  virtual ~GradBuilder() = default;
  virtual const AnyParams& any_params() const = 0;
  template <class P>
  const P& params() const {
    return any_params().as<P>();
  }
  virtual int num_inputs() const = 0;
  virtual int num_outputs() const = 0;
  virtual Value input(int i) = 0;
  virtual Value output(int i) = 0;
  /// The gradient flowing into output i, or kNone when nothing depends on that output.
  virtual Value output_grad(int i) = 0;
  virtual bool needs_input_grad(int i) const = 0;
  virtual void set_input_grad(int i, Value grad) = 0;
  virtual TensorMeta meta(Value v) const = 0;
  /// Emits op(inputs) and returns its outputs.
  virtual std::vector<Value> apply(std::string_view op, AnyParams params,
                                   std::vector<Value> inputs) = 0;
  /// Emits a single-output op.
  Value apply1(std::string_view op, AnyParams params, std::vector<Value> inputs) {
    return apply(op, std::move(params), std::move(inputs)).at(0);
  }
};

using InferMetaFn = std::function<std::vector<TensorMeta>(const InferContext&)>;
using SbpSignaturesFn = std::function<std::vector<SbpSignature>(const InferContext&)>;
using GradientFn = std::function<void(GradBuilder&)>;
using TempBytesFn = std::function<size_t(const InferContext&)>;
using KernelFn = void (*)(const KernelContext&);

// Attribute tags. `type` is what the attribute holds.
/// Output shapes and dtypes from input metas; raises a user error on bad input.
struct FInferMeta {
  using type = InferMetaFn;
};
/// The valid 1-d SBP signatures, given logical input metas. N-d signatures are products.
struct FSbpSignatures {
  using type = SbpSignaturesFn;
};
/// Emits the backward ops. Ops without it are not differentiable.
struct FGradient {
  using type = GradientFn;
};
/// Scratch bytes a kernel needs.
struct FTempBytes {
  using type = TempBytesFn;
};
/// Inputs the kernel writes in place (optimizer updates). Read them through mutated_inputs().
struct TMutatedInputs {
  using type = std::vector<int>;
};
/// The same for a variadic op, given its params and number of inputs (the multi-tensor updates).
struct FMutatedInputs {
  using type = std::function<std::vector<int>(const AnyParams& params, int num_inputs)>;
};
/// The kernel's values depend on where its output piece lies in the logical tensor (random draws
/// counted by logical position, arange's values): it reads KernelContext::output_region and
/// logical_output_shape, which a plan gives only the tasks of such ops (the other compute tasks
/// would carry about 150 bytes each for nothing; docs/benchmarks.md, "Collectives" (b)).
struct TPositionDependent {
  using type = bool;
};
/// Output 0 is a view of this input (reshape): no kernel, no copy.
struct TViewOfInput {
  using type = int;
};
/// No gradient flows through the op's outputs (stop_gradient: a traced tensor's detach()); the
/// compiler's autograd pass treats them as constants.
struct TStopsGradient {
  using type = bool;
};
/// Eager mode: the device the outputs are made on, given the params (to_device), instead of the
/// inputs' device; the kernel is the inputs' device's. In a graph the placement decides.
struct FOutputDevice {
  using type = std::function<Device(const AnyParams&)>;
};
/// The op pairs up the pieces of its tensors split by one placement dimension (attention's
/// query heads with their key/value heads under grouped-query attention): where two of them are
/// split along axes of different extents, the pieces correspond only when each extent divides
/// evenly among its parts, which the compiler checks against the placement.
struct TAlignedSplits {
  using type = bool;
};
/// Which input's dtype picks the kernel (default 0; -1 means output 0's dtype).
struct TKernelDtypeFrom {
  using type = int;
};
/// Note [Mixed precision policy]: under mixed precision (nn.Graph's enable_amp through the
/// compiler's amp pass, flow.autocast in eager) every op falls in one of three classes, as
/// torch.autocast sorts its ops:
///  - kLowPrecision (matmul, batch_matmul, attention): float32 inputs are cast down, and the
///    outputs stay in the low dtype;
///  - kFollow (data movement and cheap elementwise ops: reshape, transpose, slice, add, gelu, ...):
///    the op runs in its inputs' dtype, so activations between two low-precision ops stay low;
///    float32 mixed with the low dtype is promoted to float32, as torch promotes;
///  - kFloat32 (every op without the attribute: softmax, norms, losses, reductions, exp, log):
///    low-precision inputs are cast up to float32.
/// Parameters, their gradients and the optimizer state stay float32. amp_input_dtypes
/// (autocast.h) is the one place that applies it, for graphs and eager alike.
enum class AmpCategory : int8_t { kFloat32, kLowPrecision, kFollow };
struct TUnderAmp {
  using type = AmpCategory;
};

class OpSchema {
 public:
  explicit OpSchema(std::string name) : name_(std::move(name)) {}

  const std::string& name() const { return name_; }

  OpSchema& inputs(std::vector<std::string> names) {
    input_names_ = std::move(names);
    return *this;
  }
  /// Any number of inputs, each called `name[i]` in messages.
  OpSchema& variadic_inputs(std::string name) {
    input_names_ = {std::move(name)};
    variadic_inputs_ = true;
    return *this;
  }
  OpSchema& outputs(std::vector<std::string> names) {
    output_names_ = std::move(names);
    return *this;
  }
  /// The number of outputs is decided by FInferMeta.
  OpSchema& variadic_outputs(std::string name) {
    output_names_ = {std::move(name)};
    variadic_outputs_ = true;
    return *this;
  }
  template <class P>
  OpSchema& params() {
    params_type_ = typeid(P);
    params_name_ = P::kParamsName;
    write_params_ = [](const AnyParams& params, ParamsWriter& w) {
      detail::for_each_field(params.as<P>(),
                             [&](std::string_view name, const auto& v) { w.write(name, v); });
    };
    read_params_ = [](ParamsReader& r) -> AnyParams {
      P p;
      detail::for_each_field(p, [&](std::string_view name, auto& v) { r.read(name, &v); });
      return p;
    };
    return *this;
  }
  /// Serialises params of this op's type field by field.
  void write_params(const AnyParams& params, ParamsWriter& writer) const {
    write_params_(params, writer);
  }
  /// Builds this op's params struct from fields (absent fields keep their defaults).
  AnyParams read_params(ParamsReader& reader) const { return read_params_(reader); }
  template <class Attr>
  OpSchema& set(typename Attr::type value) {
    attrs_[typeid(Attr)] = std::move(value);
    return *this;
  }
  /// The attribute, or nullptr when the op does not have it.
  template <class Attr>
  const typename Attr::type* get() const {
    auto it = attrs_.find(typeid(Attr));
    return it == attrs_.end() ? nullptr : std::any_cast<typename Attr::type>(&it->second);
  }
  template <class Attr>
  bool has() const {
    return attrs_.count(typeid(Attr)) > 0;
  }

  void add_kernel(DeviceType device, DataType dtype, KernelFn fn);
  /// The kernel, or nullptr.
  KernelFn find_kernel(DeviceType device, DataType dtype) const;
  /// The dtype that picks the kernel (TKernelDtypeFrom): input 0's by default, output 0's for
  /// -1 or an op without inputs (raises when that is asked of an op without outputs).
  DataType kernel_dtype(const std::vector<DataType>& inputs, std::optional<DataType> output0) const;
  /// Names of the dtypes with a kernel on `device`, for messages: "float32, float64".
  std::string kernel_dtypes(DeviceType device) const;

  const std::vector<std::string>& input_names() const { return input_names_; }
  const std::vector<std::string>& output_names() const { return output_names_; }
  bool has_variadic_inputs() const { return variadic_inputs_; }
  bool has_variadic_outputs() const { return variadic_outputs_; }
  std::type_index params_type() const { return params_type_; }
  std::string_view params_name() const { return params_name_; }
  bool defined() const { return has<FInferMeta>(); }

  /// Checks arity and params type, then runs FInferMeta. Raises on user error.
  std::vector<TensorMeta> infer(const AnyParams& params,
                                const std::vector<TensorMeta>& inputs) const;

 private:
  std::string name_;
  std::vector<std::string> input_names_;
  std::vector<std::string> output_names_;
  bool variadic_inputs_ = false;
  bool variadic_outputs_ = false;
  std::type_index params_type_ = typeid(NoParams);
  std::string_view params_name_ = NoParams::kParamsName;
  std::function<void(const AnyParams&, ParamsWriter&)> write_params_ = [](const AnyParams&,
                                                                          ParamsWriter&) {};
  std::function<AnyParams(ParamsReader&)> read_params_ = [](ParamsReader&) {
    return AnyParams(NoParams{});
  };
  std::unordered_map<std::type_index, std::any> attrs_;
  std::array<std::array<KernelFn, kNumDataTypes>, kNumDeviceTypes> kernels_{};
};

/// The inputs an op with these params and `num_inputs` inputs writes in place (TMutatedInputs
/// or FMutatedInputs); empty for the others. The one reader of both attributes.
std::vector<int> mutated_inputs(const OpSchema& op, const AnyParams& params, int num_inputs);
/// Whether the op writes any input in place.
inline bool writes_inputs(const OpSchema& op) {
  return op.has<TMutatedInputs>() || op.has<FMutatedInputs>();
}

class OpRegistry {
 public:
  static OpRegistry& global();
  /// The schema called `name`, created empty on first use (so that kernel files may register
  /// before or after the op's own file).
  OpSchema& get_or_create(std::string_view name);
  /// The schema; raises NotFound when no op of that name is registered.
  const OpSchema& find(std::string_view name) const;
  const OpSchema* try_find(std::string_view name) const;
  std::vector<std::string> names() const;

 private:
  std::map<std::string, std::unique_ptr<OpSchema>, std::less<>> ops_;
};

namespace detail {
template <class T, class... Ts>
struct KernelRegistrar {
  template <template <class> class Kernel>
  static void add(OpSchema& op, DeviceType device) {
    op.add_kernel(device, dtype_of<T>(), &Kernel<T>::run);
    if constexpr (sizeof...(Ts) > 0) KernelRegistrar<Ts...>::template add<Kernel>(op, device);
  }
};
}  // namespace detail

}  // namespace ofl

#define OFL_CONCAT_INNER(a, b) a##b
#define OFL_CONCAT(a, b) OFL_CONCAT_INNER(a, b)

/// Registers (or extends) an op; chain the builder calls of OpSchema after it.
#define OFL_REGISTER_OP(name)                                                 \
  [[maybe_unused]] static ::ofl::OpSchema& OFL_CONCAT(ofl_op_, __COUNTER__) = \
      ::ofl::OpRegistry::global().get_or_create(name)

/// Registers Kernel<T>::run for each listed C++ type T on `device`:
///   OFL_REGISTER_KERNEL("add", kCPU, AddKernel, float, double, int32_t, int64_t);
#define OFL_REGISTER_KERNEL(name, device, Kernel, ...)                               \
  [[maybe_unused]] static const bool OFL_CONCAT(ofl_kernel_, __COUNTER__) = [] {     \
    ::ofl::detail::KernelRegistrar<__VA_ARGS__>::add<Kernel>(                        \
        ::ofl::OpRegistry::global().get_or_create(name), ::ofl::DeviceType::device); \
    return true;                                                                     \
  }()
