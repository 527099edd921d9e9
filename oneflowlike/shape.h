#pragma once
// Shape of a tensor: a list of non-negative extents. () is a scalar with one element.

#include <cstdint>
#include <initializer_list>
#include <ostream>
#include <string>
#include <vector>

namespace ofl {

class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) : dims_(dims) {}
  explicit Shape(std::vector<int64_t> dims) : dims_(std::move(dims)) {}

  int ndim() const { return static_cast<int>(dims_.size()); }
  int64_t operator[](int i) const { return dims_[i]; }
  int64_t& operator[](int i) { return dims_[i]; }
  /// Extent of axis i; negative i counts from the end (-1 is the last axis).
  int64_t at(int i) const { return dims_[i < 0 ? i + ndim() : i]; }
  int64_t numel() const;
  /// Product of extents in [begin, end).
  int64_t count(int begin, int end) const;
  const std::vector<int64_t>& dims() const { return dims_; }
  std::vector<int64_t>& mutable_dims() { return dims_; }
  /// Row-major strides in elements.
  std::vector<int64_t> strides() const;

  bool operator==(const Shape& other) const { return dims_ == other.dims_; }
  bool operator!=(const Shape& other) const { return dims_ != other.dims_; }
  /// "(4, 8)"; a scalar is "()".
  std::string to_string() const;

 private:
  std::vector<int64_t> dims_;
};

std::ostream& operator<<(std::ostream& os, const Shape& shape);

/// Normalises axis (negative counts from the end) against ndim; raises IndexError naming
/// `op` when it is out of range.
int normalize_axis(int64_t axis, int ndim, const char* op);

/// NumPy broadcasting of two shapes; raises ValueError naming `op` and both shapes.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

}  // namespace ofl
