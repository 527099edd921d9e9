#pragma once
// Passes and the pass manager. Each pass declares the graph properties it needs and provides
// ("shapes", "gradients", "sbp", ...); the manager checks the order before running anything
// and can dump the graph after any pass (text and Graphviz dot).

#include <memory>
#include <string>
#include <vector>

#include "compiler/graph.h"

namespace ofl::compiler {

struct CompileOptions {
  /// Pass names after which to dump the graph ("all" for every pass).
  std::vector<std::string> dump_after;
  /// Where dumps go ("<dir>/<index>_<pass>.txt" and ".dot").
  std::string dump_dir = ".";
  /// Passes not to run, by name, with those the environment's OFL_SKIP_PASSES lists (commas):
  /// for debugging and for measuring what a pass gives. Only a skippable pass (Pass::skippable:
  /// one no later pass needs) may be skipped; naming another, or no pass, is an error.
  std::vector<std::string> skip_passes;
  /// Record, for every op, the cost of each SBP candidate (LogicalOp::sbp_reason).
  bool explain_sbp = false;
  /// Per-rank memory limit in bytes for the static check (0: none).
  int64_t memory_limit_bytes = 0;
  /// Compile only these ranks' parts of the plan (all when empty): what one process of a job
  /// needs (Note [Compiling per rank] in compile.cpp). Ids agree with a whole-job compile.
  std::vector<int64_t> ranks;
};

class Pass {
 public:
  virtual ~Pass() = default;
  virtual std::string name() const = 0;
  virtual std::vector<std::string> needs() const { return {}; }
  virtual std::vector<std::string> provides() const { return {}; }
  /// Whether CompileOptions::skip_passes may leave it out: a pass no later pass needs.
  virtual bool skippable() const { return provides().empty(); }
  virtual void run(Graph& graph, const CompileOptions& options) = 0;
};

class PassManager {
 public:
  void add(std::unique_ptr<Pass> pass) { passes_.push_back(std::move(pass)); }
  /// Raises Internal when a pass needs a property no earlier pass provides.
  void check_order() const;
  void run(Graph& graph, const CompileOptions& options) const;
  std::vector<std::string> pass_names() const;

 private:
  std::vector<std::unique_ptr<Pass>> passes_;
};

}  // namespace ofl::compiler
