#include "python/src/bindings.h"

namespace ofl::python {

void init_matmul(py::module_& m) { (void)m; }

}  // namespace ofl::python
