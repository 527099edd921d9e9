#include "oneflowlike/ops/optimizer.h"
#include "python/src/bindings.h"

namespace ofl::python {

void init_optimizer(py::module_& m) {
  m.def("sgd_update", &functional::sgd_update, py::arg("param"), py::arg("grad"),
        py::arg("momentum_buffer"), py::arg("lr"), py::arg("momentum") = 0.0,
        py::arg("dampening") = 0.0, py::arg("weight_decay") = 0.0, py::arg("nesterov") = false,
        "torch.optim.SGD's update of param and momentum_buffer, in place; lr is a scalar tensor.");
  m.def("adam_update", &functional::adam_update, py::arg("param"), py::arg("grad"),
        py::arg("exp_avg"), py::arg("exp_avg_sq"), py::arg("lr"), py::arg("step"),
        py::arg("beta1") = 0.9, py::arg("beta2") = 0.999, py::arg("eps") = 1e-8,
        py::arg("weight_decay") = 0.0, py::arg("decoupled_weight_decay") = false,
        "torch.optim.Adam/AdamW's update of param, exp_avg and exp_avg_sq, in place; lr and "
        "step (1-based) are scalar tensors.");
  m.def("multi_tensor_sum_squares", &functional::multi_tensor_sum_squares, py::arg("tensors"),
        "sum over the tensors of sum(t * t) (float32 or float64, one dtype): clip_grad_norm_'s "
        "squared total.");
  m.def("multi_tensor_count_nonfinite", &functional::multi_tensor_count_nonfinite,
        py::arg("tensors"),
        "The number of inf and nan elements of all the tensors (one floating dtype), a float32 "
        "scalar (GradScaler's check).");
}

}  // namespace ofl::python
