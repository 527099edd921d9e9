// Eager autocast's per-thread state (Note [Eager autocast] in oneflowlike/autocast.h); the
// context manager is flow.autocast (python/oneflowlike/amp.py).

#include "oneflowlike/autocast.h"
#include "python/src/bindings.h"

namespace ofl::python {

void init_autocast(py::module_& m) {
  m.def("autocast_dtype", &autocast_dtype,
        "The dtype autocast ops run in on this thread (float32: autocast is off).");
  m.def("set_autocast_dtype", &set_autocast_dtype, py::arg("dtype"),
        "Sets this thread's autocast dtype (float32 turns it off).");
}

}  // namespace ofl::python
