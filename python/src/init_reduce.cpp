#include "python/src/bindings.h"

namespace ofl::python {

void init_reduce(py::module_& m) { (void)m; }

}  // namespace ofl::python
