// Attention over a KV cache extended in place (Note [Cached attention] in
// oneflowlike/ops/cached_attention.h).

#include "oneflowlike/ops/cached_attention.h"
#include "python/src/bindings.h"

namespace ofl::python {

void init_cached_attention(py::module_& m) {
  m.def("cached_attention", &functional::cached_attention, py::arg("q"), py::arg("k"), py::arg("v"),
        py::arg("k_cache"), py::arg("v_cache"), py::arg("position"), py::arg("scale"),
        py::arg("window") = 0,
        "Writes k and v (B, Hk, T, E) into the caches (B, Hk, L, E) in place at position (one "
        "int64) and returns causal attention of q (B, H, T, E) over the caches' rows up to each "
        "query's position (Note [Cached attention]).");
}

}  // namespace ofl::python
