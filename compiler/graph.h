#pragma once
// The compiler's in-memory logical graph. A JobProto is read into a Graph, passes rewrite it,
// and physical expansion turns it into a PlanProto. Tensors and ops are addressed by index;
// indices stay valid while passes append (they never delete in place: dead-code elimination
// builds a new graph).

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "oneflowlike/op.h"
#include "oneflowlike/placement.h"
#include "oneflowlike/sbp.h"

namespace ofl::proto {
class JobProto;
}

namespace ofl::compiler {

/// One N-d SBP per input and per output: how an op runs on its placement.
struct NdSbpSignature {
  std::vector<NdSbp> inputs;
  std::vector<NdSbp> outputs;
  std::string to_string() const;
};

struct LogicalTensor {
  std::string name;
  TensorMeta meta;    // filled by shape inference
  int producer = -1;  // op index
  int producer_output = 0;
  NdSbp sbp;  // the producer's output SBP, filled by SBP inference
};

enum class OpKind { kCompute, kInput, kVariable, kBoxing };

/// How a variable gets its first value.
struct Initializer {
  enum class Kind { kZeros, kOnes, kConstant, kNormal, kUniform };
  Kind kind = Kind::kZeros;
  double a = 0;  // constant value, normal mean, uniform low
  double b = 1;  // normal std, uniform high
  int64_t seed = 0;
};

/// A boxing op turns one (placement, nd_sbp) of a tensor into another. It is inserted by the
/// boxing pass and expanded into slice/send/recv/add steps per rank.
struct BoxingSpec {
  Placement in_placement;
  NdSbp in_sbp;
  Placement out_placement;
  NdSbp out_sbp;
};

/// Where an op came from, for statistics and the plan summary.
enum class OpRole { kForward, kBackward, kOptimizer, kBoxing };

struct LogicalOp {
  std::string name;
  OpKind kind = OpKind::kCompute;
  const OpSchema* schema = nullptr;  // kCompute
  AnyParams params;
  std::vector<int> inputs;   // tensor indices
  std::vector<int> outputs;  // tensor indices
  Placement placement;
  std::vector<NdSbp> output_sbp_hints;  // per output; empty = no hint
  std::string location;                 // the user's source line
  int stage = 0;
  OpRole role = OpRole::kForward;
  Initializer initializer;   // kVariable
  bool trainable = false;    // kVariable
  BoxingSpec boxing;         // kBoxing
  NdSbpSignature signature;  // filled by SBP inference
  std::string sbp_reason;    // why the signature was chosen (SBP inference)
  /// Activation checkpointing group ("" = none): the checkpointing pass recomputes the group's
  /// forward activations for its backward instead of keeping them (Note [Activation
  /// checkpointing] in passes/checkpointing.cpp). Autograd gives backward ops their forward
  /// op's group.
  std::string checkpoint_group;
  /// Set on the copies of forward ops that the checkpointing pass recomputes for the backward;
  /// CSE must not merge them back into the originals.
  bool recompute = false;
  /// Traced under no_grad (torch's): its outputs are constants to autograd, as a
  /// stop_gradient's (Note [No grad in a trace] in graph_tracer.cpp).
  bool no_grad = false;
  /// Ops (indices) that must act before this one in the same iteration, on the same placement,
  /// without passing data: physical expansion makes them TaskProto.control_inputs between the
  /// two ops' tasks on each rank. Graph::topological_order honours them; passes that renumber
  /// or replace ops map them.
  std::vector<int> control_inputs;
  /// Each rank's task order lists this op's tasks, and the communication tasks feeding them,
  /// as soon as they are ready (TaskProto.schedule_early; Note [Pacing ZeRO-2 reductions] in
  /// passes/optimizer.cpp).
  bool schedule_early = false;
  /// kInput: the caller gives its pieces up to the run (Note [Donated pieces] in
  /// physical/in_place_boxing.h).
  bool donates = false;

  /// "[op 'fc1.matmul' (matmul) at model.py:12]" for error messages.
  std::string describe() const;
  /// Whether an SBP hint is set on any of its outputs.
  bool has_output_sbp_hint() const;
};

struct OptimizerConfig {
  enum class Kind { kNone, kSgd, kAdam, kAdamW };
  Kind kind = Kind::kNone;
  double lr = 0.01;
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;
  bool nesterov = false;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double epsilon = 1e-8;
  double clip_grad_max_norm = 0;  // 0: no clipping
  /// Parameter groups (torch's param_groups), Note [Parameter groups] in passes/optimizer.cpp:
  /// group g's weight decay, and the group of each trainable variable by name (absent: 0).
  /// Empty: one group with `weight_decay`.
  std::vector<double> group_weight_decay;
  std::map<std::string, int> group_of;
};

/// Note [Dynamic loss scaling in a graph] in passes/autograd.cpp; on when init_scale > 0.
struct DynamicLossScale {
  double init_scale = 0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  bool enabled() const { return init_scale > 0; }
};

struct TrainConfig {
  int loss = -1;  // tensor index; -1 for inference
  OptimizerConfig optimizer;
  int gradient_accumulation_steps = 1;
  int zero_stage = 0;
  /// Replicated gradients are reduced in buckets of about this many bytes (0: one by one):
  /// Note [Gradient buckets] in passes/optimizer.cpp.
  int64_t gradient_bucket_bytes = 0;
  double loss_scale = 1;
  /// Mixed precision (Note [Mixed precision] in passes/amp.cpp): kBFloat16 or kFloat16 runs
  /// the ops the policy lowers (Note [Mixed precision policy] in op.h) in that dtype; kFloat32 (the
  /// default) turns it off.
  DataType amp_dtype = DataType::kFloat32;
  /// The dtype replicated gradients are reduced in (Note [Gradient reduction dtype] in
  /// passes/optimizer.cpp): kFloat32 (the default) or kBFloat16.
  DataType grad_reduce_dtype = DataType::kFloat32;
  DynamicLossScale dynamic_loss_scale;
};

class Graph {
 public:
  std::string name = "job";

