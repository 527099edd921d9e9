#include "oneflowlike/tensor.h"

#include <cstring>

#include "oneflowlike/autograd.h"
#include "oneflowlike/common/error.h"
#include "oneflowlike/cuda/device.h"

namespace ofl {

Storage::Storage(size_t bytes, Allocator* allocator)
    : data_(allocator->allocate(bytes)), bytes_(bytes), allocator_(allocator) {
  static std::atomic<uint64_t> next_serial{1};
  serial_ = next_serial.fetch_add(1, std::memory_order_relaxed);
}

Storage::~Storage() { allocator_->deallocate(data_, bytes_); }

Tensor Tensor::empty(const Shape& shape, DataType dtype, Device device) {
  return empty(shape, dtype, allocator_for(device));
}

Tensor Tensor::empty(const Shape& shape, DataType dtype, Allocator* allocator) {
  for (int64_t d : shape.dims()) {
    OFL_CHECK(d >= 0, "[empty] every extent must be non-negative. However, got shape ",
              shape.to_string(), ".");
  }
  int64_t bytes = 0;
  OFL_CHECK(!__builtin_mul_overflow(shape.numel(), dtype_size(dtype), &bytes), "[empty] shape ",
            shape.to_string(), " of ", dtype_name(dtype),
            " has more bytes than an int64 counts; no tensor of it can exist.");
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(bytes, allocator);
  impl->shape = shape;
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

namespace {

// -1 for host memory, else the CUDA device index (cuda::copy's convention).
int cuda_index(Device device) { return device.type == DeviceType::kCUDA ? device.index : -1; }

// Copies bytes between any two devices; host memory to host memory (simulated CUDA devices
// included) is a memcpy, the rest is the CUDA layer's.
void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) {
  if (bytes == 0) return;
  if (in_host_memory(dst_device) && in_host_memory(src_device)) {
    std::memcpy(dst, src, bytes);
  } else {
    cuda::copy(dst, cuda_index(dst_device), src, cuda_index(src_device), bytes);
  }
}

}  // namespace

Tensor Tensor::zeros(const Shape& shape, DataType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  if (!in_host_memory(device)) {
    cuda::zero(t.raw_data(), device.index, t.nbytes());
  } else {
    std::memset(t.raw_data(), 0, t.nbytes());
  }
  return t;
}

Tensor Tensor::from_host(const void* data, const Shape& shape, DataType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  copy_bytes(t.raw_data(), device, data, Device::cpu(), t.nbytes());
  return t;
}

Tensor Tensor::to(Device device) const {
  if (device == this->device()) return *this;
  Tensor t = empty(shape(), dtype(), device);
  copy_bytes(t.raw_data(), device, raw_data(), this->device(), nbytes());
  return t;
}

void Tensor::copy_from(const Tensor& src) const {
  OFL_CHECK(src.dtype() == dtype() && src.numel() == numel(), "[copy] the source must have ",
            describe(), "'s dtype and element count. However, got ", src.describe(), ".");
  copy_bytes(raw_data(), device(), src.raw_data(), src.device(), nbytes());
}

Tensor Tensor::scalar(double value, DataType dtype, Device device) {
  if (device.type != DeviceType::kCPU) return scalar(value, dtype).to(device);
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
  if (device().type != DeviceType::kCPU) return to(Device::cpu()).item();
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

Tensor Tensor::pin_memory() const {
  OFL_CHECK(device().type == DeviceType::kCPU,
            "[pin_memory] only a CPU tensor can be page-locked. However, got ", describe(), ".");
  if (is_pinned()) return *this;
  OFL_CHECK_CODE(cuda_devices() > 0, ErrorCode::kUnavailable,
                 "[pin_memory] page-locked memory is for copies to a CUDA device. However, there "
                 "is none: ",
                 cuda::why_no_device(), ".");
  Allocator* allocator =
      simulated_cuda_devices() > 0 ? cpu_allocator() : cuda::pinned_host_allocator();  // raises
  Tensor t = empty(shape(), dtype(), allocator);
  copy_bytes(t.raw_data(), Device::cpu(), raw_data(), Device::cpu(), nbytes());
  return t;
}

bool Tensor::is_pinned() const {
  return !is_lazy() && cuda::is_pinned_host_allocator(impl_->storage->allocator());
}

void Tensor::set_data(const Tensor& src) const {
  OFL_CHECK(!impl_->lazy && !src.is_lazy(),
            "[data] a traced value (inside nn.Graph.build()) has no data to replace. However, "
            "got ",
            describe(), " and ", src.describe(), ".");
  impl_->storage = src.impl_->storage;
  impl_->offset_bytes = src.impl_->offset_bytes;
  impl_->shape = src.impl_->shape;
  impl_->dtype = src.impl_->dtype;
}

Tensor Tensor::clone() const {
  Tensor t = empty(shape(), dtype(), device());
  copy_bytes(t.raw_data(), device(), raw_data(), device(), nbytes());
  return t;
}

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
