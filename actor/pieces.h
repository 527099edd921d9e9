#pragma once
// Data movement shared by the executors of a plan (the reference executor and the actor
// runtime): regions of tensors, the acts that talk to the caller (feeding an INPUT piece,
// initialising a VARIABLE piece, assembling fetched pieces, reading and writing variables) and
// running a COMPUTE task's kernel. Both executors go through these, so they move data the same
// way and report a bad feed with the same message.
//
// A piece is one task's part of a logical tensor: its region (PlanIndex::TaskInfo::region, the
// task's output_region or the whole tensor) of the logical shape.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "actor/plan_index.h"
#include "oneflowlike/sbp.h"
#include "oneflowlike/tensor.h"

namespace ofl::actor {

/// "[0:2, 0:3]"
std::string region_to_string(const std::vector<Range>& region);

/// dst[dst_region] = src[src_region]. The regions have one extent and the tensors one dtype.
void copy_region(const Tensor& src, const std::vector<Range>& src_region, const Tensor& dst,
                 const std::vector<Range>& dst_region);
/// dst[dst_region] += src[src_region] (logical or for bool).
void add_region(const Tensor& src, const std::vector<Range>& src_region, const Tensor& dst,
                const std::vector<Range>& dst_region);
/// out = the elementwise sum of `inputs` (one shape and dtype, at least one), in one pass per
/// input after the first two (the ADD step of boxing).
void sum_into(const std::vector<Tensor>& inputs, const Tensor& out);

/// Whether `regions` of a tensor of `shape` cover it exactly once (disjoint, nothing left out):
/// then a CONCAT into it need not zero it first.
bool regions_tile(const std::vector<std::vector<Range>>& regions, const Shape& shape);

/// A tensor of `shape` and `dtype` over the bytes of `bytes` from `offset` on (a register's
/// place in a memory block).
Tensor view_of_bytes(const Tensor& bytes, int64_t offset, const Shape& shape, DataType dtype);

/// Sets every element of `tensor` to `value`, converted to its dtype; a tensor in GPU memory
/// only to zero (queued on the GPU's stream).
void fill(const Tensor& tensor, double value);

/// Raises ofl::Error unless every fed name is the logical_op of an INPUT task.
void check_fed_inputs(const PlanIndex& index, const std::map<std::string, Tensor>& inputs);
/// Checks that `pieces` hold INPUT task `task`'s piece (by input name, then rank) with the
/// shape and dtype of its register; raises naming the input and rank.
void check_fed_piece(const PlanIndex& index, int task,
                     const std::map<std::string, std::map<int64_t, Tensor>>& pieces);

/// The tensor fed for INPUT task `task`, checked: present, of the shape (the whole batch of m
/// micro-batches when micro-batched) and dtype the task needs; raises ofl::Error naming the
/// input otherwise.
const Tensor& check_fed_input(const PlanIndex& index, int task,
                              const std::map<std::string, Tensor>& inputs);

/// The act of INPUT task `task`: finds its logical tensor in `inputs`, checks its shape and
/// dtype (raising ofl::Error naming the input) and copies the task's region into `out`, a tensor
/// of the task's output register. A micro-batched input is fed as m micro-batches stacked on
/// axis 0, and `out` gets the region of each (Note [Micro-batches] in plan.proto).
void feed_input_piece(const PlanIndex& index, int task, const std::map<std::string, Tensor>& inputs,
                      const Tensor& out);

/// Sets `value`, the register of VARIABLE task `task`, from the task's InitializerProto. Random
/// initialisers draw each element from its logical position, so a split variable equals the
/// one-device variable.
void initialize_variable_piece(const PlanIndex& index, int task, const Tensor& value);

/// The fetched logical tensors by output name (PlanIndex::output_name): zeros of the logical
/// shape plus every contributing piece in `fetched` (OUTPUT task, its snapshot) added at its
/// region, which sums partial sums and places splits.
std::map<std::string, Tensor> assemble_outputs(const PlanIndex& index,
                                               const std::vector<std::pair<int, Tensor>>& fetched);

/// The logical value of variable `name`, assembled from `piece(task)`, the register of each of
/// its VARIABLE tasks. Raises ofl::Error (NotFound) when the plan has no such variable.
Tensor read_variable(const PlanIndex& index, const std::string& name,
                     const std::function<Tensor(int task)>& piece);
/// Scatters the logical `value` into `piece(task)` of every VARIABLE task of `name`. Raises
/// ofl::Error when the plan has no such variable or `value` has another shape or dtype.
void write_variable(const PlanIndex& index, const std::string& name, const Tensor& value,
                    const std::function<Tensor(int task)>& piece);

/// Runs the kernel of COMPUTE task `task` on its registers. Mutated inputs are written in place.
/// `temp` holds kernel_temp_bytes bytes of scratch memory (nullptr when that is 0);
/// `random_stream` is iteration * micro-batches + micro-batch (KernelContext::random_stream).
void run_kernel(const PlanIndex::TaskInfo& task, const std::vector<Tensor>& inputs,
                const std::vector<Tensor>& outputs, uint64_t random_stream, void* temp,
                size_t temp_bytes);
/// The scratch bytes the kernel of COMPUTE task `task` needs (its op's FTempBytes for the input
/// registers' shapes and dtypes); 0 when the op declares none.
size_t kernel_temp_bytes(const PlanIndex& index, int task);

}  // namespace ofl::actor
