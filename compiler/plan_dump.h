#pragma once
// Human-readable views of a compiled plan: a text listing, Graphviz dot, and the summary the
// `oneflowlike-plan` CLI prints (tasks, bytes moved and memory per rank, pipeline depth).

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "oneflowlike/proto/plan.pb.h"

namespace ofl::compiler {

/// Per rank, every task in plan order: id, name, kind, op type, thread, peer and transfer for
/// SEND/RECV, control inputs, and its input and output registers with shape, dtype, bytes and
/// memory block/offset.
std::string plan_to_text(const proto::PlanProto& plan);

/// A digraph with one cluster per rank; register edges producer -> consumer (labelled with the
/// register's name and shape), dashed SEND -> RECV edges paired by transfer_id and dotted
/// control edges.
std::string plan_to_dot(const proto::PlanProto& plan);

struct RankSummary {
  int64_t rank = 0;
  int64_t num_tasks = 0;
  int64_t num_registers = 0;
  /// Task kind name ("COMPUTE", "SEND", ...) -> count.
  std::map<std::string, int64_t> tasks_by_kind;
  /// Collective op name ("ALL_REDUCE", "ALL_TO_ALL", ...) -> COLLECTIVE tasks running it.
  std::map<std::string, int64_t> collectives_by_op;
  /// Per iteration: bytes of the registers SEND tasks read / RECV tasks write.
  int64_t bytes_sent = 0;
  int64_t bytes_received = 0;
  /// Per iteration: bytes copied from the host to the rank's GPU and back (COPY_H2D, COPY_D2H).
  int64_t bytes_to_gpu = 0;
  int64_t bytes_to_host = 0;
  /// Peak memory with reuse (memory planning) and without (every register on its own).
  int64_t peak_bytes = 0;
  int64_t bytes_without_reuse = 0;
  /// The part of peak_bytes in GPU memory (Note [Devices in a plan]).
  int64_t device_peak_bytes = 0;
  /// 100 * (1 - peak / without reuse); 0 when the rank holds no registers.
  double reduction_percent = 0;
};

struct PlanSummary {
  std::string job_name;
  int64_t world_size = 0;
  int pipeline_depth = 0;
  std::vector<RankSummary> ranks;
  /// Whether plan_memory ran (otherwise peak_bytes is the no-reuse figure).
  bool memory_planned = false;
};

PlanSummary summarize_plan(const proto::PlanProto& plan);

/// One line per rank plus a total; byte counts are exact, with KiB/MiB/GiB alongside.
std::string summary_to_text(const PlanSummary& summary);

/// "512 B", "3.0 KiB (3072 B)", ...
std::string format_bytes(int64_t bytes);

}  // namespace ofl::compiler
