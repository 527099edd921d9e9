// Kernel threads: torch.set_num_threads / get_num_threads over the OpenMP pool the CPU kernels
// share (oneflowlike/common/parallel.h).

#include <omp.h>

#include "oneflowlike/common/error.h"
#include "python/src/bindings.h"

namespace ofl::python {

void init_threads(py::module_& m) {
  m.def(
      "set_num_threads",
      [](int threads) {
        OFL_CHECK(threads >= 1,
                  "[set_num_threads] the CPU kernels need at least one thread. However, got ",
                  threads, ".");
        omp_set_num_threads(threads);
      },
      py::arg("threads"),
      "The threads the calling thread's CPU kernels run on (OpenMP's; OMP_NUM_THREADS sets the "
      "start).");
  m.def(
      "get_num_threads", [] { return omp_get_max_threads(); },
      "The threads the calling thread's CPU kernels run on.");
}

}  // namespace ofl::python
