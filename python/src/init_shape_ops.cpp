#include "python/src/bindings.h"

namespace ofl::python {

void init_shape_ops(py::module_& m) { (void)m; }

}  // namespace ofl::python
