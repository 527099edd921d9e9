// Random numbers: the global generator and the random ops (ops/random.h).

#include "oneflowlike/ops/random.h"
#include "python/src/bindings.h"

namespace ofl::python {

void init_random(py::module_& m) {
  m.def("manual_seed", &manual_seed, py::arg("seed"),
        "Seeds the global generator and restarts its counters.");
  m.def("initial_seed", &initial_seed, "The seed of the global generator.");
  // The functions without an input tensor take the device to make their result on.
  m.def("randn", &functional::randn, py::arg("size"), py::arg("dtype") = DataType::kFloat32,
        py::arg("device") = Device::cpu(),
        "Standard normal values drawn from the global generator.");
  m.def("rand", &functional::rand, py::arg("size"), py::arg("dtype") = DataType::kFloat32,
        py::arg("device") = Device::cpu(),
        "Uniform values in [0, 1) drawn from the global generator.");
  m.def("random_region", &functional::random_region, py::arg("normal"), py::arg("a"), py::arg("b"),
        py::arg("size"), py::arg("dtype"), py::arg("seed"), py::arg("offset"), py::arg("region"),
        "The piece `region` of a normal (a = mean, b = std) or uniform [a, b) draw with the "
        "given seed and offset.");
  m.def(
      "reserve_random",
      [](int64_t count) {
        const RandomState s = reserve_random(count);
        return std::make_pair(s.seed, s.offset);
      },
      py::arg("count"),
      "Reserves `count` counters of the global generator: (seed, first offset), as a draw of "
      "that many values would.");
  m.def(
      "random_state",
      [] {
        const RandomState s = random_state();
        return std::make_pair(s.seed, s.offset);
      },
      "The global generator's (seed, next counter), reserving none.");
  m.def(
      "set_random_state",
      [](int64_t seed, int64_t offset) {
        set_random_state(RandomState{seed, offset});
      },
      py::arg("seed"), py::arg("offset"), "Puts the global generator back at (seed, offset).");
  m.def("normal_region", &functional::normal_region, py::arg("mean"), py::arg("std"),
        py::arg("size"), py::arg("dtype"), py::arg("region"),
        "The piece `region` ((begin, end) per axis) of a normal draw of `size`, reserving the "
        "whole draw (Note [Sharded creation]); None without a region.");
  m.def("uniform_region", &functional::uniform_region, py::arg("low"), py::arg("high"),
        py::arg("size"), py::arg("dtype"), py::arg("region"),
        "The piece `region` ((begin, end) per axis) of a uniform draw of `size`, reserving the "
        "whole draw (Note [Sharded creation]); None without a region.");
  m.def("normal", &functional::normal, py::arg("mean"), py::arg("std"), py::arg("size"),
        py::arg("dtype") = DataType::kFloat32, py::arg("device") = Device::cpu(),
        "Normal values with the given mean and std drawn from the global generator.");
  m.def("uniform", &functional::uniform, py::arg("low"), py::arg("high"), py::arg("size"),
        py::arg("dtype") = DataType::kFloat32, py::arg("device") = Device::cpu(),
        "Uniform values in [low, high) drawn from the global generator.");
  m.def("check_dropout_probability", &check_dropout_probability, py::arg("p"),
        "Raises ValueError unless p is a probability in [0, 1], as dropout does.");
  m.def("dropout", &functional::dropout, py::arg("input"), py::arg("p") = 0.5,
        py::arg("training") = true,
        "Zeroes elements with probability p and scales the rest by 1 / (1 - p).");
  m.def("random_normal", &functional::random_normal, py::arg("size"), py::arg("dtype"),
        py::arg("mean"), py::arg("std"), py::arg("seed"), py::arg("offset"),
        py::arg("device") = Device::cpu(),
        "The random_normal op with an explicit seed and offset (deterministic).");
  m.def("random_uniform", &functional::random_uniform, py::arg("size"), py::arg("dtype"),
        py::arg("low"), py::arg("high"), py::arg("seed"), py::arg("offset"),
        py::arg("device") = Device::cpu(),
        "The random_uniform op with an explicit seed and offset (deterministic).");
  m.def("dropout_with_seed", &functional::dropout_with_seed, py::arg("input"), py::arg("p"),
        py::arg("seed"), py::arg("offset"),
        "The dropout op with an explicit seed and offset (deterministic; its mask is fixed).");
}

}  // namespace ofl::python
