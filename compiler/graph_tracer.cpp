#include "compiler/graph_tracer.h"

#include <algorithm>

#include "oneflowlike/autograd.h"
#include "oneflowlike/ops/reshape.h"

namespace ofl::compiler {

GraphTracer::GraphTracer(std::string job_name, const Placement& placement)
    : builder_(std::move(job_name)), current_(placement) {}

Tensor GraphTracer::lazy(int tensor) {
  Tensor t = make_lazy_tensor(builder_.meta(tensor));
  index_[t.impl()] = tensor;
  lazies_.push_back(t);
  return t;
}

void GraphTracer::enter(const Placement& placement) {
  current_ = placement;
  builder_.set_placement(placement);
  int stage = fixed_stage_;
  if (stage < 0) {
    auto it = std::find(stages_.begin(), stages_.end(), placement);
    if (it == stages_.end()) it = stages_.insert(stages_.end(), placement);
    stage = static_cast<int>(it - stages_.begin());
  }
  builder_.set_stage(stage);
  builder_.set_location(location_ ? location_() : "");
}

Tensor GraphTracer::input(const std::string& name, const Shape& shape, DataType dtype,
                          const Placement& placement, const NdSbp& sbp, bool donates) {
  enter(placement);
  return lazy(builder_.input(name, shape, dtype, sbp, donates));
}

Tensor GraphTracer::variable(const std::string& name, const Shape& shape, DataType dtype,
                             const Placement& placement, const NdSbp& sbp, bool trainable) {
  enter(placement);
  return lazy(builder_.variable(name, shape, Initializer{}, sbp, trainable, dtype));
}

int GraphTracer::index_of(const Tensor& x) const {
  OFL_CHECK(x.defined(), "[nn.Graph] got an undefined tensor.");
  auto it = index_.find(x.impl());
  OFL_CHECK(it != index_.end(), "[nn.Graph] ", x.describe(),
            " is a value of another graph's build(): a graph can only use its own values, "
            "its inputs, its modules' parameters and ordinary tensors.");
  return it->second;
}

const Placement& GraphTracer::placement_of(const Tensor& x) const {
  const Graph& g = const_cast<GraphTracer*>(this)->builder_.graph();
  return g.op(g.tensor(index_of(x)).producer).placement;
}

NdSbp GraphTracer::sbp_hint_of(const Tensor& x) const {
  const Graph& g = const_cast<GraphTracer*>(this)->builder_.graph();
  const LogicalTensor& t = g.tensor(index_of(x));
  const LogicalOp& op = g.op(t.producer);
  if (static_cast<int>(op.output_sbp_hints.size()) > t.producer_output) {
    return op.output_sbp_hints[t.producer_output];
  }
  return {};
}

Tensor GraphTracer::to_global(const Tensor& x, const Placement& placement, const NdSbp& sbp) {
  if (x.is_lazy()) refresh(x);
  const int in = x.is_lazy() ? index_of(x) : constant(x, "to_global");
  check_readable(in, "to_global");
  // Eagerly a move to the layout a buffer has is the buffer itself (Note [Buffers written in
  // place in build]: its reads are not ordered against a later in-place write).
  if (x.is_lazy() && is_buffer_or_view(x) && placement == placement_of(x) &&
      (sbp == sbp_hint_of(x) || sbp_hint_of(x).empty())) {
    aliased_.insert(in);
  }
  enter(placement);
  const Shape shape = builder_.meta(in).shape;
  check_nd_sbp(shape, sbp, placement, builder_.graph().tensor(in).name);
  return lazy(builder_.op1("reshape", ReshapeParams{shape}, {in}, "", sbp));
}

std::string GraphTracer::fetch(const Tensor& x) {
  refresh(x);
  const int t = index_of(x);
  check_readable(t, "nn.Graph output");
  builder_.fetch(t);
  return builder_.graph().tensor(t).name;
}

void GraphTracer::differentiable(const Tensor& x) {
  Graph& g = builder_.graph();
  LogicalOp& op = g.op(g.tensor(index_of(x)).producer);
  OFL_CHECK(op.kind == OpKind::kInput,
            "[autograd] only a graph input can be marked "
            "differentiable. However, got ",
            x.describe(), ".");
  op.trainable = true;
}

void GraphTracer::write_variable(const Tensor& variable, const Tensor& value,
                                 const std::string& op) {
  const auto view = views_.find(variable.impl());
  if (view != views_.end()) {  // Note [Views of buffers]: the write goes to the buffer
    const Tensor parent = view->second.parent;
    OFL_CHECK(value.shape() == variable.shape() && value.dtype() == variable.dtype(), "[", op,
              "] the value written into ", variable.describe(), " must have its shape ",
              variable.shape().to_string(), " and dtype ", dtype_name(variable.dtype()),
              ". However, got ", value.describe(), ".");
    static const OpSchema& reshape = OpRegistry::global().find("reshape");
    write_variable(parent, trace(reshape, ReshapeParams{parent.shape()}, {value}).at(0), op);
    return;
  }
  const Graph& g = builder_.graph();
  int var = -1;
  const auto known = variable_of_.find(variable.impl());
  if (known != variable_of_.end()) {
    var = known->second;
  } else {
    var = index_of(variable);
    const LogicalOp& producer = g.op(g.tensor(var).producer);
    OFL_CHECK(producer.kind == OpKind::kVariable && !producer.trainable, "[", op,
              "] in-place ops inside nn.Graph.build() may change a module's buffers (running "
              "statistics) only. However, got ",
              producer.kind == OpKind::kVariable ? "parameter '" + producer.name + "'"
                                                 : "a traced value " + variable.describe(),
              producer.kind == OpKind::kVariable
                  ? ", which changes through its optimizer (or write it under a buffer)"
                  : ": write x = x + y (or masked_fill, where) instead",
              location_ ? str_cat(" [at ", location_(), "]") : std::string(), ".");
  }
  const LogicalOp& var_op = g.op(g.tensor(var).producer);
  OFL_CHECK(value.shape() == variable.shape() && value.dtype() == variable.dtype(), "[", op,
            "] the value written into buffer '", var_op.name, "' must have its shape ",
            variable.shape().to_string(), " and dtype ", dtype_name(variable.dtype()),
            ". However, got ", value.describe(), ".");
  OFL_CHECK(!finished_writes_, "[", op, "] buffer '", var_op.name,
            "' is written after build() returned.");
  check_readable(var, op);  // Note [Buffers written in place in build]: one way per step
  Tensor v = value;
  if (v.is_lazy()) refresh(v);
  if (v.is_lazy()) check_readable(index_of(v), op);
  const Placement where = var_op.placement;
  if (!v.is_lazy() || placement_of(v) != where) {  // a constant, or computed elsewhere
    const NdSbp sbp = var_op.output_sbp_hints.empty() ? NdSbp(where.hierarchy().ndim(), B())
                                                      : var_op.output_sbp_hints[0];
    v = to_global(v, where, sbp);
  }
  writes_[var] = index_of(v);
  variable_of_[variable.impl()] = var;
  index_[variable.impl()] = index_of(v);  // later reads see the new value
}

void GraphTracer::finish_writes() {
  if (finished_writes_) return;
  finished_writes_ = true;
  for (const auto& [var, value] : writes_) {
    const Graph& g = builder_.graph();
    const LogicalOp& var_op = g.op(g.tensor(var).producer);
    enter(var_op.placement);
    builder_.op("assign", NoParams{}, {var, value});
  }
}

std::vector<std::string> GraphTracer::written_variables() const {
  std::vector<std::string> names;
  const Graph& g = const_cast<GraphTracer*>(this)->builder_.graph();
  for (const auto& [var, value] : writes_) names.push_back(g.op(g.tensor(var).producer).name);
  for (const auto& [var, writer] : in_place_) {
    if (writes_.count(var) == 0) names.push_back(g.op(g.tensor(var).producer).name);
  }
  return names;
}

// Note [Buffers written in place in build]: an op whose kernel writes an input in place (the
// cached attention's caches, Note [Cached attention]) may write a module's buffer inside
// build(): the buffer's variable itself is its input, and the kernel writes the variable's
// memory, with no copy and no assign (Note [Buffers written in build] makes a new value and
// assigns it). The plan runs such a write after every other read of the variable in its
// iteration (Note [In-place updates wait for readers] in compiler/compile.cpp), which is the
// program's order only when nothing reads the buffer after the write. So once written in place
// a buffer is not read again in the same build(): not by an op, a to_global, a write of its
// value into another buffer or of another value into it, or as an output (check_readable); and
// a buffer with views in the trace (to_global to its own layout included: eagerly the buffer
// itself) is not written in place (a view reads the variable through a register of its own,
// which the plan does not order against the write). Anything but a buffer as the written
// input is refused: a parameter, an activation, a view, or a buffer an in-place op of build()
// already gave a new value (buf.mul_(...), which the plan assigns at the end). Each refusal
// names the op and the buffer.
void GraphTracer::check_readable(int tensor, const std::string& user) const {
  const auto written = in_place_.find(tensor);
  if (written == in_place_.end()) return;
  const Graph& g = const_cast<GraphTracer*>(this)->builder_.graph();
  OFL_CHECK(false, "[", user, "] uses buffer '", g.op(g.tensor(tensor).producer).name, "' after ",
            written->second,
            " wrote it in place in the same build(): a graph runs that write after every other "
            "use of the buffer in its iteration, so this read would see the old value (or this "
            "write be overwritten). Use the buffer before the write, and write it once per step",
            location_ ? str_cat(" [at ", location_(), "]") : std::string(), ".");
}

void GraphTracer::check_in_place_writes(const OpSchema& op, const AnyParams& params,
                                        const std::vector<Tensor>& inputs,
                                        const std::vector<int>& ids) {
  for (int id : ids) check_readable(id, op.name());
  if (!writes_inputs(op)) return;
  const Graph& g = builder_.graph();
  const std::string at = location_ ? str_cat(" [at ", location_(), "]") : std::string();
  for (int m : mutated_inputs(op, params, static_cast<int>(inputs.size()))) {
    const std::string input =
        m < static_cast<int>(op.input_names().size()) ? op.input_names()[m] : str_cat("input ", m);
    const auto rewritten = variable_of_.find(inputs[m].impl());
    if (rewritten != variable_of_.end()) {
      OFL_CHECK(false, "[", op.name(), "] writes buffer '",
                g.op(g.tensor(rewritten->second).producer).name, "' (its input '", input,
                "') in place after an in-place op of build() gave it a new value (copy_, mul_, "
                "...): write the buffer one way per step",
                at, ".");
    }
    const int id = ids.at(m);
    const LogicalOp& producer = g.op(g.tensor(id).producer);
    const bool buffer = inputs[m].is_lazy() && views_.count(inputs[m].impl()) == 0 &&
                        producer.kind == OpKind::kVariable && !producer.trainable &&
                        constants_.count(producer.name) == 0;
    OFL_CHECK(buffer, "[", op.name(), "] writes its input '", input,
              "' in place: in a traced graph that must be a module's buffer (a variable the "
              "graph does not train), not a view of one or a value computed in build() (on "
              "global tensors outside nn.Graph there is no such variable). However, got ",
              producer.kind == OpKind::kVariable ? "variable '" + producer.name + "'"
                                                 : inputs[m].describe(),
              at, ".");
    bool viewed = aliased_.count(id) > 0;
    for (const auto& [impl, view] : views_) {
      const BufferView* v = &view;  // up the views to the buffer
      while (views_.count(v->parent.impl()) > 0) v = &views_.at(v->parent.impl());
      viewed = viewed || index_of(v->parent) == id;
    }
    OFL_CHECK(!viewed, "[", op.name(), "] writes buffer '", producer.name,
              "' in place, and build() took a view of it (view, reshape, detach, to_global to "
              "its own layout): the plan would not order the view's reads against the write. "
              "Read the buffer itself",
              at, ".");
    in_place_.emplace(id, op.name());
  }
}

int GraphTracer::constant(const Tensor& value, const std::string& user) {
  OFL_CHECK_TYPE(constants_allowed_, "[", user, "] got a local tensor ", value.describe(),
                 " in a graph over global tensors (placed on ", current_.to_string(),
                 "): each rank would use its own value as the one replicated value. Make it "
                 "global: t.to_global(placement=..., sbp=flow.sbp.broadcast)",
                 location_ ? str_cat(" [at ", location_(), "]") : std::string(), ".");
  // A tensor that requires grad is something to train (a parameter of a module the graph does
  // not hold): as a constant it would keep its traced value, never trained, never updated.
  OFL_CHECK(!value.requires_grad(), "[", user, "] got a local tensor ", value.describe(),
            " that requires grad but is not a parameter or buffer of the graph's modules: the "
            "graph would take its value now as a constant, never train it and never see it "
            "change. Make its module an attribute of the graph (self.m = m), or detach() it",
            location_ ? str_cat(" [at ", location_(), "]") : std::string(), ".");
  const std::string name = builder_.graph().unique_name("constant");
  const int t =
      builder_.variable(name, value.shape(), Initializer{}, NdSbp(current_.hierarchy().ndim(), B()),
                        /*trainable=*/false, value.dtype());
  constants_[name] = value;
  return t;
}

namespace {

// The fill op without inputs that `t` is, or the cast of one (autocast casts a number operand):
// {the fill, the cast or null}; {null, null} otherwise.
std::pair<const LogicalOp*, const LogicalOp*> fill_of(const Graph& g, int t) {
  const LogicalOp* op = &g.op(g.tensor(t).producer);
  const LogicalOp* cast = nullptr;
  if (op->schema != nullptr && op->schema->name() == "cast" && op->inputs.size() == 1) {
    cast = op;
    op = &g.op(g.tensor(op->inputs[0]).producer);
  }
  if (op->schema == nullptr || op->schema->name() != "fill" || !op->inputs.empty()) {
    return {nullptr, nullptr};
  }
  return {op, cast};
}

}  // namespace

bool GraphTracer::is_fill(const Tensor& x) const {
  const Graph& g = const_cast<GraphTracer*>(this)->builder_.graph();
  return fill_of(g, index_of(x)).first != nullptr;
}

Tensor GraphTracer::fill_on(const Tensor& x, const Placement& placement) {
  const Graph& g = builder_.graph();
  const auto [fill, cast] = fill_of(g, index_of(x));
  const AnyParams fill_params = fill->params;
  const AnyParams cast_params = cast != nullptr ? cast->params : AnyParams();
  const bool casts = cast != nullptr;
  enter(placement);
  const int value = builder_.op("fill", fill_params, {}).at(0);
  return lazy(casts ? builder_.op("cast", cast_params, {value}).at(0) : value);
}

std::vector<Tensor> GraphTracer::trace(const OpSchema& op, const AnyParams& params,
                                       const std::vector<Tensor>& given) {
  // Note [Fills follow their users]: a number operand (x == 10, x.ge(0)) is a fill op without
  // inputs, traced where the op before it ran (the rule in graph_tracer.h), which under pipeline
  // stages may be another stage than x's. The op's placement is then that of its other lazy
  // inputs, and each fill elsewhere (or its cast, which autocast adds) is traced again there (a
  // constant: the same values).
  std::vector<Tensor> inputs = given;
  for (size_t i = 0; i < inputs.size(); ++i) {
    OFL_CHECK(inputs[i].defined(), "[", op.name(), "] input ", i, " is an undefined tensor.");
    if (inputs[i].is_lazy()) refresh(inputs[i]);
  }
  const Placement* others = nullptr;
  for (const Tensor& t : inputs) {
    if (t.is_lazy() && !is_fill(t)) {
      others = &placement_of(t);
      break;
    }
  }
  if (others != nullptr) {
    const Placement target = *others;
    for (Tensor& t : inputs) {
      if (t.is_lazy() && is_fill(t) && placement_of(t) != target) t = fill_on(t, target);
    }
  }
  const Placement* placement = nullptr;
  int first_lazy = -1;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].is_lazy()) continue;
    const Placement& p = placement_of(inputs[i]);
    if (placement == nullptr) {
      placement = &p;
      first_lazy = static_cast<int>(i);
    } else {
      OFL_CHECK(*placement == p, "[", op.name(), "] all inputs must be on one placement. However, ",
                "input ", first_lazy, " is on ", placement->to_string(), " and input ", i, " on ",
                p.to_string(), ". Move one with to_global(placement=...) first.");
    }
  }
  const Placement where = placement != nullptr ? *placement : current_;
  enter(where);
  std::vector<int> ids;
  ids.reserve(inputs.size());
  for (const Tensor& t : inputs) ids.push_back(t.is_lazy() ? index_of(t) : constant(t, op.name()));
  enter(where);  // constant() may have moved the location on
  check_in_place_writes(op, params, inputs, ids);
  const std::vector<int> outs = builder_.op(op.name(), params, ids);
  // Note [No grad in a trace]: `with flow.no_grad(): t = teacher(x)` inside nn.Graph.build()
  // makes t a constant, as eagerly: without this the graph would train what eager does not
  // (the teacher of a distillation), silently. Only where the trace is the user's program
  // (follows_no_grad, nn.Graph's): the library traces the gradients of eager global ops under
  // no_grad itself (framework/global_autograd.py), and those must be differentiated. The op is
  // the one builder_.op just added.
  if (follows_no_grad_ && !GradMode::enabled()) {
    builder_.graph().op(builder_.graph().num_ops() - 1).no_grad = true;
  }
  std::vector<Tensor> result;
  result.reserve(outs.size());
  for (int t : outs) result.push_back(lazy(t));
  const int* view_of = op.get<TViewOfInput>();
  if (view_of != nullptr && is_buffer_or_view(inputs[*view_of])) {
    views_[result.at(0).impl()] = BufferView{inputs[*view_of], &op, params, ids[*view_of]};
  }
  return result;
}

