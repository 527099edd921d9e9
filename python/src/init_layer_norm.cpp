#include "python/src/bindings.h"

namespace ofl::python {

void init_layer_norm(py::module_& m) { (void)m; }

}  // namespace ofl::python
