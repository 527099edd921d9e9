// Eager autocast's per-thread state (Note [Eager autocast] in oneflowlike/autocast.h); the
// context manager is flow.autocast (python/oneflowlike/amp.py).

#include "oneflowlike/autocast.h"
#include "python/src/bindings.h"

namespace ofl::python {

void init_autocast(py::module_& m) {
  m.def("autocast_dtype", &autocast_dtype,
        "The dtype autocast ops run in on this thread (float32: autocast is off).");
  m.def("set_autocast_dtype", &set_autocast_dtype, py::arg("dtype"),
        "Sets this thread's autocast dtype (float32 turns it off and empties the weight-cast "
        "cache).");
  m.def("autocast_cache_enabled", &autocast_cache_enabled,
        "Whether autocast regions on this thread cache weight casts (Note [Autocast weight "
        "cache] in oneflowlike/autocast.h).");
  m.def("set_autocast_cache_enabled", &set_autocast_cache_enabled, py::arg("enabled"));
  m.def("clear_autocast_cache", &clear_autocast_cache,
        "Empties this thread's weight-cast cache (torch.clear_autocast_cache).");
  m.def("_autocast_cache_size", &autocast_cache_size, "The weights cached on this thread.");
}

}  // namespace ofl::python
