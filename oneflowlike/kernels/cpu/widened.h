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
#include <array>
#include <type_traits>
#include <vector>

#include "oneflowlike/common/parallel.h"
#include "oneflowlike/half.h"
#include "oneflowlike/kernels/cpu/wide_rows.h"
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

/// Whether `kernel` is a Widened one (noted by note_widened_kernel), and the bytes of the
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
// write bfloat16 and float16 themselves: each element is widened to float32 in a register,
// computed by the same float32 function, and rounded once, so the results are the Widened
// kernel's bit for bit (a NaN's payload aside) without its two extra passes over memory.
// bfloat16's conversions are a shift and a rounding add, float16's a few masks (Note
// [Vectorisable float16 conversions] in half.h); GCC vectorises both inside the loops. (Kernels
// that only move values, the orders' values and the gathers, copy the stored bits: a
// signalling NaN keeps its quiet bit clear where the Widened round trip set it.) Their loops
// take elements through compute_of<T>. The row kernels (Note [Native bfloat16 rows] in
// wide_rows.h) convert a row at a time into float32 scratch instead.
// The loops compute the 16-bit types as the row kernels do.
template <class T>
using compute_of = row_compute_of<T>;

// Note [float16 blocks]: float16's vectorised conversions (Note [Vectorisable float16
// conversions] in half.h) cost about a nanosecond per element of a + b on this VM, where F16C's
// bulk conversions cost a quarter of that; the conversion-bound loops (the binary arithmetic,
// the unary ops and their backward, the tensor-scalar ops) therefore take float16 a block at a
// time: the block's inputs widened with F16C into float32 scratch on the stack, the float32
// loop run over the scratch, the results rounded with F16C. Both conversions give the same bits
// (a NaN's payload aside), so the results are those of the element-wise float16 loops.
inline constexpr int64_t kHalfBlock = 512;

/// Over [begin, end) of K float16 inputs: each block of at most kHalfBlock elements widened into
/// wide[k], `loop(wide, n)` run (writing its n results into wide[0]), and wide[0] rounded into
/// out.
template <size_t K, class Loop>
void float16_blocks(const std::array<const float16*, K>& in, float16* out, int64_t begin,
                    int64_t end, const Loop& loop) {
  alignas(64) float wide[K][kHalfBlock];
  for (int64_t at = begin; at < end; at += kHalfBlock) {
    const int64_t n = std::min(kHalfBlock, end - at);
    for (size_t k = 0; k < K; ++k) halves_to_floats(in[k] + at, wide[k], n);
    loop(wide, n);
    floats_to_halves(wide[0], out + at, n);
  }
}

}  // namespace ofl::cpu
