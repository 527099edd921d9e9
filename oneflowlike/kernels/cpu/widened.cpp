// The registry of Widened kernels and the size of their copies (Note [Widening arena]).

#include "oneflowlike/kernels/cpu/widened.h"

#include <mutex>
#include <unordered_set>

namespace ofl::cpu {

namespace {

struct WidenedKernels {
  std::mutex mu;
  std::unordered_set<KernelFn> kernels;  // GUARDED_BY(mu)
};

WidenedKernels& widened_kernels() {
  static auto* const registry = new WidenedKernels;  // never freed: used during static init
  return *registry;
}

}  // namespace

bool is_widened_kernel(KernelFn kernel) {
  WidenedKernels& w = widened_kernels();
  std::lock_guard<std::mutex> lock(w.mu);
  return w.kernels.count(kernel) > 0;
}

void note_widened_kernel(KernelFn kernel) {
  WidenedKernels& w = widened_kernels();
  std::lock_guard<std::mutex> lock(w.mu);
  w.kernels.insert(kernel);
}

int64_t widening_bytes(const std::vector<Shape>& shapes) {
  return WideningArena::floats_for(shapes) * static_cast<int64_t>(sizeof(float));
}

}  // namespace ofl::cpu
