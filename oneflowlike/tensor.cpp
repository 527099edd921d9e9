#include "oneflowlike/tensor.h"

#include <cstring>

#include "oneflowlike/autograd.h"
#include "oneflowlike/common/error.h"

namespace ofl {

Storage::Storage(size_t bytes, Allocator* allocator)
    : data_(allocator->allocate(bytes)), bytes_(bytes), allocator_(allocator) {}

Storage::~Storage() { allocator_->deallocate(data_, bytes_); }

Tensor Tensor::empty(const Shape& shape, DataType dtype, Device device) {
  for (int64_t d : shape.dims()) {
    OFL_CHECK(d >= 0, "[empty] every extent must be non-negative. However, got shape ",
              shape.to_string(), ".");
  }
  auto impl = std::make_shared<TensorImpl>();
  impl->storage =
      std::make_shared<Storage>(shape.numel() * dtype_size(dtype), allocator_for(device));
  impl->shape = shape;
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

Tensor Tensor::zeros(const Shape& shape, DataType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  std::memset(t.raw_data(), 0, t.nbytes());
  return t;
}

Tensor Tensor::from_host(const void* data, const Shape& shape, DataType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  std::memcpy(t.raw_data(), data, t.nbytes());
  return t;
}

Tensor Tensor::scalar(double value, DataType dtype, Device device) {
  Tensor t = empty(Shape{}, dtype, device);
  visit_dtype(dtype, [&]<class T>() {
    if constexpr (std::is_same_v<T, float16> || std::is_same_v<T, bfloat16>) {
      *t.data<T>() = T(static_cast<float>(value));
    } else {
      *t.data<T>() = static_cast<T>(value);
    }
  });
  return t;
}

double Tensor::item() const {
  OFL_CHECK(numel() == 1, "[item] only a one-element tensor converts to a number. However, got ",
            describe(), ".");
  return visit_dtype(dtype(), [&]<class T>() -> double {
    if constexpr (std::is_same_v<T, float16> || std::is_same_v<T, bfloat16>) {
      return static_cast<float>(*data<T>());
    } else {
      return static_cast<double>(*data<T>());
    }
  });
}

Tensor Tensor::view(const Shape& shape) const {
  OFL_CHECK(shape.numel() == numel(),
            "[view] the new shape must have as many elements as the old. "
            "However, got ",
            shape.to_string(), " for a tensor of shape ", impl_->shape.to_string(), ".");
  auto impl = std::make_shared<TensorImpl>(*impl_);
  impl->shape = shape;
  impl->autograd = nullptr;
  return Tensor(std::move(impl));
}

Tensor Tensor::narrow_rows(int64_t begin, int64_t end) const {
  OFL_CHECK(ndim() >= 1 && 0 <= begin && begin <= end && end <= impl_->shape[0], "[narrow] rows [",
            begin, ", ", end, ") are out of range for shape ", impl_->shape.to_string(), ".");
  auto impl = std::make_shared<TensorImpl>(*impl_);
  impl->shape[0] = end - begin;
  impl->offset_bytes += begin * impl_->shape.count(1, ndim()) * dtype_size(dtype());
  impl->autograd = nullptr;
  return Tensor(std::move(impl));
}

Tensor Tensor::detach() const {
  auto impl = std::make_shared<TensorImpl>(*impl_);
  impl->autograd = nullptr;
  return Tensor(std::move(impl));
}

Tensor Tensor::clone() const { return from_host(raw_data(), shape(), dtype(), device()); }

void Tensor::throw_lazy_data_access() const {
  throw_error(ErrorCode::kFailedPrecondition,
              str_cat("[tensor] ", describe(),
                      " is a value of a graph being traced (nn.Graph.build): it has no data "
                      "until the graph runs. Return it from build() to get its value."));
}

std::string Tensor::describe() const {
  if (!defined()) return "tensor(undefined)";
  return str_cat(is_lazy() ? "lazy tensor(shape=" : "tensor(shape=", shape().to_string(),
                 ", dtype=", dtype_name(dtype()), ", device=", device().to_string(), ")");
}

}  // namespace ofl
