// CPU kernel of expand (reshape is a view and has no kernel).

#include <algorithm>

#include "oneflowlike/kernels/cpu/broadcast.h"
#include "oneflowlike/op.h"

namespace ofl::cpu {

namespace {

template <class T>
struct ExpandKernel {
  static void run(const KernelContext& ctx) {
    const T* x = ctx.in(0).data<T>();
    T* y = ctx.out(0).data<T>();
    for_each_broadcast_run<1>(ctx.out(0).shape(), {&ctx.in(0).shape()},
                              [&](int64_t o, const std::array<int64_t, 1>& off,
                                  const std::array<int64_t, 1>& step, int64_t n) {
                                if (step[0] == 0) {
                                  std::fill(y + o, y + o + n, x[off[0]]);
                                } else {
                                  std::copy(x + off[0], x + off[0] + n, y + o);
                                }
                              });
  }
};

}  // namespace

OFL_REGISTER_KERNEL("expand", kCPU, ExpandKernel, float, double, float16, bfloat16, int8_t, int32_t,
                    int64_t, bool);

}  // namespace ofl::cpu
