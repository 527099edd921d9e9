#pragma once
// What the optimizer pass (optimizer.cpp) and the gradient reduction it starts with
// (gradient_reduction.cpp) build a step from: where an op goes, appending ops and state
// variables, casts and layouts, on the logical graph.

#include <string>
#include <string_view>
#include <vector>

#include "compiler/graph.h"

namespace ofl::compiler::optimizer_ops {

// Where an optimizer op goes: placement, stage and source line.
struct Site {
  Placement placement;
  int stage = 0;
  std::string location;

  static Site of(const LogicalOp& op) { return Site{op.placement, op.stage, op.location}; }
};

// Appends compute op `type` named `base` (made unique) with role kOptimizer; returns its outputs.
std::vector<int> append_op(Graph& graph, const Site& site, const std::string& base,
                           std::string_view type, AnyParams params, std::vector<int> inputs);

int append_op1(Graph& graph, const Site& site, const std::string& base, std::string_view type,
               AnyParams params, std::vector<int> inputs);

// Appends an input or variable op whose one output tensor has the op's name.
int append_source(Graph& graph, LogicalOp op, const TensorMeta& meta);

// A zero-initialised, non-trainable variable shaped and laid out like `var` (optimizer state),
// or sharded as ZeRO stages 1 and 2 record (Note [ZeRO stages 1 and 2] in zero.cpp).
int append_state(Graph& graph, int var_op, const std::string& suffix);

// `t` cast to `dtype` (t itself when it has that dtype).
int cast_to(Graph& graph, const Site& site, const std::string& base, int t, DataType dtype);

struct Update {
  int var_op;
  int grad;  // tensor
};

// `t` as a new tensor laid out as `layout` (an identity reshape with that output hint: SBP
// inference boxes `t` into it), or `t` itself when it is one already: a second layout reshape
// would copy it (an accumulated gradient is not viewed across rates).
int laid_out(Graph& graph, const Site& site, const std::string& base, int t, const NdSbp& layout);

// Whether tensor t is the output of a layout reshape (laid_out) to `layout`.
bool laid_out_as(const Graph& graph, int t, const NdSbp& layout);

// Note [Reduce gradients before clipping]: the gradient laid out as its variable (B over data
// parallel ranks, S under ZeRO): a reshape carrying the variable's SBP as a hint, so its
// reduction is boxing right after the backward op that made it, overlapping the rest of the
// backward. Without it, SBP inference reduced each gradient only where the clip read it, when
// all of backward was over (measured: GPT DP2 69 ms a step instead of 56). A gradient already
// laid out so (Note [Sharded gradients under accumulation]) stays as it is.
int in_variable_layout(Graph& graph, const Site& site, const std::string& base, const Update& u);

// Note [Gradient reduction dtype] in gradient_reduction.cpp: `grad` cast down to `reduce` when it
// is float32.
int lowered(Graph& graph, const Site& site, const std::string& name, int grad, DataType reduce);

}  // namespace ofl::compiler::optimizer_ops