  int add_tensor(const std::string& name, const TensorMeta& meta = {});
  /// Appends an op and creates its output tensors named "<op>/out<i>" (or `output_names`).
  int add_op(LogicalOp op, int num_outputs, const std::vector<std::string>& output_names = {});
  /// Appends compute op `op` (schema, params and inputs set) with its output metas inferred at
  /// once, so a bad op fails where it is made; the error names the op and ends with `context`.
  /// Returns the output tensors.
  std::vector<int> add_compute_op(LogicalOp op, const std::string& context = "");

  LogicalOp& op(int i) { return ops_[i]; }
  const LogicalOp& op(int i) const { return ops_[i]; }
  LogicalTensor& tensor(int i) { return tensors_[i]; }
  const LogicalTensor& tensor(int i) const { return tensors_[i]; }
  int num_ops() const { return static_cast<int>(ops_.size()); }
  int num_tensors() const { return static_cast<int>(tensors_.size()); }
  /// Tensor index by name; raises NotFound naming the tensor.
  int tensor_index(const std::string& name) const;
  std::optional<int> find_tensor(const std::string& name) const;
  /// Makes a name unique in the graph by appending a counter.
  std::string unique_name(const std::string& base);
  /// Tensors a and b trade names (a pass putting another tensor where the user fetches one
  /// keeps the name the user's plan looks it up by).
  void swap_tensor_names(int a, int b);

  /// Consumers (op indices) of every tensor, recomputed on each call.
  std::vector<std::vector<int>> consumers() const;
  /// Tensors whose producer a rewrite must leave what it is: handed back, the loss and the
  /// loss scale, gradients the graph keeps by index, and the values named for saving or
  /// feeding.
  std::set<int> pinned_tensors() const;
  /// Op indices with every producer (and control input) before its consumers; raises on a cycle
  /// naming its ops.
  std::vector<int> topological_order() const;
  /// The union of all placements' ranks, sorted.
  std::vector<int64_t> all_ranks() const;

  std::vector<int> fetches;  // tensor indices handed back each iteration
  TrainConfig train;
  /// Variable op index -> its gradient tensor (filled by autograd).
  std::map<int, int> variable_grads;
  /// ZeRO stages 1 and 2 (Note [ZeRO stages 1 and 2] in passes/zero.cpp): trainable variable op
  /// index -> the sharded layout of its optimizer state and update (filled by the zero pass,
  /// read by the optimizer pass; the variable itself stays replicated).
  std::map<int, NdSbp> zero_shards;
  /// ZeRO-2: trainable variable op index -> the op that first reads its reduce-scattered
  /// gradient (filled and paced by the optimizer pass, Note [Pacing ZeRO-2 reductions]).
  std::map<int, int> zero_reductions;
  /// ZeRO stages 2 and 3: trainable variable op index -> the layout its gradient is
  /// reduce-scattered to, for the variables the zero pass sharded (Note [Sharded gradients
  /// under accumulation] in passes/optimizer.cpp).
  std::map<int, NdSbp> zero_grad_shards;
  /// Note [Given output gradients] in passes/autograd.cpp: (tensor, its gradient) pairs that
  /// seed the backward instead of a loss; consumed (cleared) by autograd.
  std::vector<std::pair<int, int>> output_grads;
  /// Note [Input gradients] in passes/autograd.cpp: the name of each input op marked trainable
  /// -> the position in `fetches` of its gradient (filled by autograd; passes keep positions).
  std::map<std::string, int> input_grad_fetches;
  /// Note [Saved forward values] in passes/autograd.cpp: forward tensors whose values are fed
  /// instead of computed, by name -> (the input that feeds them, its layout).
  std::map<std::string, std::pair<std::string, NdSbp>> given_values;
  /// The forward op outputs the backward reads (names; filled by autograd from given output
  /// gradients), what a caller may save and give next time.
  std::vector<std::string> backward_reads;
  /// Under dynamic loss scaling, the scale variable's tensor (made by autograd), else -1.
  int loss_scale_tensor = -1;

 private:
  std::vector<LogicalOp> ops_;
  std::vector<LogicalTensor> tensors_;
  std::map<std::string, int> tensor_by_name_;
  std::set<std::string> op_names_;
  std::map<std::string, int> name_counts_;
};

/// Reads a JobProto (ops in any order, joined by tensor names); raises on unknown op types,
/// missing inputs or duplicate names, naming the op.
Graph graph_from_job(const proto::JobProto& job);
/// Writes the graph back as a JobProto (with inferred shapes and chosen SBP as hints).
void graph_to_job(const Graph& graph, proto::JobProto* job);

/// A readable listing: one line per op with inputs, outputs, shapes, placement and SBP.
std::string graph_to_text(const Graph& graph);
/// Graphviz dot of the graph.
std::string graph_to_dot(const Graph& graph);

}  // namespace ofl::compiler
