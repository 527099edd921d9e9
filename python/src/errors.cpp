// The one place that maps C++ errors to Python exceptions.

#include "oneflowlike/common/error.h"
#include "python/src/bindings.h"

namespace ofl::python {

void init_errors(py::module_& m) {
  (void)m;
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const ofl::Error& e) {
      PyObject* type = PyExc_RuntimeError;
      switch (e.code()) {
        case ErrorCode::kInvalidArgument:
          type = PyExc_ValueError;
          break;
        case ErrorCode::kTypeError:
          type = PyExc_TypeError;
          break;
        case ErrorCode::kOutOfRange:
          type = PyExc_IndexError;
          break;
        case ErrorCode::kNotFound:
          type = PyExc_LookupError;
          break;
        case ErrorCode::kDeadlineExceeded:
          type = PyExc_TimeoutError;
          break;
        case ErrorCode::kUnimplemented:
          type = PyExc_NotImplementedError;
          break;
        default:
          type = PyExc_RuntimeError;
          break;
      }
      PyErr_SetString(type, e.what());
    }
  });
}

}  // namespace ofl::python
