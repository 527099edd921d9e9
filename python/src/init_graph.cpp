// Placement, SBP and the graph machinery nn.Graph and global tensors drive: the tracer that
// records a build() into a logical graph, compile, the plan, the actor runtime and the
// transports between processes.

#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include <optional>
#include <set>

#include "actor/runtime.h"
#include "actor/session_transport.h"
#include "comm/launch_env.h"
#include "comm/ucx_transport.h"
#include "compiler/compile.h"
#include "compiler/graph_tracer.h"
#include "compiler/physical/memory_planning.h"
#include "compiler/physical/memory_report.h"
#include "compiler/plan_dump.h"
#include "oneflowlike/autograd.h"
#include "oneflowlike/plan_task.h"
#include "oneflowlike/proto/job.pb.h"
#include "oneflowlike/proto_convert.h"
#include "python/src/bindings.h"

namespace ofl::python {

namespace {

using compiler::GraphTracer;

NdSbp nd_sbp_of(const std::vector<std::string>& sbp) {
  NdSbp out;
  for (const std::string& s : sbp) out.push_back(Sbp::parse(s));
  return out;
}

std::vector<std::string> strings_of(const NdSbp& sbp) {
  std::vector<std::string> out;
  for (const Sbp& s : sbp) out.push_back(s.to_string());
  return out;
}

std::vector<std::pair<int64_t, int64_t>> ranges_of(const std::vector<Range>& region) {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (const Range& r : region) out.emplace_back(r.begin, r.end);
  return out;
}

std::vector<Range> region_of(const std::vector<std::pair<int64_t, int64_t>>& ranges) {
  std::vector<Range> out;
  for (const auto& [begin, end] : ranges) out.push_back(Range{begin, end});
  return out;
}

// A tracer made current while `with tracer:` runs (Note [Lazy tensors]).
struct PyTracer {
  std::unique_ptr<GraphTracer> tracer;
  std::unique_ptr<TracingScope> scope;
};

compiler::OptimizerConfig optimizer_config(const std::string& kind, const py::dict& hyper) {
  compiler::OptimizerConfig c;
  if (kind == "sgd") {
    c.kind = compiler::OptimizerConfig::Kind::kSgd;
  } else if (kind == "adam") {
    c.kind = compiler::OptimizerConfig::Kind::kAdam;
  } else if (kind == "adamw") {
    c.kind = compiler::OptimizerConfig::Kind::kAdamW;
  } else {
    OFL_CHECK(false, "[nn.Graph] optimizer kind must be sgd, adam or adamw. However, got '", kind,
              "'.");
  }
  for (auto [key, value] : hyper) {
    const std::string k = py::cast<std::string>(key);
    const double v = py::cast<double>(value);
    if (k == "lr")
      c.lr = v;
    else if (k == "momentum")
      c.momentum = v;
    else if (k == "dampening")
      c.dampening = v;
    else if (k == "weight_decay")
      c.weight_decay = v;
    else if (k == "nesterov")
      c.nesterov = v != 0;
    else if (k == "beta1")
      c.beta1 = v;
    else if (k == "beta2")
      c.beta2 = v;
    else if (k == "eps")
      c.epsilon = v;
    else if (k == "clip_grad_max_norm")
      c.clip_grad_max_norm = v;
    else
      OFL_CHECK(false, "[nn.Graph] unknown optimizer setting '", k, "'.");
  }
  return c;
}

struct PyPlan {
  proto::PlanProto plan;
  std::string job_text;
  // From the whole logical graph, so every process knows them: the SBP of each fetched tensor
  // and each variable by name, and each fetched tensor's logical shape as handed back.
  std::map<std::string, std::vector<std::string>> fetch_sbp;
  std::map<std::string, std::vector<std::string>> variable_sbp;
  // The optimizer's inputs (lr, lr@1, step, ...) by name, with their dtypes.
  std::map<std::string, DataType> hyper_inputs;
  // Each differentiable input's name -> the name of its fetched gradient (Note [Input
  // gradients]).
  std::map<std::string, std::string> input_grads;
  std::vector<std::string> backward_reads;  // Note [Saved forward values]
  // Note [Memory report]: the kind of memory of each variable and gradient tensor, by name.
  std::map<std::string, std::string> memory_kinds;
};

}  // namespace

void init_graph(py::module_& m) {
  py::class_<Placement>(m, "Placement", "Device type and an N-d array of ranks.")
      .def(
          py::init([](const std::string& type, std::vector<int64_t> ranks, const Shape& hierarchy) {
            return Placement(device_type_from_name(type), std::move(ranks), hierarchy);
          }),
          py::arg("device_type"), py::arg("ranks"), py::arg("hierarchy"))
      .def_property_readonly("device_type",
                             [](const Placement& p) { return device_type_name(p.device_type()); })
      .def_property_readonly("ranks", &Placement::ranks)
      .def_property_readonly("hierarchy", &Placement::hierarchy)
      .def("parallel_id_of", &Placement::parallel_id_of, py::arg("rank"))
      .def("coordinate", &Placement::coordinate, py::arg("parallel_id"))
      .def("__eq__", &Placement::operator==)
      .def("__hash__", [](const Placement& p) { return std::hash<std::string>()(p.to_string()); })
      .def("__str__", &Placement::to_string);

  m.def(
      "_assign_",
      [](const Tensor& dst, const Tensor& src, const std::string& op) {
        assign_(dst, src, op.c_str());
      },
      py::arg("dst"), py::arg("src"), py::arg("op"),
      "Writes src's values into dst's storage (same shape and dtype), bumping its version; "
      "refused while grad mode is on when either requires grad (Note [Versions]).");
  m.def(
      "_mark_indexed_copy",
      [](const Tensor& t) {
        if (!t.is_lazy()) t.impl()->storage->set_indexed_copy();
      },
      py::arg("tensor"), "Marks a copy made by indexing: in-place writes into it are refused.");
  m.def(
      "_is_indexed_copy",
      [](const Tensor& t) { return !t.is_lazy() && t.impl()->storage->indexed_copy(); },
      py::arg("tensor"), "Whether in-place writes into the tensor's storage are refused.");
  m.def(
      "_unmark_indexed_copy",
      [](const Tensor& t) {
        if (!t.is_lazy()) t.impl()->storage->set_indexed_copy(false);
      },
      py::arg("tensor"),
      "Lifts the mark of _mark_indexed_copy: the storage becomes a tensor of its own (a "
      "Parameter made of it).");
  m.def("_is_lazy", [](const Tensor& t) { return t.defined() && t.is_lazy(); });
  m.def("sbp_parse", [](const std::string& s) { return Sbp::parse(s).to_string(); });
  m.def(
      "check_nd_sbp",
      [](const Shape& shape, const std::vector<std::string>& sbp, const Placement& placement,
         const std::string& name) { check_nd_sbp(shape, nd_sbp_of(sbp), placement, name); },
      py::arg("shape"), py::arg("sbp"), py::arg("placement"), py::arg("name"),
      "Raises ValueError when `sbp` cannot lay out a tensor of `shape` on `placement`.");
  m.def(
      "logical_region",
      [](const Shape& shape, const std::vector<std::string>& sbp, const Placement& placement,
         int64_t parallel_id) {
        return ranges_of(logical_region(shape, nd_sbp_of(sbp), placement, parallel_id));
      },
      py::arg("shape"), py::arg("sbp"), py::arg("placement"), py::arg("parallel_id"),
      "The [begin, end) per axis of the logical tensor that the piece at parallel_id holds.");
  m.def(
      "region_overlap",
      [](const std::vector<std::pair<int64_t, int64_t>>& piece,
         const std::vector<std::pair<int64_t, int64_t>>& target)
          -> std::optional<std::pair<std::vector<std::pair<int64_t, int64_t>>,
                                     std::vector<std::pair<int64_t, int64_t>>>> {
        OFL_CHECK(piece.size() == target.size(), "[region_overlap] both regions must have one ",
                  "range per axis of the tensor. However, got ", piece.size(), " and ",
                  target.size(), " ranges.");
        const std::vector<Range> a = region_of(piece), b = region_of(target);
        const std::vector<Range> overlap = region_intersection(a, b);
        if (region_is_empty(overlap)) return std::nullopt;
        return std::make_pair(ranges_of(region_relative_to(overlap, a)),
                              ranges_of(region_relative_to(overlap, b)));
      },
      py::arg("piece"), py::arg("target"),
      "Where a piece holding region `piece` of a tensor meets region `target` (Note [Region "
      "overlap]): (the overlap in the piece's coordinates, in the target's), or None.");

  py::class_<PyPlan>(m, "Plan", "A compiled plan (protobuf) with its job.")
      .def("summary",
           [](const PyPlan& p) {
             return compiler::summary_to_text(compiler::summarize_plan(p.plan));
           })
      .def("text", [](const PyPlan& p) { return compiler::plan_to_text(p.plan); })
      .def("dot", [](const PyPlan& p) { return compiler::plan_to_dot(p.plan); })
      .def_readonly("fetch_sbp", &PyPlan::fetch_sbp,
                    "The SBP of each fetched tensor, by name (the same in every process).")
      .def(
          "output_shapes",
          [](const PyPlan& p) {
            std::map<std::string, Shape> out;
            for (const auto& rank : p.plan.ranks()) {
              for (const auto& task : rank.tasks()) {
                if (task.kind() == proto::TaskProto::OUTPUT) {
                  out[logical_op_of(task)] = from_proto(task.logical_output_shape());
                }
              }
            }
            return out;
          },
          "The logical shape of each fetched tensor, by name: (m, *shape) for one computed per "
          "micro-batch.")
      .def_readonly("hyper_inputs", &PyPlan::hyper_inputs,
                    "The optimizer's inputs (lr, lr@1, step, ...) by name, with their dtypes.")
      .def_readonly("memory_kinds", &PyPlan::memory_kinds,
                    "Note [Memory report]: the kind of memory of each variable and gradient "
                    "tensor, by name.")
      .def_readonly("input_grads", &PyPlan::input_grads,
                    "Each differentiable input's name -> the fetched name of its gradient.")
      .def_readonly("backward_reads", &PyPlan::backward_reads,
                    "The forward op outputs the backward reads (Note [Saved forward values]).")
      .def_readonly("variable_sbp", &PyPlan::variable_sbp,
                    "The SBP of each variable, by name (the same in every process).")
      .def(
          "peak_bytes",
          [](const PyPlan& p) {
            std::map<int64_t, int64_t> out;
            for (const auto& rank : p.plan.ranks()) out[rank.rank()] = rank.peak_bytes();
            return out;
          },
          "Planned peak memory of each hosted rank (registers and memory blocks), in bytes.")
      .def(
          "memory_report",
          [](const PyPlan& p) {
            py::list out;
            for (const auto& r : compiler::physical::memory_report(p.plan, p.memory_kinds)) {
              py::dict d;
              d["rank"] = r.rank;
              d["planned_peak"] = r.planned_peak;
              d["live_peak"] = r.live_peak;
              d["peak_task"] = r.peak_task;
              d["workspace"] = r.workspace;
              d["by_kind"] = r.by_kind;
              d["model_states_peak"] = r.model_states_peak;
              d["model_states_task"] = r.model_states_task;
              out.append(d);
            }
            return out;
          },
          "Note [Memory report]: per hosted rank, its planned and live peaks, the task of the "
          "live peak, kernel workspace, and the bytes by kind live there.")
      .def(
          "memory_report_text",
          [](const PyPlan& p) {
            return compiler::physical::memory_report_to_text(
                compiler::physical::memory_report(p.plan, p.memory_kinds));
          },
          "memory_report() as one line per hosted rank.")
      .def(
          "largest_registers",
          [](const PyPlan& p, int64_t rank, size_t count) {
            for (const auto& r : p.plan.ranks()) {
              if (r.rank() == rank) return compiler::physical::largest_registers(r, count);
            }
            return std::string();
          },
          py::arg("rank"), py::arg("count") = 3,
          "The largest registers of a hosted rank, for messages.")
      .def(
          "job_bytes", [](const PyPlan& p) { return py::bytes(p.job_text); },
          "The traced job, serialized (the same bytes in every process of a job).");

  py::class_<PyTracer>(m, "GraphTracer",
                       "Records ops on lazy tensors into a logical graph (nn.Graph's trace).")
      .def(py::init([](const std::string& name, const Placement& placement) {
             auto t = std::make_unique<PyTracer>();
             t->tracer = std::make_unique<GraphTracer>(name, placement);
             return t;
           }),
           py::arg("name"), py::arg("placement"))
      .def(
          "__enter__",
          [](PyTracer& t) {
            OFL_CHECK(t.scope == nullptr, "[nn.Graph] the trace is running already.");
            t.scope = std::make_unique<TracingScope>(t.tracer.get());
            return &t;
          },
          py::return_value_policy::reference)
      .def("__exit__", [](PyTracer& t, py::args) { t.scope.reset(); })
      .def(
          "input",
          [](PyTracer& t, const std::string& name, const Shape& shape, DataType dtype,
             const Placement& placement, const std::vector<std::string>& sbp, bool donates) {
            return t.tracer->input(name, shape, dtype, placement, nd_sbp_of(sbp), donates);
          },
          py::arg("name"), py::arg("shape"), py::arg("dtype"), py::arg("placement"), py::arg("sbp"),
          py::arg("donates") = false,
          "A fed tensor; with `donates` the caller gives each run its pieces, which the run may "
          "write and hand back as results (Note [Donated pieces] in "
          "compiler/physical/in_place_boxing.h).")
      .def(
          "variable",
          [](PyTracer& t, const std::string& name, const Shape& shape, DataType dtype,
             const Placement& placement, const std::vector<std::string>& sbp, bool trainable) {
            return t.tracer->variable(name, shape, dtype, placement, nd_sbp_of(sbp), trainable);
          },
          py::arg("name"), py::arg("shape"), py::arg("dtype"), py::arg("placement"), py::arg("sbp"),
          py::arg("trainable"))
      .def(
          "to_global",
          [](PyTracer& t, const Tensor& x, const Placement& placement,
             const std::vector<std::string>& sbp) {
            return t.tracer->to_global(x, placement, nd_sbp_of(sbp));
          },
          py::arg("x"), py::arg("placement"), py::arg("sbp"))
      .def("fetch", [](PyTracer& t, const Tensor& x) { return t.tracer->fetch(x); })
      .def("differentiable", [](PyTracer& t, const Tensor& x) { t.tracer->differentiable(x); })
      .def("write_variable",
           [](PyTracer& t, const Tensor& variable, const Tensor& value, const std::string& op) {
             t.tracer->write_variable(variable, value, op);
           })
      .def("finish_writes", [](PyTracer& t) { t.tracer->finish_writes(); })
      .def("set_follows_no_grad",
           [](PyTracer& t, bool follows) { t.tracer->set_follows_no_grad(follows); })
      .def("written_variables", [](PyTracer& t) { return t.tracer->written_variables(); })
      .def(
          "fetch_named",
          [](PyTracer& t, const std::string& name) {
            compiler::Graph& g = t.tracer->builder().graph();
            const std::optional<int> found = g.find_tensor(name);
            if (!found.has_value()) return py::object(py::none());
            t.tracer->builder().fetch(*found);
            const TensorMeta& meta = g.tensor(*found).meta;
            return py::object(py::make_tuple(meta.shape, meta.dtype));
          },
          py::arg("name"),
          "Hands back the tensor of this name every iteration; returns its (shape, dtype), or "
          "None when the graph has no such tensor (Note [Saved forward values] in "
          "compiler/passes/autograd.cpp).")
      .def(
          "give",
          [](PyTracer& t, const std::string& name, const std::string& input,
             const std::vector<std::string>& sbp) {
            t.tracer->builder().graph().given_values[name] = {input, nd_sbp_of(sbp)};
          },
          py::arg("name"), py::arg("input"), py::arg("sbp"),
          "The forward tensor `name` is fed through input `input` laid out as `sbp` where the "
          "backward reads it (Note [Saved forward values] in compiler/passes/autograd.cpp).")
      .def(
          "ranks",
          [](PyTracer& t) {
            std::set<int64_t> ranks;
            const compiler::Graph& g = t.tracer->builder().graph();
            for (int i = 0; i < g.num_ops(); ++i) {
              for (int64_t r : g.op(i).placement.ranks()) ranks.insert(r);
            }
            return std::vector<int64_t>(ranks.begin(), ranks.end());
          },
          "Every rank an op of the traced graph is placed on.")
      .def(
          "op_types",
          [](PyTracer& t) {
            std::set<std::string> types;
            const compiler::Graph& g = t.tracer->builder().graph();
            for (int i = 0; i < g.num_ops(); ++i) {
              if (g.op(i).schema != nullptr) types.insert(g.op(i).schema->name());
            }
            return std::vector<std::string>(types.begin(), types.end());
          },
          "The op types of the traced graph's compute ops.")
      .def("knows", [](PyTracer& t, const Tensor& x) { return t.tracer->knows(x); })
      .def(
          "derives_from_input",
          [](PyTracer& t, const Tensor& x) {
            const compiler::Graph& g = t.tracer->builder().graph();
            std::vector<int> stack = {t.tracer->index_of(x)};
            std::set<int> seen;
            while (!stack.empty()) {
              const int tensor = stack.back();
              stack.pop_back();
              if (!seen.insert(tensor).second) continue;
              const compiler::LogicalOp& op = g.op(g.tensor(tensor).producer);
              if (op.kind == compiler::OpKind::kInput) return true;
              stack.insert(stack.end(), op.inputs.begin(), op.inputs.end());
            }
            return false;
          },
          "Whether `x` depends on a graph input (with micro-batches: computed per micro-batch).")
      .def("placement_of", [](PyTracer& t, const Tensor& x) { return t.tracer->placement_of(x); })
      .def("sbp_hint_of",
           [](PyTracer& t, const Tensor& x) { return strings_of(t.tracer->sbp_hint_of(x)); })
      .def("set_location_provider",
           [](PyTracer& t, std::function<std::string()> provider) {
             t.tracer->set_location_provider(std::move(provider));
           })
      .def("set_checkpoint_group",
           [](PyTracer& t, const std::string& group) { t.tracer->set_checkpoint_group(group); })
      .def("set_stage", [](PyTracer& t, int stage) { t.tracer->set_stage(stage); })
      .def("constants", [](PyTracer& t) { return t.tracer->constants(); })
      .def(
          "set_constants_allowed",
          [](PyTracer& t, bool allowed) { t.tracer->set_constants_allowed(allowed); },
          py::arg("allowed"),
          "Whether ordinary (local) tensors may be captured as constants (not in a global "
          "graph).")
      .def("set_loss",
           [](PyTracer& t, const Tensor& loss) {
             t.tracer->builder().set_loss(t.tracer->index_of(loss));
           })
      .def(
          "set_output_grad",
          [](PyTracer& t, const Tensor& y, const Tensor& dy) {
            t.tracer->builder().set_output_grad(t.tracer->index_of(y), t.tracer->index_of(dy));
          },
          py::arg("y"), py::arg("dy"),
          "Seeds the backward with dy as the gradient of y instead of a loss (Note [Given "
          "output gradients] in compiler/passes/autograd.cpp).")
      .def("set_optimizer",
           [](PyTracer& t, const std::string& kind, const py::dict& hyper) {
             t.tracer->builder().train().optimizer = optimizer_config(kind, hyper);
           })
      .def("set_param_groups",
           [](PyTracer& t, const std::vector<double>& weight_decays,
              const std::map<std::string, int>& group_of) {
             auto& optimizer = t.tracer->builder().train().optimizer;
             optimizer.group_weight_decay = weight_decays;
             optimizer.group_of = group_of;
           })
      .def("set_gradient_accumulation_steps",
           [](PyTracer& t, int n) {
             OFL_CHECK(n >= 1, "[nn.Graph] gradient accumulation steps must be >= 1. However, got ",
                       n, ".");
             t.tracer->builder().train().gradient_accumulation_steps = n;
           })
      .def("set_gradient_bucket_bytes",
           [](PyTracer& t, int64_t bytes) {
             OFL_CHECK(bytes >= 0,
                       "[nn.Graph] the gradient bucket size must be >= 0 bytes. However, got ",
                       bytes, ".");
             t.tracer->builder().train().gradient_bucket_bytes = bytes;
           })
      .def("set_amp_dtype",
           [](PyTracer& t, DataType dtype) {
             OFL_CHECK_TYPE(dtype == DataType::kBFloat16 || dtype == DataType::kFloat16 ||
                                dtype == DataType::kFloat32,
                            "[nn.Graph] enable_amp takes dtype bfloat16 or float16. However, got ",
                            dtype_name(dtype), ".");
             t.tracer->builder().train().amp_dtype = dtype;
           })
      .def("set_dynamic_loss_scale",
           [](PyTracer& t, double init_scale, double growth_factor, double backoff_factor,
              int64_t growth_interval) {
             t.tracer->builder().train().dynamic_loss_scale = {init_scale, growth_factor,
                                                               backoff_factor, growth_interval};
           })
      .def("set_grad_reduce_dtype",
           [](PyTracer& t, DataType dtype) {
             OFL_CHECK_TYPE(dtype == DataType::kFloat32 || dtype == DataType::kBFloat16,
                            "[nn.Graph] gradients are reduced in float32 or bfloat16. However, "
                            "got ",
                            dtype_name(dtype), ".");
             t.tracer->builder().train().grad_reduce_dtype = dtype;
           })
      .def("set_zero_stage",
           [](PyTracer& t, int stage) {
             OFL_CHECK(stage >= 0 && stage <= 3,
                       "[nn.Graph] ZeRO stage must be 0..3. However, got ", stage, ".");
             t.tracer->builder().train().zero_stage = stage;
           })
      .def("graph_text",
           [](PyTracer& t) { return compiler::graph_to_text(t.tracer->builder().graph()); })
      .def("num_ops", [](PyTracer& t) { return t.tracer->builder().graph().num_ops(); })
      .def(
          "compile",
          [](PyTracer& t, const std::vector<int64_t>& ranks,
             const std::vector<std::tuple<int, int, std::string>>& checkpoint_ranges) {
            compiler::CompileOptions options;
            options.ranks = ranks;
            auto plan = std::make_unique<PyPlan>();
            proto::JobProto job;
            t.tracer->builder().to_job(&job);
            plan->job_text = job.SerializeAsString();
            compiler::Graph logical;
            {
              py::gil_scoped_release release;
              if (checkpoint_ranges.empty()) {
                plan->plan =
                    compiler::compile_graph(t.tracer->builder().graph(), options, &logical);
              } else {
                // The traced graph with the ops of each range recomputed (Note [Memory limit]'s
                // activation checkpointing alternative); ops already in a group keep theirs.
                compiler::Graph g = t.tracer->builder().graph();
                for (const auto& [begin, end, group] : checkpoint_ranges) {
                  for (int i = std::max(begin, 0); i < std::min(end, g.num_ops()); ++i) {
                    if (g.op(i).checkpoint_group.empty()) g.op(i).checkpoint_group = group;
                  }
                }
                plan->plan = compiler::compile_graph(std::move(g), options, &logical);
              }
            }
            for (int f : logical.fetches) {
              plan->fetch_sbp[logical.tensor(f).name] = strings_of(logical.tensor(f).sbp);
            }
            plan->memory_kinds = compiler::physical::memory_kinds(logical);
            for (const auto& [input, at] : logical.input_grad_fetches) {
              plan->input_grads[input] = logical.tensor(logical.fetches.at(at)).name;
            }
            plan->backward_reads = logical.backward_reads;
            for (int i = 0; i < logical.num_ops(); ++i) {
              const compiler::LogicalOp& op = logical.op(i);
              if (op.kind == compiler::OpKind::kVariable) {
                plan->variable_sbp[op.name] = strings_of(logical.tensor(op.outputs[0]).sbp);
              }
              if (op.kind == compiler::OpKind::kInput && op.role == compiler::OpRole::kOptimizer) {
                plan->hyper_inputs[op.name] = logical.tensor(op.outputs[0]).meta.dtype;
              }
            }
            return plan;
          },
          py::arg("ranks"),
          py::arg("checkpoint_ranges") = std::vector<std::tuple<int, int, std::string>>{},
          "Compiles the traced graph: the parts of `ranks` (every rank when empty); with "
          "`checkpoint_ranges` [(first op, end op, group)], those ops recomputed as one "
          "activation-checkpointing group each.");

  py::class_<comm::Transport, std::shared_ptr<comm::Transport>>(m, "Transport");
  py::class_<comm::UcxTransport, comm::Transport, std::shared_ptr<comm::UcxTransport>>(
      m, "UcxTransport")
      .def("barrier", &comm::UcxTransport::barrier, py::call_guard<py::gil_scoped_release>(),
           "Waits until every rank of the job has called barrier().")
      .def_static(
          "connect",
          [] {
            const comm::LaunchEnv env = comm::LaunchEnv::from_environment();
            py::gil_scoped_release release;
            return comm::UcxTransport::connect(env);
          },
          "Joins the job described by the launcher's environment (RANK, WORLD_SIZE, ...).")
      .def("leave", &comm::UcxTransport::leave, py::call_guard<py::gil_scoped_release>());
  py::class_<actor::TransportSessions, std::shared_ptr<actor::TransportSessions>>(
      m, "TransportSessions")
      .def(py::init([](std::shared_ptr<comm::Transport> base, std::vector<int64_t> ranks) {
             return std::make_shared<actor::TransportSessions>(std::move(base), ranks);
           }),
           py::arg("transport"), py::arg("ranks"))
      .def("open", &actor::TransportSessions::open, py::arg("session"))
      .def("announce_departure", &actor::TransportSessions::announce_departure,
           py::arg("iterations"), py::arg("ranks"), py::call_guard<py::gil_scoped_release>(),
           "Tells `ranks` that this process's program has ended after `iterations` (session -> "
           "count) iterations of each runtime (Note [Departures]).")
      .def("dropped_messages", &actor::TransportSessions::dropped_messages);

  py::class_<actor::Runtime>(m, "Runtime", "Runs a plan on the actor runtime.")
      .def(py::init([](const PyPlan& plan, std::vector<int64_t> ranks,
                       std::shared_ptr<comm::Transport> transport, double watchdog_seconds,
                       bool trace, double spin_microseconds, bool caller_runs, int first_gpu,
                       const std::vector<std::string>& bindable_variables) {
             actor::RuntimeOptions options;
             options.bindable_variables = {bindable_variables.begin(), bindable_variables.end()};
             if (spin_microseconds >= 0) options.spin_microseconds = spin_microseconds;
             options.caller_runs = caller_runs;
             options.first_gpu = first_gpu;
             options.ranks = std::move(ranks);
             options.transport = std::move(transport);
             options.watchdog_seconds = watchdog_seconds;
             options.trace = trace;
             py::gil_scoped_release release;
             return std::make_unique<actor::Runtime>(plan.plan, options);
           }),
           py::arg("plan"), py::arg("ranks"), py::arg("transport") = nullptr,
           py::arg("watchdog_seconds") = 60.0, py::arg("trace") = false,
           py::arg("spin_microseconds") = -1.0, py::arg("caller_runs") = false,
           py::arg("first_gpu") = -1, py::arg("bindable_variables") = std::vector<std::string>())
      .def("chrome_trace", &actor::Runtime::chrome_trace,
           "The acts recorded since the last call (trace=True), as Chrome trace JSON.")
      .def("initialize_variables", &actor::Runtime::initialize_variables,
           py::call_guard<py::gil_scoped_release>())
      .def("run", &actor::Runtime::run, py::arg("inputs"), py::call_guard<py::gil_scoped_release>())
      .def("run_local", &actor::Runtime::run_local, py::arg("inputs"),
           py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("usable", &actor::Runtime::usable,
                             "Whether it can run again (false after a failed or refused run).")
      .def("read_variable", &actor::Runtime::read_variable, py::arg("name"))
      .def("write_variable", &actor::Runtime::write_variable, py::arg("name"), py::arg("value"))
      .def("read_variable_pieces", &actor::Runtime::read_variable_pieces, py::arg("name"))
      .def("write_variable_pieces", &actor::Runtime::write_variable_pieces, py::arg("name"),
           py::arg("pieces"))
      .def("bind_variable_pieces", &actor::Runtime::bind_variable_pieces, py::arg("name"),
           py::arg("pieces"),
           "Note [Variables bound to the caller's tensors]: makes the tensors (by rank) the "
           "variable's pieces; '' when bound, else why not (the variable then has memory of its "
           "own, to be written).")
      .def("variable_names",
           [](const actor::Runtime& r) {
             std::vector<std::string> names;
             for (const auto& [name, tasks] : r.plan_index().variables_by_name())
               names.push_back(name);
             return names;
           })
      .def_property_readonly("iterations", &actor::Runtime::iterations)
      .def("shutdown", &actor::Runtime::shutdown, py::call_guard<py::gil_scoped_release>());
}

}  // namespace ofl::python
