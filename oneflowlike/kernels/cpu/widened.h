#pragma once
// float16 and bfloat16 kernels made from the float32 ones.
//
// Note [Widened kernels]: on the CPU the 16-bit dtypes compute in float32, as the CUDA kernels
// do (kernels/cuda/common.cuh). Widened<T, Kernel> copies each T input to float32 (in the
// thread's arena, Note [Widening arena]), runs
// Kernel<float> on the copies, and rounds each T output once (round to nearest even); inputs
// and outputs of other dtypes (indices, labels, masks, bool results) pass as they are. So the
// arithmetic is the float32 kernel's, and one definition serves three dtypes. The copies cost
// memory traffic a native 16-bit loop would not (the casts are plain loops the compiler
// vectorises for bfloat16); matmul has native bf16 (onednn_matmul.h).

#include <algorithm>
#include <type_traits>
#include <vector>

#include "oneflowlike/common/parallel.h"
#include "oneflowlike/half.h"
#include "oneflowlike/op.h"

namespace ofl::cpu {

// Note [Widening arena]: the float32 copies of one call live in one buffer per thread, grown to
// the largest call's need and kept, carved into 64-byte aligned pieces. A fresh tensor per copy
// made the kernel fault in and zero its pages on every call: 14% of a bf16 GPT step (6 layers,
// 384 channels, 2 threads) went to clearing huge pages. A call needing more than kMaxKeptBytes
// (an eager op on a huge tensor, whose arithmetic dwarfs the faults) and a nested call on the
// same thread (none today) take fresh tensors instead, so a thread keeps at most that much.
class WideningArena {
 public:
  static constexpr int64_t kAlign = 16;  // floats: 64 bytes
  static constexpr int64_t kMaxKeptBytes = int64_t{256} << 20;

  /// The floats the copies of tensors of `shapes` take, each piece 64-byte aligned.
  static int64_t floats_for(const std::vector<Shape>& shapes) {
    int64_t total = 0;
    for (const Shape& s : shapes) total += (s.numel() + kAlign - 1) / kAlign * kAlign;
    return total;
  }

  /// Float32 tensors of `shapes`, valid until the arena is released.
  explicit WideningArena(const std::vector<Shape>& shapes) {
    const int64_t total = floats_for(shapes);
    thread_local Tensor buffer;
    thread_local bool busy = false;
    owner_ = !busy && total * int64_t{sizeof(float)} <= kMaxKeptBytes;
    if (owner_) {
      busy = true;
      busy_ = &busy;
      if (!buffer.defined() || buffer.numel() < total) {
        buffer = Tensor::empty(Shape{std::max<int64_t>(total, 1)}, DataType::kFloat32);
      }
    }
    int64_t at = 0;
    for (const Shape& s : shapes) {
      if (!owner_) {
        pieces_.push_back(Tensor::empty(s, DataType::kFloat32));
        continue;
      }
      pieces_.push_back(buffer.narrow_rows(at, at + s.numel()).view(s));
      at += (s.numel() + kAlign - 1) / kAlign * kAlign;
    }
  }
  ~WideningArena() {
    if (owner_) *busy_ = false;
  }
  WideningArena(const WideningArena&) = delete;
  WideningArena& operator=(const WideningArena&) = delete;
  const Tensor& piece(size_t k) const { return pieces_.at(k); }

