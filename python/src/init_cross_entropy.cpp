#include "python/src/bindings.h"

namespace ofl::python {

void init_cross_entropy(py::module_& m) { (void)m; }

}  // namespace ofl::python
