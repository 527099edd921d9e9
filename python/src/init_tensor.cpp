// The Tensor class, dtypes, devices, autograd entry points and numpy interop.

#include <pybind11/functional.h>
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <cstring>
#include <optional>

#include "oneflowlike/autograd.h"
#include "oneflowlike/ops/reshape.h"
#include "oneflowlike/tensor.h"
#include "python/src/bindings.h"

namespace ofl::python {

namespace {

// numpy's dtype for each of ours; bfloat16 has none and is widened to float32 by numpy().
py::dtype numpy_dtype(DataType dtype) {
  switch (dtype) {
    case DataType::kFloat32:
      return py::dtype::of<float>();
    case DataType::kFloat64:
      return py::dtype::of<double>();
    case DataType::kFloat16:
      return py::dtype("float16");
    case DataType::kBFloat16:
      return py::dtype::of<float>();
    case DataType::kInt8:
      return py::dtype::of<int8_t>();
    case DataType::kInt32:
      return py::dtype::of<int32_t>();
    case DataType::kInt64:
      return py::dtype::of<int64_t>();
    case DataType::kBool:
      return py::dtype::of<bool>();
  }
  return py::dtype::of<float>();
}

DataType dtype_of_numpy(const py::dtype& dt) {
  const char kind = dt.kind();
  const size_t size = dt.itemsize();
  if (kind == 'f' && size == 4) return DataType::kFloat32;
  if (kind == 'f' && size == 8) return DataType::kFloat64;
  if (kind == 'f' && size == 2) return DataType::kFloat16;
  if (kind == 'i' && size == 1) return DataType::kInt8;
  if (kind == 'i' && size == 4) return DataType::kInt32;
  if (kind == 'i' && size == 8) return DataType::kInt64;
  if (kind == 'b') return DataType::kBool;
  throw_error(ErrorCode::kTypeError,
              str_cat("[tensor] numpy dtype ", dt.attr("name").cast<std::string>(),
                      " has no oneflowlike counterpart (float32, float64, float16, int8, int32, "
                      "int64, bool)."));
}

/// Copies a C-contiguous numpy array into a new tensor of the array's dtype.
Tensor from_numpy(py::array array) {
  array = py::array::ensure(array, py::array::c_style);
  OFL_CHECK_TYPE(array, "[tensor] expected an array-like of numbers.");
  const DataType dtype = dtype_of_numpy(array.dtype());
  std::vector<int64_t> dims(array.shape(), array.shape() + array.ndim());
  return Tensor::from_host(array.data(), Shape(std::move(dims)), dtype);
}

py::array to_numpy(const Tensor& tensor) {
  const Tensor t = tensor.to(Device::cpu());  // a CUDA tensor's bytes come to the host first
  std::vector<py::ssize_t> shape(t.shape().dims().begin(), t.shape().dims().end());
  py::array out(numpy_dtype(t.dtype()), shape);
  if (t.dtype() == DataType::kBFloat16) {
    const bfloat16* src = t.data<bfloat16>();
    float* dst = static_cast<float*>(out.mutable_data());
    for (int64_t i = 0; i < t.numel(); ++i) dst[i] = static_cast<float>(src[i]);
  } else {
    std::memcpy(out.mutable_data(), t.raw_data(), t.nbytes());
  }
  return out;
}

}  // namespace

void init_tensor(py::module_& m) {
  auto dtype = py::enum_<DataType>(m, "dtype", "Element type of a tensor.");
#define OFL_BIND_DTYPE(name, Enum, ctype) dtype.value(#name, DataType::Enum);
  OFL_FOR_EACH_DTYPE(OFL_BIND_DTYPE)
#undef OFL_BIND_DTYPE
  // __repr__ and __str__ ("oneflowlike.float32") are set in Python: pybind11 would chain them
  // after the enum's own overloads instead of replacing them.
  dtype.def_property_readonly("is_floating_point", &is_floating)
      .def_property_readonly("itemsize", &dtype_size);
  m.def("dtype_from_name", &dtype_from_name, py::arg("name"));
  m.def("promote_types", &promote_types, py::arg("a"), py::arg("b"));

  py::class_<Device>(m, "device", "A device: 'cpu', 'cpu:0', 'cuda:1'.")
      .def(py::init([](const std::string& spec) { return Device::parse(spec); }), py::arg("spec"))
      .def_property_readonly("type",
                             [](const Device& d) { return std::string(device_type_name(d.type)); })
      .def_readonly("index", &Device::index)
      .def("__eq__", &Device::operator==)
      .def("__repr__", [](const Device& d) { return "device('" + d.to_string() + "')"; })
      .def("__str__", &Device::to_string);

  py::class_<Tensor>(m, "Tensor", "A local tensor (contiguous, on one device).")
      .def(py::init([](const Tensor& data) { return data.detach(); }), py::arg("data"),
           "A new leaf tensor sharing data's storage, without its autograd history (what "
           "nn.Parameter(data) builds on).")
      .def_property_readonly("shape", &Tensor::shape)
      .def_property_readonly("dtype", &Tensor::dtype)
      .def_property_readonly("device", &Tensor::device)
      .def_property_readonly("ndim", &Tensor::ndim)
      .def("dim", &Tensor::ndim)
      .def("numel", &Tensor::numel)
      .def("size", [](const Tensor& t) { return t.shape(); })
      .def("element_size", [](const Tensor& t) { return dtype_size(t.dtype()); })
      .def("numpy", &to_numpy, "A numpy copy of the tensor (bfloat16 comes back as float32).")
      .def(
          "_to_device",
          [](const Tensor& t, const std::string& device) { return t.to(Device::parse(device)); },
          "A copy on another device (itself when already there); no autograd history.")
      .def_property(
          "data",
          [](const Tensor& t) {  // as detach(): in a trace, an op of it (Note [Detach in a graph])
            return t.defined() && t.is_lazy() ? functional::stop_gradient(t) : t.detach();
          },
          [](const Tensor& t, const Tensor& src) { t.set_data(src); },
          "The tensor without autograd history; assigning one replaces this tensor's storage, "
          "shape, dtype and device, its autograd state kept (as torch's .data).")
      .def("pin_memory", &Tensor::pin_memory,
           "A copy in page-locked host memory (itself when it is there): its copies to and from "
           "GPUs are DMA transfers. Needs a CUDA device.")
      .def("is_pinned", &Tensor::is_pinned, "Whether its memory is page-locked host memory.")
      .def_property_readonly("is_cuda",
                             [](const Tensor& t) { return t.device().type == DeviceType::kCUDA; })
      .def(
          "get_device",
          [](const Tensor& t) {
            return t.device().type == DeviceType::kCUDA ? t.device().index : -1;
          },
          "The CUDA device's index, -1 on the CPU (torch's get_device).")
      .def("item", &Tensor::item, "The value of a one-element tensor.")
      .def(
          "detach",
          [](const Tensor& t) {
            // Note [Detach in a graph]: a traced tensor's detach is an op of the trace.
            return t.defined() && t.is_lazy() ? functional::stop_gradient(t) : t.detach();
          },
          "The same values, outside autograd (in nn.Graph.build, a value no gradient flows "
          "through).")
      .def("clone", &Tensor::clone)
      .def_property("requires_grad", &Tensor::requires_grad, &Tensor::set_requires_grad)
      .def(
          "requires_grad_",
          [](Tensor& t, bool requires_grad) {
            t.set_requires_grad(requires_grad);
            return t;
          },
          py::arg("requires_grad") = true)
      .def_property(
          "grad",
          [](const Tensor& t) -> py::object {
            Tensor g = t.grad();
            return g.defined() ? py::cast(g) : py::none();
          },
          [](Tensor& t, py::object g) { t.set_grad(g.is_none() ? Tensor() : g.cast<Tensor>()); })
      .def_property_readonly("is_leaf", &Tensor::is_leaf)
      .def_property_readonly("_version", &Tensor::version,
                             "How many in-place writes its storage has had (torch's _version).")
      .def_property_readonly(
          "_storage_id",
          [](const Tensor& t) -> uint64_t { return t.is_lazy() ? 0 : t.impl()->storage->serial(); },
          "Which storage it holds: the same number for tensors sharing one, never another's "
          "(0 for a traced value).")
      .def_property_readonly(
          "_data_ptr",
          [](const Tensor& t) {
            return t.is_lazy() ? 0 : reinterpret_cast<uintptr_t>(t.raw_data());
          },
          "The address of its first element (0 for a traced value).")
      .def_property_readonly(
          "_stamp",
          [](const Tensor& t) {
            if (t.is_lazy()) return py::make_tuple(0, 0, 0);
            return py::make_tuple(t.impl()->storage->serial(),
                                  reinterpret_cast<uintptr_t>(t.raw_data()), t.version());
          },
          "(_storage_id, _data_ptr, _version) in one call: what changes when its values or its "
          "memory change (Note [Graphs sharing modules]).")
      .def(
          "_bump_version",
          [](const Tensor& t) {
            if (!t.is_lazy()) t.impl()->storage->bump_version();
          },
          "Counts an in-place write made outside its ops (Note [Versions]): a graph's run "
          "updating the tensor it is bound to.")
      .def(
          "_register_hook",
          [](const Tensor& t, py::function fn) {
            // Note [Gradient hooks]: the node may go on any thread; the callable goes under
            // the GIL.
            std::shared_ptr<py::object> hook(new py::object(std::move(fn)), [](py::object* o) {
              py::gil_scoped_acquire gil;
              delete o;
            });
            return register_grad_hook(t, [hook](const Tensor& g) -> Tensor {
              py::gil_scoped_acquire gil;
              py::object r = (*hook)(g);
              if (r.is_none()) return Tensor();
              if (!py::isinstance<Tensor>(r)) {
                throw py::type_error(
                    "[register_hook] a hook must return None or a tensor. However, got " +
                    std::string(py::str(r.get_type().attr("__name__"))) + ".");
              }
              return r.cast<Tensor>();
            });
          },
          py::arg("hook"))
      .def("_hook_remover", &grad_hook_remover, py::arg("id"))
      .def("retain_grad", &retain_grad,
           "Keeps this computed tensor's gradient in .grad from the next backward on.")
      .def_property_readonly("retains_grad", &retains_grad)
      .def_property_readonly("_grad_fn_name",
                             [](const Tensor& t) -> py::object {
                               const std::string name = grad_fn_name(t);
                               if (name.empty()) return py::none();
                               return py::str(name);
                             })
      .def("_shares_storage_with", &Tensor::shares_storage_with)
      .def("_describe", &Tensor::describe)
      .def(
          "backward",
          [](const Tensor& t, std::optional<Tensor> gradient, bool retain_graph) {
            std::vector<Tensor> grads;
            if (gradient) grads.push_back(*gradient);
            backward({t}, grads, retain_graph);
          },
          py::arg("gradient") = py::none(), py::arg("retain_graph") = false,
          "Accumulates gradients of this tensor into the .grad of every leaf it depends on.");

  m.def("from_numpy", &from_numpy, py::arg("array"),
        "A tensor holding a copy of a numpy array (same dtype).");
  m.def(
      "autograd_backward",
      [](const std::vector<Tensor>& roots, const std::vector<Tensor>& grads, bool retain_graph) {
        backward(roots, grads, retain_graph);
      },
      py::arg("tensors"), py::arg("grad_tensors"), py::arg("retain_graph") = false);
  m.def(
      "_record_function",
      [](const std::vector<Tensor>& inputs, std::vector<Tensor> outputs, py::function backward,
         const std::string& name) {
        // Note [Custom backward]; the callable goes under the GIL, as a hook does.
        std::shared_ptr<py::object> fn(new py::object(std::move(backward)), [](py::object* o) {
          py::gil_scoped_acquire gil;
          delete o;
        });
        return record_function(
            inputs, outputs,
            [fn](const std::vector<Tensor>& grads) {
              py::gil_scoped_acquire gil;
              py::list given;
              for (const Tensor& g : grads) {
                given.append(g.defined() ? py::cast(g) : py::none());
              }
              std::vector<Tensor> out;
              for (py::handle r : py::iter((*fn)(given))) {
                out.push_back(r.is_none() ? Tensor() : r.cast<Tensor>());
              }
              return out;
            },
            name);
      },
      py::arg("inputs"), py::arg("outputs"), py::arg("backward"), py::arg("name"),
      "Note [Custom backward]: records `backward` (output grads -> input grads, None for "
      "none) as the gradient of `outputs` with respect to `inputs`; whether it recorded.");
  m.def(
      "autograd_grad",
      [](const std::vector<Tensor>& outputs, const std::vector<Tensor>& grads,
         const std::vector<Tensor>& inputs, bool retain_graph) {
        py::list result;
        for (const Tensor& g : grad(outputs, grads, inputs, retain_graph)) {
          result.append(g.defined() ? py::cast(g) : py::none());
        }
        return result;
      },
      py::arg("outputs"), py::arg("grad_outputs"), py::arg("inputs"),
      py::arg("retain_graph") = false,
      "Note [Gradients of inputs]: the gradients of `inputs` (None where unreached).");
  m.def("_computing_gradients_of_inputs", &computing_gradients_of_inputs);
  m.def("is_grad_enabled", &GradMode::enabled);
  m.def("set_grad_enabled", &GradMode::set_enabled, py::arg("mode"));
  m.def("cpu_memory_live_bytes", [] { return cpu_allocator()->live_bytes(); });
  m.def("cpu_memory_peak_bytes", [] { return cpu_allocator()->peak_bytes(); });
  m.def("cpu_memory_reset_peak", [] { cpu_allocator()->reset_peak(); });
}

}  // namespace ofl::python
