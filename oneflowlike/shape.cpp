#include "oneflowlike/shape.h"

#include <algorithm>

#include "oneflowlike/common/error.h"

namespace ofl {

int64_t Shape::numel() const { return count(0, ndim()); }

int64_t Shape::count(int begin, int end) const {
  int64_t n = 1;
  for (int i = begin; i < end; ++i) {
    // A product past int64 wrapped around (to 0, or a small count) and gave a tensor without
    // storage that kernels then read and wrote past: refused, naming the shape.
    int64_t next = 0;
    OFL_CHECK(!__builtin_mul_overflow(n, dims_[i], &next), "[tensor] shape ", to_string(),
              " has more elements than an int64 counts; no tensor of it can exist.");
    n = next;
  }
  return n;
}

std::vector<int64_t> Shape::strides() const {
  std::vector<int64_t> s(dims_.size());
  int64_t stride = 1;
  for (int i = ndim() - 1; i >= 0; --i) {
    s[i] = stride;
    stride *= dims_[i];
  }
  return s;
}

std::string Shape::to_string() const {
  std::string s = "(";
  for (int i = 0; i < ndim(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(dims_[i]);
  }
  if (ndim() == 1) s += ",";
  return s + ")";
}

std::ostream& operator<<(std::ostream& os, const Shape& shape) { return os << shape.to_string(); }

int normalize_axis(int64_t axis, int ndim, const char* op) {
  const int64_t lo = ndim == 0 ? -1 : -ndim;
  const int64_t hi = ndim == 0 ? 0 : ndim - 1;
  OFL_CHECK_INDEX(axis >= lo && axis <= hi, "[", op, "] dimension out of range: expected in [", lo,
                  ", ", hi, "] for a ", ndim, "-d tensor. However, got ", axis, ".");
  return static_cast<int>(axis < 0 ? axis + std::max(ndim, 1) : axis);
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  const int n = std::max(a.ndim(), b.ndim());
  std::vector<int64_t> out(n);
  for (int i = 0; i < n; ++i) {
    const int ia = a.ndim() - n + i, ib = b.ndim() - n + i;
    const int64_t da = ia >= 0 ? a[ia] : 1, db = ib >= 0 ? b[ib] : 1;
    OFL_CHECK(da == db || da == 1 || db == 1, "[", op,
              "] shapes must broadcast (each axis equal or 1). However, got ", a.to_string(),
              " and ", b.to_string(), " (axis ", i - n, ": ", da, " vs ", db, ").");
    out[i] = da == 1 ? db : da;
  }
  return Shape(std::move(out));
}

}  // namespace ofl
