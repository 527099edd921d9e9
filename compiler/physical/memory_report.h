#pragma once
// Note [Memory report]: what a rank's planned memory is made of, before anything runs. Each
// register of a rank's plan is one kind of memory, told by its logical tensor (the caller's
// `kinds`: parameters, buffers, optimizer state, gradients) or by its producer task (boxing
// tasks: communication buffers, unless they carry a gradient, whose kind they keep; the rest:
// activations, their pipelined slots counted, which is the micro-batches in flight); a host
// collective's scratch (Note [Collective scratch] in oneflowlike/collective.h) is a
// communication buffer for its window. The kinds
// are summed where the most bytes are live at once on the rank's compute chain (the order
// memory planning fixes, Note [Memory reuse and the chain]): registers live from their
// producer's chain position to their last consumer's, and those outside the chain
// (persistent, pipelined, communication-thread ones) all the time. Kernel workspace (FTempBytes,
// which each compute actor keeps for the job) is summed over the rank's tasks, plus what the
// compute thread keeps for its largest call: the float32 copies of a host 16-bit task without a
// native kernel (Note [Widening arena] in oneflowlike/kernels/cpu/widened.h) and oneDNN's
// scratchpad of a host matmul (Note [oneDNN matmul scratchpad] in
// oneflowlike/kernels/cpu/onednn_matmul.h), and a host attention's tiles on each of this
// process's kernel threads (Note [Attention workspace] in oneflowlike/kernels/cpu/attention.h).
// The planned peak
// (blocks as laid out, so it also counts fragmentation) is reported beside the live peak.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "compiler/graph.h"
#include "oneflowlike/proto/plan.pb.h"

namespace ofl::compiler::physical {

struct RankMemoryReport {
  int64_t rank = 0;
  int64_t planned_peak = 0;                // RankPlanProto.peak_bytes
  int64_t live_peak = 0;                   // the most register bytes live at one chain task
  std::string peak_task;                   // that task's name
  int64_t workspace = 0;                   // kernel workspace of all the rank's compute tasks
  std::map<std::string, int64_t> by_kind;  // bytes live at the peak task, by kind
  /// The most parameter, gradient and optimizer-state bytes live at one chain task, and that
  /// task: the model states' own high-water mark, what DeepSpeed's formulas count (at the live
  /// peak, often in the backward, only part of the gradients may be live).
  int64_t model_states_peak = 0;
  std::string model_states_task;
};

/// The kinds the logical graph knows, by tensor name: trainable variables "parameters",
/// optimizer-made variables "optimizer state", other variables "buffers", variable gradients
/// and what the optimizer pass computes from them (buckets, reductions, clipping) "gradients".
std::map<std::string, std::string> memory_kinds(const Graph& logical);

/// One line per rank: peaks, the peak task, and the kinds' bytes there.
std::string memory_report_to_text(const std::vector<RankMemoryReport>& reports);

/// The report of every rank of `plan` (after plan_memory). `kinds`: logical tensor name ->
/// "parameters", "buffers", "optimizer state" or "gradients".
std::vector<RankMemoryReport> memory_report(const proto::PlanProto& plan,
                                            const std::map<std::string, std::string>& kinds);

}  // namespace ofl::compiler::physical
