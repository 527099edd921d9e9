#pragma once
// Note [Native bfloat16 rows]: the 16-bit (bfloat16 and float16) kernels of the norms, softmax,
// cross-entropy and their backward ops (layer_norm, rms_norm, softmax, log_softmax,
// sparse_softmax_cross_entropy), and the sums of the embedding, gather and index_select
// gradients, read each 16-bit row into a float32 row of per-thread scratch, run the float32
// kernel's own row function on it, and round each output once (softmax over a non-last axis: a
// few lines of a block at a time, at most 16 K floats or one line). The arithmetic is the
// Widened kernel's (Note [Widened kernels] in widened.h), so the results are its bits; but the
// copies are one row each, in the thread's cache, instead of every operand copied whole into
// the widening arena and the outputs copied back: layer_norm over (4096, 768) bf16 took twice
// the float32 kernel's time that way. float16 rows convert 8 at a time with F16C
// (halves_to_floats in half.h), as the Widened kernel's copies do. The scratch is
// WideRows::kSlots rows per thread, as long as the longest row seen (a few KiB for a model's
// hidden size), kept for the thread's life up to 4 MiB a row (longer ones are freed when the
// kernel's work on the thread ends, trim()).

#include <cstdint>
#include <type_traits>
#include <vector>

#include "oneflowlike/half.h"

namespace ofl::cpu {

/// The 16-bit float types, whose row kernels compute on float32 rows (Note [Native bfloat16
/// rows]).
template <class T>
inline constexpr bool is_16bit_float = std::is_same_v<T, bfloat16> || std::is_same_v<T, float16>;

/// The type a row kernel computes T in: float for the 16-bit types, T otherwise.
template <class T>
using row_compute_of = std::conditional_t<is_16bit_float<T>, float, T>;

class WideRows {
 public:
  static constexpr int kSlots = 5;
  static constexpr int64_t kKeptFloats = int64_t{1} << 20;  // 4 MiB a row

  /// Row `slot` of this thread's scratch, at least `n` floats.
  static float* row(int slot, int64_t n) {
    std::vector<float>& r = rows()[slot];
    if (static_cast<int64_t>(r.size()) < n) r.resize(static_cast<size_t>(n));
    return r.data();
  }
  /// Frees this thread's rows longer than kKeptFloats, at the end of a kernel's work on the
  /// thread: a very long row (a softmax over 10^8 elements) is not kept for the thread's life.
  static void trim() {
    std::vector<float>* all = rows();
    for (int slot = 0; slot < kSlots; ++slot) {
      if (static_cast<int64_t>(all[slot].capacity()) > kKeptFloats) {
        std::vector<float>().swap(all[slot]);
      }
    }
  }
  /// x[0, n) widened into row `slot`.
  static const float* widened(int slot, const bfloat16* x, int64_t n) {
    float* out = row(slot, n);
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(x[i]);
    return out;
  }
  static const float* widened(int slot, const float16* x, int64_t n) {
    float* out = row(slot, n);
    halves_to_floats(x, out, n);
    return out;
  }
  /// x[0, n) rounded (to nearest even) into y.
  static void round(const float* x, bfloat16* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] = bfloat16(x[i]);
  }
  static void round(const float* x, float16* y, int64_t n) { floats_to_halves(x, y, n); }

 private:
  static std::vector<float>* rows() {
    thread_local std::vector<float> rows[kSlots];
    return rows;
  }
};

}  // namespace ofl::cpu
