// Note [Argument errors in the library's words]: when no overload of a bound function accepts
// its arguments, pybind11 raises "f(): incompatible function arguments. The following argument
// types are supported: ... Invoked with: ...", naming the bindings' internal types. Every
// function of the module and every method of Tensor gets one more overload, tried last, that
// takes anything and raises TypeError in the library's form instead:
//   [abs] expects (input: Tensor). However, got (a list of 2 tensors).
// pybind11 tries every overload without implicit conversions first, so the catch-all would
// shadow a call that only needs one (an int for a float). So it calls the function again,
// declining (a reference_cast_error: "try the next overload") when it meets the same arguments
// inside that call, which lets pybind11's second pass convert them; only if that fails too does
// it raise. A call that works without conversions never reaches it.

#include <string>
#include <vector>

#include "oneflowlike/common/error.h"
#include "oneflowlike/tensor.h"
#include "python/src/bindings.h"

namespace ofl::python {

namespace {

// The call the catch-all is retrying on this thread: the function's name, then the identities
// of its arguments (empty: none).
thread_local std::vector<const void*> retrying;

std::vector<const void*> identities(const std::string& name, const py::args& args,
                                    const py::kwargs& kwargs) {
  std::vector<const void*> out{&name};
  for (py::handle a : args) out.push_back(a.ptr());
  for (auto [key, value] : kwargs) out.push_back(value.ptr());
  return out;
}

std::string without_module(std::string s) {
  for (const std::string prefix : {"oneflowlike._C.", "numpy."}) {
    for (size_t at = s.find(prefix); at != std::string::npos; at = s.find(prefix, at)) {
      s.erase(at, prefix.size());
    }
  }
  return s;
}

// The "(arg: type, ...)" of each overload in a pybind11 docstring.
std::vector<std::string> signatures(const std::string& name, const std::string& doc) {
  std::vector<std::string> out;
  size_t begin = 0;
  while (begin < doc.size()) {
    size_t end = doc.find('\n', begin);
    if (end == std::string::npos) end = doc.size();
    std::string line = doc.substr(begin, end - begin);
    begin = end + 1;
    const size_t start = line.find(name + "(");
    if (start == std::string::npos || line.find("*args, **kwargs") != std::string::npos) continue;
    const size_t open = start + name.size();
    const size_t arrow = line.rfind(" -> ");
    const size_t close = line.rfind(')', arrow == std::string::npos ? line.size() : arrow);
    if (close == std::string::npos || close < open) continue;
    std::string signature = without_module(line.substr(open, close - open + 1));
    const std::string self = "(self: Tensor";  // a method's receiver goes without saying
    if (signature.rfind(self, 0) == 0) {
      signature = "(" + signature.substr(self.size() + (signature[self.size()] == ',' ? 2 : 0));
    }
    out.push_back(signature);
  }
  return out;
}

std::string describe(py::handle value) {
  if (py::isinstance<Tensor>(value)) {
    const Tensor& t = value.cast<const Tensor&>();
    return str_cat(t.is_lazy() ? "a traced tensor " : "a tensor ", t.shape().to_string(), " ",
                   dtype_name(t.dtype()));
  }
  if (py::hasattr(value, "is_global") && py::bool_(value.attr("is_global")).cast<bool>()) {
    return str_cat("a global tensor ", py::str(value.attr("shape")).cast<std::string>());
  }
  if (py::isinstance<py::list>(value) || py::isinstance<py::tuple>(value)) {
    const py::sequence items = py::reinterpret_borrow<py::sequence>(value);
    bool tensors = items.size() > 0;
    for (py::handle item : items) {
      tensors = tensors && (py::isinstance<Tensor>(item) || py::hasattr(item, "is_global"));
    }
    const char* kind = py::isinstance<py::list>(value) ? "list" : "tuple";
    if (tensors) return str_cat("a ", kind, " of ", items.size(), " tensors");
    const std::string text = py::repr(value).cast<std::string>();
    return text.size() <= 40 ? text : str_cat("a ", kind, " of ", items.size(), " items");
  }
  if (value.is_none() || py::isinstance<py::str>(value) || py::isinstance<py::bool_>(value) ||
      py::isinstance<py::int_>(value) || py::isinstance<py::float_>(value)) {
    const std::string text = py::repr(value).cast<std::string>();
    return text.size() <= 40 ? text : text.substr(0, 37) + "...";
  }
  return str_cat("a ", py::str(py::type::of(value).attr("__name__")).cast<std::string>());
}

// The overload tried last: raises the library's TypeError for `name` (a method of Tensor when
// `method`; its first argument is then the receiver and goes unsaid).
// Whether `a` is a meta tensor, or a list or tuple holding one (Note [Meta tensors] in
// python/oneflowlike/framework/meta.py).
bool holds_meta(py::handle a) {
  if (py::isinstance<py::list>(a) || py::isinstance<py::tuple>(a)) {
    for (py::handle item : a) {
      if (holds_meta(item)) return true;
    }
    return false;
  }
  return !py::isinstance<Tensor>(a) && py::hasattr(a, "is_meta") &&
         py::bool_(a.attr("is_meta")).cast<bool>();
}

// A meta tensor among the arguments has no data: refused as such, in the meta device's words,
// not as an argument of the wrong type.
[[noreturn]] void refuse_meta(const std::string& name) {
  py::object error =
      py::module_::import("oneflowlike.framework.meta").attr("_no_data")(str_cat("'", name, "'"));
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(error.ptr())), error.ptr());
  throw py::error_already_set();
}

