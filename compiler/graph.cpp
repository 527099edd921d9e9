#include "compiler/graph.h"

#include <algorithm>
#include <set>
#include <sstream>

#include "oneflowlike/proto/job.pb.h"
#include "oneflowlike/proto_convert.h"

namespace ofl::compiler {

std::string NdSbpSignature::to_string() const {
  std::string s;
  for (size_t i = 0; i < inputs.size(); ++i) s += (i ? " x " : "") + nd_sbp_to_string(inputs[i]);
  s += " -> ";
  for (size_t i = 0; i < outputs.size(); ++i) s += (i ? ", " : "") + nd_sbp_to_string(outputs[i]);
  return s;
}

std::string LogicalOp::describe() const {
  std::string type = kind == OpKind::kCompute    ? (schema ? schema->name() : "?")
                     : kind == OpKind::kInput    ? "input"
                     : kind == OpKind::kVariable ? "variable"
                                                 : "boxing";
  std::string s = str_cat("[op '", name, "' (", type, ")");
  if (!location.empty()) s += " at " + location;
  return s + "]";
}

bool LogicalOp::has_output_sbp_hint() const {
  for (const NdSbp& hint : output_sbp_hints) {
    if (!hint.empty()) return true;
  }
  return false;
}

int Graph::add_tensor(const std::string& name, const TensorMeta& meta) {
  OFL_CHECK(tensor_by_name_.count(name) == 0, "[graph] tensor name '", name,
            "' is used twice; every tensor needs a unique name.");
  LogicalTensor t;
  t.name = name;
  t.meta = meta;
  tensors_.push_back(std::move(t));
  tensor_by_name_[name] = num_tensors() - 1;
  return num_tensors() - 1;
}

void Graph::swap_tensor_names(int a, int b) {
  std::swap(tensors_.at(a).name, tensors_.at(b).name);
  tensor_by_name_[tensors_[a].name] = a;
  tensor_by_name_[tensors_[b].name] = b;
}

int Graph::add_op(LogicalOp op, int num_outputs, const std::vector<std::string>& output_names) {
  OFL_CHECK(op_names_.insert(op.name).second, "[graph] op name '", op.name,
            "' is used twice; every op needs a unique name.");
  const int index = num_ops();
  op.outputs.clear();
  for (int i = 0; i < num_outputs; ++i) {
    const std::string name =
        i < static_cast<int>(output_names.size()) ? output_names[i] : str_cat(op.name, "/out", i);
    const int t = add_tensor(name);
    tensors_[t].producer = index;
    tensors_[t].producer_output = i;
    op.outputs.push_back(t);
  }
  ops_.push_back(std::move(op));
  return index;
}

std::vector<int> Graph::add_compute_op(LogicalOp op, const std::string& context) {
  OFL_ASSERT(op.kind == OpKind::kCompute && op.schema != nullptr);
  std::vector<TensorMeta> in;
  for (int t : op.inputs) {
    OFL_CHECK_INDEX(t >= 0 && t < num_tensors(), op.describe(), " input index ", t,
                    " is not a tensor of this graph.");
    in.push_back(tensors_[t].meta);
  }
  std::vector<TensorMeta> out;
  try {
    out = op.schema->infer(op.params, in);
  } catch (const Error& e) {
    throw Error(e.code(), str_cat(e.what(), " ", op.describe(), context));
  }
  const int index = add_op(std::move(op), static_cast<int>(out.size()));
  for (size_t k = 0; k < out.size(); ++k) tensors_[ops_[index].outputs[k]].meta = out[k];
  return ops_[index].outputs;
}

std::optional<int> Graph::find_tensor(const std::string& name) const {
  auto it = tensor_by_name_.find(name);
  if (it == tensor_by_name_.end()) return std::nullopt;
  return it->second;
}

int Graph::tensor_index(const std::string& name) const {
  auto t = find_tensor(name);
  OFL_CHECK_CODE(t.has_value(), ErrorCode::kNotFound, "[graph] no tensor named '", name, "'.");
  return *t;
}

std::string Graph::unique_name(const std::string& base) {
  int& count = name_counts_[base];
  std::string name = count == 0 ? base : str_cat(base, "_", count);
  ++count;
  while (tensor_by_name_.count(name) || tensor_by_name_.count(name + "/out0") ||
         op_names_.count(name)) {
    name = str_cat(base, "_", count++);
  }
  return name;
}

std::set<int> Graph::pinned_tensors() const {
  std::set<int> pinned(fetches.begin(), fetches.end());
  if (train.loss >= 0) pinned.insert(train.loss);
  if (loss_scale_tensor >= 0) pinned.insert(loss_scale_tensor);
  for (const auto& [var, grad] : variable_grads) pinned.insert(grad);
  for (const auto& [t, grad] : output_grads) pinned.insert({t, grad});
  for (const std::string& name : backward_reads) {
    if (auto t = find_tensor(name)) pinned.insert(*t);
  }
  for (const auto& [name, fed] : given_values) {
    if (auto t = find_tensor(name)) pinned.insert(*t);
  }
  return pinned;
}

std::vector<std::vector<int>> Graph::consumers() const {
  std::vector<std::vector<int>> out(tensors_.size());
  for (int i = 0; i < num_ops(); ++i) {
    for (int t : ops_[i].inputs) {
      if (out[t].empty() || out[t].back() != i) out[t].push_back(i);
    }
  }
  return out;
}

std::vector<int> Graph::topological_order() const {
  std::vector<int> pending(ops_.size(), 0);
  const auto cons = consumers();
  for (int i = 0; i < num_ops(); ++i) {
    std::set<int> producers;
    for (int t : ops_[i].inputs) {
      OFL_CHECK(tensors_[t].producer >= 0, ops_[i].describe(), " reads tensor '", tensors_[t].name,
                "' that no op produces.");
      producers.insert(tensors_[t].producer);
    }
    for (int c : ops_[i].control_inputs) {
      OFL_ASSERT(c >= 0 && c < num_ops() && c != i) << ops_[i].describe() << " control input " << c;
      producers.insert(c);
    }
    pending[i] = static_cast<int>(producers.size());
  }
  // Control successors of each op; merged with the data consumers into one set below, so an op
  // both read and waited on is counted once, as in `pending`.
  std::vector<std::vector<int>> control_next(ops_.size());
  for (int i = 0; i < num_ops(); ++i) {
    for (int c : ops_[i].control_inputs) control_next[c].push_back(i);
  }
  std::vector<int> order, ready;
  for (int i = num_ops() - 1; i >= 0; --i) {
    if (pending[i] == 0) ready.push_back(i);
  }
  while (!ready.empty()) {
    const int i = ready.back();
    ready.pop_back();
    order.push_back(i);
    std::set<int> next;
    for (int t : ops_[i].outputs) next.insert(cons[t].begin(), cons[t].end());
    next.insert(control_next[i].begin(), control_next[i].end());
    for (auto it = next.rbegin(); it != next.rend(); ++it) {
      if (--pending[*it] == 0) ready.push_back(*it);
    }
  }
  if (order.size() != ops_.size()) {
    std::string cycle;
    for (int i = 0; i < num_ops(); ++i) {
      if (pending[i] > 0) cycle += (cycle.empty() ? "" : ", ") + ops_[i].name;
    }
    OFL_CHECK(false, "[graph] the ops form a cycle: ", cycle, ".");
  }
  return order;
}

std::vector<int64_t> Graph::all_ranks() const {
  std::set<int64_t> ranks;
  for (const LogicalOp& op : ops_)
    ranks.insert(op.placement.ranks().begin(), op.placement.ranks().end());
  return std::vector<int64_t>(ranks.begin(), ranks.end());
}

namespace {

Initializer initializer_from_proto(const proto::InitializerProto& in) {
  Initializer init;
  init.kind = static_cast<Initializer::Kind>(in.kind());
  init.a = in.a();
  init.b = in.b();
  init.seed = in.seed();
  return init;
}

}  // namespace

Graph graph_from_job(const proto::JobProto& job) {
  Graph g;
  g.name = job.name().empty() ? "job" : job.name();
  // Outputs first, so ops may list their inputs in any order.
  std::vector<int> op_index(job.ops_size());
  for (int i = 0; i < job.ops_size(); ++i) {
    const proto::OpProto& p = job.ops(i);
    LogicalOp op;
    op.name = p.name();
    op.kind = p.kind() == proto::OpProto::INPUT      ? OpKind::kInput
              : p.kind() == proto::OpProto::VARIABLE ? OpKind::kVariable
                                                     : OpKind::kCompute;
    op.location = p.location();
    op.stage = p.stage();
    op.checkpoint_group = p.checkpoint_group();
    try {
      op.placement = from_proto(p.placement());
    } catch (const Error& e) {
      throw Error(e.code(), str_cat(e.what(), " ", op.describe()));
    }
    if (op.kind != OpKind::kCompute) {
      OFL_CHECK(p.inputs_size() == 0 && p.outputs_size() == 1, op.describe(),
                " an input or variable takes no inputs and has exactly one output. However, got ",
                p.inputs_size(), " inputs and ", p.outputs_size(), " outputs.");
      OFL_CHECK(!p.outputs(0).dtype().empty(), op.describe(),
                " an input or variable must declare its dtype. However, got none for '",
                p.outputs(0).name(), "'.");
    }
    for (const auto& hint : p.output_sbp_hints()) op.output_sbp_hints.push_back(from_proto(hint));
    if (op.kind == OpKind::kCompute) {
      const OpSchema* schema = OpRegistry::global().try_find(p.type());
      OFL_CHECK_CODE(schema != nullptr && schema->defined(), ErrorCode::kNotFound, op.describe(),
                     " uses op type '", p.type(), "', which is not registered.");
      op.schema = schema;
      op.params = params_from_proto(*schema, p.params());
    } else if (op.kind == OpKind::kVariable) {
      op.initializer = initializer_from_proto(p.initializer());
      op.trainable = p.trainable();
    }
    std::vector<std::string> names;
    for (const auto& out : p.outputs()) names.push_back(out.name());
    const int index = g.add_op(std::move(op), p.outputs_size(), names);
    for (int k = 0; k < p.outputs_size(); ++k) {
      const auto& decl = p.outputs(k);
      TensorMeta& meta = g.tensor(g.op(index).outputs[k]).meta;
      meta.shape = from_proto(decl.shape());
      if (!decl.dtype().empty()) meta.dtype = dtype_from_name(decl.dtype());
    }
    op_index[i] = index;
  }
  for (int i = 0; i < job.ops_size(); ++i) {
    LogicalOp& op = g.op(op_index[i]);
    for (const std::string& name : job.ops(i).inputs()) {
      auto t = g.find_tensor(name);
      OFL_CHECK(t.has_value(), op.describe(), " reads tensor '", name, "', which no op produces.");
      op.inputs.push_back(*t);
    }
  }
  for (const std::string& name : job.fetches()) {
    const int t = g.tensor_index(name);
    OFL_CHECK(std::find(g.fetches.begin(), g.fetches.end(), t) == g.fetches.end(),
              "[graph] tensor '", name, "' is fetched twice.");
    g.fetches.push_back(t);
  }
  const auto& train = job.train();
  if (!train.loss().empty()) g.train.loss = g.tensor_index(train.loss());
  const auto& opt = train.optimizer();
  g.train.optimizer.kind = static_cast<OptimizerConfig::Kind>(opt.kind());
  g.train.optimizer.lr = opt.lr();
  g.train.optimizer.momentum = opt.momentum();
  g.train.optimizer.dampening = opt.dampening();
  g.train.optimizer.weight_decay = opt.weight_decay();
  g.train.optimizer.nesterov = opt.nesterov();
  if (opt.beta1() != 0) g.train.optimizer.beta1 = opt.beta1();
  if (opt.beta2() != 0) g.train.optimizer.beta2 = opt.beta2();
  if (opt.epsilon() != 0) g.train.optimizer.epsilon = opt.epsilon();
  g.train.optimizer.clip_grad_max_norm = opt.clip_grad_max_norm();
  g.train.gradient_accumulation_steps = std::max(1, train.gradient_accumulation_steps());
  g.train.zero_stage = train.zero_stage();
  g.train.gradient_bucket_bytes = train.gradient_bucket_bytes();
  g.train.loss_scale = train.loss_scale() == 0 ? 1 : train.loss_scale();
  if (!train.amp_dtype().empty()) g.train.amp_dtype = dtype_from_name(train.amp_dtype());
  if (train.has_dynamic_loss_scale()) {
    const proto::DynamicLossScaleProto& d = train.dynamic_loss_scale();
    g.train.dynamic_loss_scale = {d.init_scale(), d.growth_factor(), d.backoff_factor(),
                                  d.growth_interval()};
  }
  if (!train.grad_reduce_dtype().empty()) {
    g.train.grad_reduce_dtype = dtype_from_name(train.grad_reduce_dtype());
  }
  return g;
}

void graph_to_job(const Graph& g, proto::JobProto* job) {
  job->Clear();
  job->set_name(g.name);
  for (int i = 0; i < g.num_ops(); ++i) {
    const LogicalOp& op = g.op(i);
    proto::OpProto* p = job->add_ops();
    p->set_name(op.name);
    p->set_location(op.location);
    p->set_stage(op.stage);
    p->set_checkpoint_group(op.checkpoint_group);
    to_proto(op.placement, p->mutable_placement());
    switch (op.kind) {
      case OpKind::kInput:
        p->set_kind(proto::OpProto::INPUT);
        break;
      case OpKind::kVariable:
        p->set_kind(proto::OpProto::VARIABLE);
        p->mutable_initializer()->set_kind(
            static_cast<proto::InitializerProto::Kind>(op.initializer.kind));
        p->mutable_initializer()->set_a(op.initializer.a);
        p->mutable_initializer()->set_b(op.initializer.b);
        p->mutable_initializer()->set_seed(op.initializer.seed);
        p->set_trainable(op.trainable);
        break;
      case OpKind::kCompute:
        p->set_type(op.schema->name());
        params_to_proto(*op.schema, op.params, p->mutable_params());
        break;
      case OpKind::kBoxing:
        p->set_type("boxing");
        break;
    }
    for (int t : op.inputs) p->add_inputs(g.tensor(t).name);
    for (size_t k = 0; k < op.outputs.size(); ++k) {
      const LogicalTensor& t = g.tensor(op.outputs[k]);
      auto* decl = p->add_outputs();
      decl->set_name(t.name);
      to_proto(t.meta.shape, decl->mutable_shape());
      decl->set_dtype(dtype_name(t.meta.dtype));
      const NdSbp& hint = !t.sbp.empty()                   ? t.sbp
                          : k < op.output_sbp_hints.size() ? op.output_sbp_hints[k]
                                                           : NdSbp{};
      to_proto(hint, p->add_output_sbp_hints());
    }
  }
  for (int t : g.fetches) job->add_fetches(g.tensor(t).name);
  if (g.train.loss >= 0) job->mutable_train()->set_loss(g.tensor(g.train.loss).name);
  auto* opt = job->mutable_train()->mutable_optimizer();
  const OptimizerConfig& o = g.train.optimizer;
  opt->set_kind(static_cast<proto::OptimizerProto::Kind>(o.kind));
  opt->set_lr(o.lr);
  opt->set_momentum(o.momentum);
  opt->set_dampening(o.dampening);
  opt->set_weight_decay(o.weight_decay);
  opt->set_nesterov(o.nesterov);
  opt->set_beta1(o.beta1);
  opt->set_beta2(o.beta2);
  opt->set_epsilon(o.epsilon);
  opt->set_clip_grad_max_norm(o.clip_grad_max_norm);
  job->mutable_train()->set_gradient_accumulation_steps(g.train.gradient_accumulation_steps);
  job->mutable_train()->set_zero_stage(g.train.zero_stage);
  job->mutable_train()->set_gradient_bucket_bytes(g.train.gradient_bucket_bytes);
  job->mutable_train()->set_loss_scale(g.train.loss_scale);
  if (g.train.amp_dtype != DataType::kFloat32) {
    job->mutable_train()->set_amp_dtype(dtype_name(g.train.amp_dtype));
  }
  if (g.train.dynamic_loss_scale.enabled()) {
    proto::DynamicLossScaleProto* d = job->mutable_train()->mutable_dynamic_loss_scale();
    d->set_init_scale(g.train.dynamic_loss_scale.init_scale);
    d->set_growth_factor(g.train.dynamic_loss_scale.growth_factor);
    d->set_backoff_factor(g.train.dynamic_loss_scale.backoff_factor);
    d->set_growth_interval(g.train.dynamic_loss_scale.growth_interval);
  }
  if (g.train.grad_reduce_dtype != DataType::kFloat32) {
    job->mutable_train()->set_grad_reduce_dtype(dtype_name(g.train.grad_reduce_dtype));
  }
}

namespace {

std::string kind_name(const LogicalOp& op) {
  switch (op.kind) {
    case OpKind::kInput:
      return "input";
    case OpKind::kVariable:
      return "variable";
    case OpKind::kBoxing:
      return str_cat("boxing ", nd_sbp_to_string(op.boxing.in_sbp), " -> ",
                     nd_sbp_to_string(op.boxing.out_sbp));
    case OpKind::kCompute:
      return op.schema->name();
  }
  return "?";
}

std::string tensor_text(const Graph& g, int t) {
  const LogicalTensor& x = g.tensor(t);
  std::string s = str_cat(x.name, " ", x.meta.shape.to_string(), " ", dtype_name(x.meta.dtype));
  if (!x.sbp.empty()) s.append(" ").append(nd_sbp_to_string(x.sbp));
  return s;
}

}  // namespace

std::string graph_to_text(const Graph& g) {
  std::ostringstream os;
  for (int i : g.topological_order()) {
    const LogicalOp& op = g.op(i);
    os << op.name << " = " << kind_name(op);
    if (op.kind == OpKind::kCompute && !op.params.to_string().empty()) {
      os << "{" << op.params.to_string() << "}";
    }
    os << " on " << op.placement.to_string() << "\n";
    for (int t : op.inputs) os << "    in  " << tensor_text(g, t) << "\n";
    for (int t : op.outputs) os << "    out " << tensor_text(g, t) << "\n";
    if (op.recompute) os << "    recomputes group '" << op.checkpoint_group << "'\n";
    for (int c : op.control_inputs) os << "    after " << g.op(c).name << "\n";
    if (!op.signature.outputs.empty() || !op.signature.inputs.empty()) {
      os << "    sbp " << op.signature.to_string() << "\n";
    }
  }
  return os.str();
}

std::string graph_to_dot(const Graph& g) {
  std::ostringstream os;
  os << "digraph \"" << g.name << "\" {\n  rankdir=TB;\n  node [shape=box, fontsize=10];\n";
  for (int i = 0; i < g.num_ops(); ++i) {
    const LogicalOp& op = g.op(i);
    const char* color = op.kind == OpKind::kBoxing      ? "orange"
                        : op.role == OpRole::kBackward  ? "lightblue"
                        : op.role == OpRole::kOptimizer ? "lightgreen"
                        : op.kind == OpKind::kVariable  ? "khaki"
                                                        : "white";
    os << "  op" << i << " [label=\"" << op.name << "\\n"
       << kind_name(op) << "\", style=filled, fillcolor=" << color << "];\n";
  }
  const auto cons = g.consumers();
  for (int t = 0; t < g.num_tensors(); ++t) {
    const LogicalTensor& x = g.tensor(t);
    if (x.producer < 0) continue;
    for (int c : cons[t]) {
      os << "  op" << x.producer << " -> op" << c << " [label=\"" << x.meta.shape.to_string();
      if (!x.sbp.empty()) os << " " << nd_sbp_to_string(x.sbp);
      os << "\", fontsize=8];\n";
    }
  }
  os << "}\n";
  return os.str();
}

}  // namespace ofl::compiler
