#pragma once
// Tensor: a reference-counted handle to (storage, byte offset, shape, dtype, device).
// Tensors are contiguous; reshape and leading-axis slices are views that share storage.

#include <atomic>
#include <memory>
#include <string>

#include "oneflowlike/allocator.h"
#include "oneflowlike/dtype.h"
#include "oneflowlike/shape.h"

namespace ofl {

class Storage {
 public:
  Storage(size_t bytes, Allocator* allocator);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return allocator_->device(); }
  Allocator* allocator() const { return allocator_; }
  /// A number no other storage of the process has had or will have (an address comes back once
  /// its storage is freed): what tells a tensor given new memory from one written in place.
  uint64_t serial() const { return serial_; }

  /// Note [Versions]: how many in-place writes the storage has had (assign_, optimizer
  /// updates). Autograd records it for every tensor it saves and refuses a backward that would
  /// read a tensor written since.
  int64_t version() const { return version_.load(std::memory_order_relaxed); }
  void bump_version() { version_.fetch_add(1, std::memory_order_relaxed); }

  /// The storage holds a copy that indexing made (t[...] where torch would give a view):
  /// in-place writes into it are refused, since they would not reach the indexed tensor.
  bool indexed_copy() const { return indexed_copy_; }
  void set_indexed_copy(bool copy = true) { indexed_copy_ = copy; }

 private:
  void* data_;
  size_t bytes_;
  Allocator* allocator_;
  std::atomic<int64_t> version_{0};
  uint64_t serial_;
  bool indexed_copy_ = false;
};

struct AutogradMeta;

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  size_t offset_bytes = 0;
  Shape shape;
  DataType dtype = DataType::kFloat32;
  std::shared_ptr<AutogradMeta> autograd;  // null when no gradient is tracked
  bool lazy = false;  // no storage: a value of a graph being traced (Note [Lazy tensors])
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  /// Uninitialised memory.
  static Tensor empty(const Shape& shape, DataType dtype, Device device = Device::cpu());
  /// The same in memory from `allocator` (its device's).
  static Tensor empty(const Shape& shape, DataType dtype, Allocator* allocator);
  static Tensor zeros(const Shape& shape, DataType dtype, Device device = Device::cpu());
  /// Copies `bytes` from host memory.
  static Tensor from_host(const void* data, const Shape& shape, DataType dtype,
                          Device device = Device::cpu());
  /// A scalar (shape ()) holding value converted to dtype.
  static Tensor scalar(double value, DataType dtype, Device device = Device::cpu());

  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const { return impl_->shape; }
  int ndim() const { return impl_->shape.ndim(); }
  int64_t numel() const { return impl_->shape.numel(); }
  DataType dtype() const { return impl_->dtype; }
  Device device() const { return impl_->lazy ? Device::cpu() : impl_->storage->device(); }
  /// A traced value without storage (Note [Lazy tensors] in lazy.h).
  bool is_lazy() const { return impl_->lazy; }
  size_t nbytes() const { return numel() * dtype_size(dtype()); }
  void* raw_data() const {
    if (impl_->lazy) throw_lazy_data_access();
    return static_cast<char*>(impl_->storage->data()) + impl_->offset_bytes;
  }
  template <class T>
  T* data() const {
    return static_cast<T*>(raw_data());
  }
  /// Value of a one-element tensor, converted to double.
  double item() const;

  /// A view with another shape of the same numel (shares storage, no autograd).
  Tensor view(const Shape& shape) const;
  /// A view of rows [begin, end) of axis 0 (shares storage, no autograd).
  Tensor narrow_rows(int64_t begin, int64_t end) const;
  /// The same storage without autograd history.
  Tensor detach() const;
  /// A deep copy (no autograd history).
  Tensor clone() const;
  /// A copy in page-locked host memory (cuda::pinned_host_allocator; torch's pin_memory), or
  /// itself when it is there. Raises without a CUDA device; on simulated devices (host memory,
  /// nothing to lock) a copy in ordinary memory.
  Tensor pin_memory() const;
  /// Whether its memory is page-locked host memory (pin_memory).
  bool is_pinned() const;
  /// This tensor on `device`: itself when it is there, else a copy (no autograd history).
  /// Copies to or from a CUDA device return once the copy is done.
  Tensor to(Device device) const;
  /// Makes this tensor hold `src`'s storage, shape and dtype (torch's `t.data = src`), keeping
  /// its autograd state: Module.to moves a parameter this way, so whoever holds it (an
  /// optimizer) sees the moved values. Refused for a traced value.
  void set_data(const Tensor& src) const;
  /// Copies the bytes of `src` (same dtype and element count, both contiguous) into this
  /// tensor, between any two devices; returns once the copy is done, except within one GPU,
  /// where it is queued on the GPU's compute stream, ordered before the kernels launched after
  /// it there (cuda::copy).
  void copy_from(const Tensor& src) const;
  bool shares_storage_with(const Tensor& other) const {
    return impl_->storage == other.impl_->storage;
  }
  /// The storage's version (Note [Versions]); 0 for a lazy tensor.
  int64_t version() const { return impl_->lazy ? 0 : impl_->storage->version(); }

  // Autograd (see autograd.h).
  bool requires_grad() const;
  void set_requires_grad(bool requires_grad);
  bool is_leaf() const;
  Tensor grad() const;
  void set_grad(const Tensor& grad);

  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  /// "tensor(shape=(2, 3), dtype=float32, device=cpu:0)"
  std::string describe() const;

 private:
  [[noreturn]] void throw_lazy_data_access() const;
  std::shared_ptr<TensorImpl> impl_;
};

}  // namespace ofl