// Note [Views of buffers]: eagerly a view of a buffer (buf.view(-1), reshape, detach: the ops
// marked TViewOfInput) shares its storage, so after `buf.mul_(m)` it reads the new values. A
// trace has no storage: the view is the op that made it, from the value the buffer had then.
// So each view of a buffer remembers its parent (the buffer or another view), its op and the
// parent's tensor index it was traced from; read after the parent moved on (a write, Note
// [Buffers written in build]), it is traced again from the parent's new value, parents first.
// Without this a graph would read the old statistics where eager reads the new ones,
// silently. A write into a view writes the buffer, reshaped back (every such view has the
// buffer's elements in order). Views of anything else cannot go stale: only buffers are
// written in a trace.
bool GraphTracer::is_buffer_or_view(const Tensor& x) const {
  if (!x.is_lazy()) return false;
  if (views_.count(x.impl()) > 0 || variable_of_.count(x.impl()) > 0) return true;
  const Graph& g = const_cast<GraphTracer*>(this)->builder_.graph();
  const LogicalOp& producer = g.op(g.tensor(index_of(x)).producer);
  return producer.kind == OpKind::kVariable && !producer.trainable;
}

void GraphTracer::refresh(const Tensor& x) {
  const auto it = views_.find(x.impl());
  if (it == views_.end()) return;
  BufferView& view = it->second;
  refresh(view.parent);
  const int parent = index_of(view.parent);
  if (parent == view.from) return;
  enter(placement_of(view.parent));
  index_[x.impl()] = builder_.op(view.op->name(), view.params, {parent}).at(0);
  view.from = parent;
}

}  // namespace ofl::compiler
