#pragma once
// The C++ graph-building API (what tests and the Python front end use). Ops are checked as
// they are added (shape and dtype inference runs at once), so an error points at the call
// that made the bad op.
//
//   GraphBuilder b("mlp");
//   b.set_placement(Placement::parse("cpu, [0, 1]"));
//   int x = b.input("x", Shape{8, 4}, DataType::kFloat32, {S(0)});
//   int w = b.variable("w", Shape{4, 3}, Initializer{Initializer::Kind::kNormal, 0, 0.1, 1},
//   {B()}); int y = b.op1("matmul", MatmulParams{}, {x, w}); b.set_loss(b.op1("reduce_mean",
//   ReduceParams{}, {y}));

#include <string>
#include <vector>

#include "compiler/graph.h"

namespace ofl::proto {
class JobProto;
}

namespace ofl::compiler {

class GraphBuilder {
 public:
  explicit GraphBuilder(std::string job_name = "job");

  /// Placement of the ops created from now on (default "cpu, [0]").
  void set_placement(const Placement& placement) { placement_ = placement; }
  const Placement& placement() const { return placement_; }
  /// Pipeline stage of the ops created from now on.
  void set_stage(int stage) { stage_ = stage; }
  /// Activation checkpointing group of the ops created from now on ("" = none): the group's
  /// forward activations are recomputed for the backward instead of kept.
  void set_checkpoint_group(std::string group) { checkpoint_group_ = std::move(group); }
  /// Source location attached to the ops created from now on (for error messages).
  void set_location(std::string location) { location_ = std::move(location); }

  /// A tensor fed every iteration. `sbp` empty means B on every placement dimension.
  /// `donates`: the caller gives its pieces up to the run (Note [Donated pieces] in
  /// physical/in_place_boxing.h); ignored for an input fed per micro-batch.
  int input(const std::string& name, const Shape& shape, DataType dtype = DataType::kFloat32,
            const NdSbp& sbp = {}, bool donates = false);
  /// A persistent tensor; trainable variables get gradients and optimizer updates.
  int variable(const std::string& name, const Shape& shape, const Initializer& init,
               const NdSbp& sbp = {}, bool trainable = true, DataType dtype = DataType::kFloat32);
  /// Adds op `type` and returns its output tensors. `name` empty: "<type>_<n>".
  std::vector<int> op(const std::string& type, const AnyParams& params,
                      const std::vector<int>& inputs, const std::string& name = "",
                      const std::vector<NdSbp>& output_sbp_hints = {});
  int op1(const std::string& type, const AnyParams& params, const std::vector<int>& inputs,
          const std::string& name = "", const NdSbp& output_sbp_hint = {});

  /// Hands `tensor` back every iteration; raises when it is fetched already.
  void fetch(int tensor);
  void set_loss(int tensor) { graph_.train.loss = tensor; }
  /// Seeds the backward with `grad` as the gradient of `tensor`, instead of a loss (Note [Given
  /// output gradients] in passes/autograd.cpp).
  void set_output_grad(int tensor, int grad) { graph_.output_grads.emplace_back(tensor, grad); }
  TrainConfig& train() { return graph_.train; }

  const TensorMeta& meta(int tensor) const { return graph_.tensor(tensor).meta; }
  Graph& graph() { return graph_; }
  /// The job as a protobuf (what compile() takes).
  void to_job(proto::JobProto* job) const;

 private:
  // Adds an input or variable op (name, kind and its own fields set) on the current placement.
  int add_source(LogicalOp op, const Shape& shape, DataType dtype, const NdSbp& sbp,
                 const char* why_not_partial);

  Graph graph_;
  Placement placement_;
  int stage_ = 0;
  std::string checkpoint_group_;
  std::string location_;
};

}  // namespace ofl::compiler