py::cpp_function last_overload(const std::string& name, py::object existing, bool method,
                               py::handle scope) {
  std::vector<std::string> accepted = signatures(name, py::str(existing.attr("__doc__")));
  auto name_ptr = std::make_shared<const std::string>(name);
  auto raise = [name, name_ptr, accepted, method, scope](py::args args,
                                                         py::kwargs kwargs) -> py::object {
    std::vector<const void*> these = identities(*name_ptr, args, kwargs);
    if (these == retrying) throw py::reference_cast_error();  // let the converting pass run
    {
      const std::vector<const void*> outer = retrying;
      retrying = these;
      try {
        // The function itself: this overload declines inside, the others convert.
        py::object result = py::getattr(scope, name.c_str())(*args, **kwargs);
        retrying = outer;
        return result;
      } catch (py::error_already_set& e) {
        retrying = outer;
        if (!e.matches(PyExc_TypeError) ||
            std::string(e.what()).find("incompatible function arguments") == std::string::npos) {
          throw;
        }
      } catch (...) {
        retrying = outer;
        throw;
      }
    }
    if (method && (args.size() == 0 || !py::isinstance<Tensor>(args[0]))) {
      throw_error(ErrorCode::kTypeError,
                  str_cat("[", name, "] is a method of local tensors. However, it was called on ",
                          args.size() == 0 ? std::string("nothing") : describe(args[0]), "."));
    }
    for (py::handle a : args) {
      if (holds_meta(a)) refuse_meta(name);
    }
    for (auto [key, value] : kwargs) {
      if (holds_meta(value)) refuse_meta(name);
    }
    std::string got;
    for (size_t i = method ? 1 : 0; i < args.size(); ++i) {
      got += str_cat(got.empty() ? "" : ", ", describe(args[i]));
    }
    for (auto [key, value] : kwargs) {
      got +=
          str_cat(got.empty() ? "" : ", ", py::str(key).cast<std::string>(), "=", describe(value));
    }
    std::string expected;
    for (const std::string& signature : accepted) {
      expected += str_cat(expected.empty() ? "" : " or ", signature);
    }
    throw_error(ErrorCode::kTypeError,
                str_cat("[", name, "] expects ", expected.empty() ? "other arguments" : expected,
                        ". However, got (", got, ")."));
  };
  if (method) {
    return py::cpp_function(raise, py::name(name.c_str()), py::is_method(scope),
                            py::sibling(existing));
  }
  return py::cpp_function(raise, py::name(name.c_str()), py::scope(scope), py::sibling(existing));
}

}  // namespace

void add_argument_errors(py::module_& m) {
  const py::dict functions = m.attr("__dict__");
  std::vector<std::string> names;
  for (auto [key, value] : functions) {
    if (PyCFunction_Check(value.ptr())) names.push_back(py::str(key));
  }
  for (const std::string& name : names) {
    m.add_object(name.c_str(), last_overload(name, m.attr(name.c_str()), false, m),
                 /*overwrite=*/true);
  }
  py::object tensor = m.attr("Tensor");
  names.clear();
  for (auto [key, value] : py::dict(tensor.attr("__dict__"))) {
    const std::string name = py::str(key);
    if (PyInstanceMethod_Check(value.ptr()) && name != "__init__") names.push_back(name);
  }
  for (const std::string& name : names) {
    py::setattr(tensor, name.c_str(), last_overload(name, tensor.attr(name.c_str()), true, tensor));
  }
}

}  // namespace ofl::python
