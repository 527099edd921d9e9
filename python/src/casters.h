#pragma once
// pybind11 conversions: ofl::Shape <-> tuple of ints, ofl::Range <-> (begin, end).

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "oneflowlike/sbp.h"
#include "oneflowlike/shape.h"

namespace pybind11::detail {

template <>
struct type_caster<ofl::Shape> {
  PYBIND11_TYPE_CASTER(ofl::Shape, const_name("Sequence[int]"));

  bool load(handle src, bool convert) {
    if (PyLong_Check(src.ptr())) {  // reshape(4) and zeros(4) mean a 1-d shape
      value = ofl::Shape{src.cast<int64_t>()};
      return true;
    }
    make_caster<std::vector<int64_t>> dims;
    if (!dims.load(src, convert)) return false;
    value = ofl::Shape(cast_op<std::vector<int64_t>&&>(std::move(dims)));
    return true;
  }

  static handle cast(const ofl::Shape& shape, return_value_policy, handle) {
    tuple t(shape.ndim());
    for (int i = 0; i < shape.ndim(); ++i) t[i] = int_(shape[i]);
    return t.release();
  }
};

template <>
struct type_caster<ofl::Range> {
  PYBIND11_TYPE_CASTER(ofl::Range, const_name("tuple[int, int]"));

  bool load(handle src, bool convert) {
    make_caster<std::pair<int64_t, int64_t>> pair;
    if (!pair.load(src, convert)) return false;
    const auto [begin, end] = cast_op<std::pair<int64_t, int64_t>&&>(std::move(pair));
    value = ofl::Range{begin, end};
    return true;
  }

  static handle cast(const ofl::Range& r, return_value_policy, handle) {
    return make_tuple(r.begin, r.end).release();
  }
};

}  // namespace pybind11::detail
