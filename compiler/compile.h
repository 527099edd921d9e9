#pragma once
// The compiler's entry point: a job in, a per-rank plan out.

#include "compiler/graph.h"
#include "compiler/pass_manager.h"
#include "oneflowlike/common/status.h"
#include "oneflowlike/proto/job.pb.h"
#include "oneflowlike/proto/plan.pb.h"

namespace ofl::compiler {

/// The logical passes in order: shape inference, autograd, optimizer, SBP inference, boxing.
PassManager default_pass_manager();

/// Runs the logical passes on `graph` in place (tests inspect the result).
void run_logical_passes(Graph& graph, const CompileOptions& options = {});

/// Logical passes, physical expansion and memory planning. Raises ofl::Error on user error.
/// `logical`, when given, receives the graph after the logical passes: the SBP of every tensor
/// on every rank, which a per-rank plan holds only for its own ranks.
proto::PlanProto compile_graph(Graph graph, const CompileOptions& options = {},
                               Graph* logical = nullptr);

/// The boundary form: every user error comes back as a Status naming the op and tensors.
Result<proto::PlanProto> compile(const proto::JobProto& job, const CompileOptions& options = {});

}  // namespace ofl::compiler
