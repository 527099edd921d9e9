#pragma once
// One init_<area>(m) per file, called from module.cpp. Bindings hold no logic: they expose
// ofl::functional and core types with PyTorch/OneFlow names and docstrings.

#include <pybind11/pybind11.h>

#include "python/src/casters.h"

namespace ofl::python {

namespace py = pybind11;

void init_errors(py::module_& m);
void init_tensor(py::module_& m);
void init_elementwise(py::module_& m);
void init_reduce(py::module_& m);
void init_reshape(py::module_& m);
void init_unary(py::module_& m);
void init_scalar(py::module_& m);
void init_creation(py::module_& m);
void init_where(py::module_& m);
void init_matmul(py::module_& m);
void init_softmax(py::module_& m);
void init_layer_norm(py::module_& m);
void init_rms_norm(py::module_& m);
void init_rotary(py::module_& m);
void init_embedding(py::module_& m);
void init_cross_entropy(py::module_& m);
void init_random(py::module_& m);
void init_threads(py::module_& m);
void init_optimizer(py::module_& m);
void init_shape_ops(py::module_& m);
void init_fused(py::module_& m);
void init_attention(py::module_& m);
void init_cached_attention(py::module_& m);
void init_index_ops(py::module_& m);
void init_sort(py::module_& m);
void init_scan(py::module_& m);
void init_autocast(py::module_& m);
void init_graph(py::module_& m);
void init_cuda(py::module_& m);
/// Note [Argument errors in the library's words]: called last, after every binding.
void add_argument_errors(py::module_& m);

}  // namespace ofl::python