 private:
  bool owner_ = false;
  bool* busy_ = nullptr;
  std::vector<Tensor> pieces_;
};

/// Whether `kernel` is a Widened one (registered by the macros below), and the bytes of the
/// float32 copies such a kernel makes for a call whose 16-bit tensors have `shapes`: what the
/// memory report counts as the thread's widening arena (Note [Widening arena]).
bool is_widened_kernel(KernelFn kernel);
void note_widened_kernel(KernelFn kernel);
int64_t widening_bytes(const std::vector<Shape>& shapes);

template <class T, template <class> class Kernel>
struct Widened {
  static_assert(std::is_same_v<T, float16> || std::is_same_v<T, bfloat16>);
  static void run(const KernelContext& ctx) {
    constexpr DataType kLow = dtype_of<T>();
    std::vector<Shape> shapes;
    for (const Tensor& t : ctx.inputs) {
      if (t.dtype() == kLow) shapes.push_back(t.shape());
    }
    for (const Tensor& t : ctx.outputs) {
      if (t.dtype() == kLow) shapes.push_back(t.shape());
    }
    const WideningArena arena(shapes);
    size_t next = 0;
    std::vector<Tensor> inputs, outputs;
    for (const Tensor& t : ctx.inputs) {
      if (t.dtype() != kLow) {
        inputs.push_back(t);
        continue;
      }
      const Tensor& wide = arena.piece(next++);
      const T* x = t.data<T>();
      float* y = wide.data<float>();
      parallel_for(t.numel(), kParallelGrain, [&](int64_t b, int64_t e) {
        if constexpr (std::is_same_v<T, float16>) {
          halves_to_floats(x + b, y + b, e - b);  // F16C (half.h)
        } else {
          for (int64_t i = b; i < e; ++i) y[i] = static_cast<float>(x[i]);
        }
      });
      inputs.push_back(wide);
    }
    for (const Tensor& t : ctx.outputs) {
      outputs.push_back(t.dtype() == kLow ? arena.piece(next++) : t);
    }
    // The same params, scratch, output region and random stream.
    Kernel<float>::run(KernelContext{ctx.params, inputs, outputs, ctx.temp, ctx.temp_bytes,
                                     ctx.output_region, ctx.logical_output_shape,
                                     ctx.random_stream});
    for (size_t k = 0; k < outputs.size(); ++k) {
      if (ctx.outputs[k].dtype() != kLow) continue;
      const float* x = outputs[k].data<float>();
      T* y = ctx.outputs[k].data<T>();
      parallel_for(outputs[k].numel(), kParallelGrain, [&](int64_t b, int64_t e) {
        if constexpr (std::is_same_v<T, float16>) {
          floats_to_halves(x + b, y + b, e - b);
        } else {
          for (int64_t i = b; i < e; ++i) y[i] = T(x[i]);
        }
      });
    }
  }
};

// Note [Native bfloat16 loops]: the elementwise kernels (the binary arithmetic, every unary op
// and its backward, the tensor-scalar ops, fused chains), the reductions (sum, mean, max, min),
// rotary embedding, the comparisons and the orders (max/min over a dim, topk, sort) read and
// write bfloat16 themselves: each element is widened to float32 in a register (a shift),
// computed by the same float32 function, and rounded once, so the results are the Widened
// kernel's bit for bit without its two extra passes over memory. (Kernels that only move values,
// the orders' values and the gathers, copy the stored bits: a signalling NaN keeps its quiet
// bit clear where the Widened round trip set it.) Their loops take elements through compute_of<T>;
// float16 keeps the Widened path, whose conversions are vectorised with F16C (a scalar float16
// conversion is ~10x slower), except in the row kernels (Note [Native bfloat16 rows] in
// wide_rows.h), which convert a row at a time with F16C.
template <class T>
using compute_of = std::conditional_t<std::is_same_v<T, bfloat16>, float, T>;

}  // namespace ofl::cpu

/// Registers Widened<float16, Kernel> for op `name` on the CPU, for ops whose bfloat16 kernel is
/// native (Note [Native bfloat16 loops]).
#define OFL_REGISTER_WIDENED_FLOAT16_KERNEL(name, Kernel)                               \
  [[maybe_unused]] static const bool OFL_CONCAT(ofl_widened_half_, __COUNTER__) = [] {  \
    ::ofl::OpRegistry::global().get_or_create(name).add_kernel(                         \
        ::ofl::DeviceType::kCPU, ::ofl::DataType::kFloat16,                             \
        &::ofl::cpu::Widened<::ofl::float16, Kernel>::run);                             \
    ::ofl::cpu::note_widened_kernel(&::ofl::cpu::Widened<::ofl::float16, Kernel>::run); \
    return true;                                                                        \
  }()

/// Registers Widened<float16, Kernel> and Widened<bfloat16, Kernel> for op `name` on the CPU.
#define OFL_REGISTER_WIDENED_KERNEL(name, Kernel)                                        \
  [[maybe_unused]] static const bool OFL_CONCAT(ofl_widened_, __COUNTER__) = [] {        \
    ::ofl::OpSchema& op = ::ofl::OpRegistry::global().get_or_create(name);               \
    op.add_kernel(::ofl::DeviceType::kCPU, ::ofl::DataType::kFloat16,                    \
                  &::ofl::cpu::Widened<::ofl::float16, Kernel>::run);                    \
    op.add_kernel(::ofl::DeviceType::kCPU, ::ofl::DataType::kBFloat16,                   \
                  &::ofl::cpu::Widened<::ofl::bfloat16, Kernel>::run);                   \
    ::ofl::cpu::note_widened_kernel(&::ofl::cpu::Widened<::ofl::float16, Kernel>::run);  \
    ::ofl::cpu::note_widened_kernel(&::ofl::cpu::Widened<::ofl::bfloat16, Kernel>::run); \
    return true;                                                                         \
  }()
