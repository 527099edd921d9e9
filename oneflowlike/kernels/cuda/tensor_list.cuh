#pragma once
// Note [One launch per tensor list]: the multi-tensor ops (Note [Multi-tensor updates]) update
// or reduce many tensors in one act; launching a kernel per tensor costs the host a few
// microseconds each, and a GPT step has hundreds of parameters. So their kernels take a list of
// up to kListTensors tensors by value, in the kernel's parameters (about 1.5 KB, under the 4 KB
// every CUDA version takes), and one launch covers them all: each tensor is cut into pieces of
// `piece` elements, the grid has one block per piece, dealt out in tensor order, and a block
// finds its tensor by a binary search over the tensors' first blocks. Every element gets the
// same math as one tensor alone, and sums are cut into the same pieces in the same order, so
// the results do not depend on how tensors are grouped; more tensors take one launch per
// kListTensors.

#include <algorithm>
#include <cstdint>
#include <functional>

#include "oneflowlike/kernels/cuda/common.cuh"

namespace ofl::cuda_kernels {

constexpr int kListTensors = 36;

/// `kPointers` arrays of one element type per tensor (Adam: param, grad, exp_avg, exp_avg_sq).
template <class T, int kPointers>
struct TensorList {
  int count = 0;
  int64_t numel[kListTensors];
  int64_t first_block[kListTensors + 1];  // first_block[count]: the grid's size
  T* data[kPointers][kListTensors];
};

/// Which tensor of `list` block `block` works on, and the piece of it: [begin, end).
template <class T, int kPointers>
__device__ inline int tensor_of_block(const TensorList<T, kPointers>& list, int64_t block,
                                      int64_t piece, int64_t* begin, int64_t* end) {
  int lo = 0, hi = list.count - 1;
  while (lo < hi) {  // the last tensor whose first block is at or before `block`
    const int mid = (lo + hi + 1) / 2;
    if (list.first_block[mid] <= block) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  *begin = (block - list.first_block[lo]) * piece;
  *end = min(list.numel[lo], *begin + piece);
  return lo;
}

/// Calls launch(list, blocks) for each list of at most kListTensors of the `count` tensors with
/// elements (`pointers(j, k)`: pointer k of tensor j; `numel(j)`), in order, `piece` elements
/// per block. Tensors without elements are left out.
template <class T, int kPointers>
void for_each_tensor_list(
    int count, int64_t piece, const std::function<int64_t(int)>& numel,
    const std::function<T*(int, int)>& pointers,
    const std::function<void(const TensorList<T, kPointers>&, int64_t)>& launch) {
  TensorList<T, kPointers> list;
  int64_t blocks = 0;
  auto flush = [&] {
    if (list.count == 0) return;
    list.first_block[list.count] = blocks;
    launch(list, blocks);
    list.count = 0;
    blocks = 0;
  };
  for (int j = 0; j < count; ++j) {
    const int64_t n = numel(j);
    if (n == 0) continue;
    const int t = list.count++;
    list.numel[t] = n;
    list.first_block[t] = blocks;
    for (int k = 0; k < kPointers; ++k) list.data[k][t] = pointers(j, k);
    blocks += (n + piece - 1) / piece;
    if (list.count == kListTensors) flush();
  }
  flush();
}

}  // namespace ofl::cuda_kernels
