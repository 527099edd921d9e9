// The runtime's variables: initialising, reading and writing them, and Note [Variables bound
// to the caller's tensors].

#include <algorithm>

#include "actor/pieces.h"
#include "actor/runtime.h"
#include "actor/runtime_internal.h"
#include "oneflowlike/plan_task.h"

namespace ofl::actor {

// Note [Variables bound to the caller's tensors]
// A graph's parameters and buffers live in its modules' tensors. A runtime whose variables had
// memory of their own held a second copy of each (twice the model's memory while the graph and
// the modules live) and copied between the two whenever one side had to see the other's change.
// OneFlow's nn.Graph reads and updates the eager tensors themselves, and so does this runtime
// where it can: the caller names, when it creates the runtime, the variables it may give tensors
// for (RuntimeOptions::bindable_variables); their pieces get no memory, and
// bind_variable_pieces makes the caller's tensor the piece itself. Acts reach a variable's piece
// through its slot when they act, so an update writes the caller's tensor in place, and the
// caller sees every write of a run once run() returns (no act of it is left then).
// A piece is bound only where the caller's tensor can be the register: the register's shape,
// dtype and device; host memory (on a GPU the eager stream's work on the tensor is not ordered
// with the runtime's streams); a register of its own (not in a planned block, not written into
// an in-place concat's output) that no SEND reads (its receiver may read it after run() has
// returned); and a storage no other variable piece has (two variables on one storage would see
// each other's in-place updates in an order the plan never fixed). Where one of these fails,
// the variable gets memory of its own and the reason comes back; the caller then writes its
// values as before, and so after binding with no piece. A fed piece sharing storage with a
// bound piece is refused (an input handed in would be written by the update it feeds). Binding
// again replaces the piece: the caller does it when its tensor's memory changes. Binding
// happens between runs, on the thread that runs them.

void Runtime::initialize_variables() {
  OFL_CHECK_CODE(!broken_, ErrorCode::kFailedPrecondition, kTag,
                 shut_down_ ? "the runtime was shut down and cannot be used again."
                            : "the runtime stopped after an error and cannot be used again.");
  for (int t = 0; t < index_.num_tasks(); ++t) {
    if (actor_of_task_[t] != nullptr && index_.task(t).proto.kind() == proto::TaskProto::VARIABLE &&
        !unplaced_variables_.count(t) && !bound_variables_.count(t)) {  // the caller's values
      write_through_host(variable_piece(t),
                         [&](const Tensor& piece) { initialize_variable_piece(index_, t, piece); });
    }
  }
}

// A variable piece in GPU memory is read and written through a host copy: initializers,
// checkpoints and the caller's tensors are on the host.
void Runtime::write_through_host(const Tensor& piece,
                                 const std::function<void(const Tensor&)>& write) {
  if (piece.device().type == DeviceType::kCPU) {
    write(piece);
    return;
  }
  const Tensor staged = Tensor::empty(piece.shape(), piece.dtype());
  write(staged);
  piece.copy_from(staged);
}

Tensor Runtime::variable_piece(int task) const {
  const Actor* actor = actor_of_task_[task];
  OFL_ASSERT(actor != nullptr && !actor->outputs().empty());
  const Tensor& piece = actor->outputs()[0].slots.at(0);
  OFL_CHECK_CODE(piece.defined(), ErrorCode::kFailedPrecondition, kTag, "variable '",
                 logical_op_of(index_.task(task).proto), "' of rank ", actor->rank(),
                 " has no memory yet: it was offered for binding (RuntimeOptions::",
                 "bindable_variables), so bind_variable_pieces must place it before it is read, "
                 "written or run.");
  return piece;
}

Tensor Runtime::read_variable(const std::string& name) const {
  return actor::read_variable(index_, name,
                              [this](int t) { return variable_piece(t).to(Device::cpu()); });
}

void Runtime::write_variable(const std::string& name, const Tensor& value) {
  std::map<int, Tensor> staged;  // GPU pieces: written on the host, then copied
  actor::write_variable(index_, name, value, [&](int t) {
    const Tensor piece = variable_piece(t);
    if (piece.device().type == DeviceType::kCPU) return piece;
    return staged.emplace(t, Tensor::empty(piece.shape(), piece.dtype())).first->second;
  });
  for (const auto& [t, host] : staged) variable_piece(t).copy_from(host);
}

std::map<int64_t, Tensor> Runtime::read_variable_pieces(const std::string& name) const {
  std::map<int64_t, Tensor> out;
  for (int t : hosted_variable_tasks(name, "read_variable_pieces")) {
    const Tensor piece = variable_piece(t);
    out[index_.task(t).proto.rank()] =
        piece.device().type == DeviceType::kCPU ? piece.clone() : piece.to(Device::cpu());
  }
  return out;
}

void Runtime::write_variable_pieces(const std::string& name,
                                    const std::map<int64_t, Tensor>& pieces) {
  for (int t : hosted_variable_tasks(name, "write_variable_pieces")) {
    const Tensor target = variable_piece(t);
    const int64_t rank = index_.task(t).proto.rank();
    auto it = pieces.find(rank);
    OFL_CHECK(it != pieces.end(), kTag, "write_variable_pieces of '", name,
              "' needs the piece of rank ", rank, ". However, got none.");
    const Tensor& piece = it->second;
    OFL_CHECK(piece.defined() && piece.shape() == target.shape() && piece.dtype() == target.dtype(),
              kTag, "variable '", name, "' on rank ", rank, " must be written with shape ",
              target.shape().to_string(), " ", dtype_name(target.dtype()), ". However, got ",
              piece.defined() ? piece.shape().to_string() + " " + dtype_name(piece.dtype())
                              : std::string("an undefined tensor"),
              ".");
    if (piece.raw_data() == target.raw_data() && piece.device() == target.device()) {
      continue;  // a bound piece written with its own tensor
    }
    write_through_host(target, [&](const Tensor& host) {
      copy_region(piece, whole_region(piece.shape()), host, whole_region(host.shape()));
    });
  }
}

std::vector<int> Runtime::hosted_variable_tasks(const std::string& name, const char* caller) const {
  auto it = index_.variables_by_name().find(name);
  OFL_CHECK_CODE(it != index_.variables_by_name().end(), ErrorCode::kNotFound, kTag, caller,
                 " needs a variable of the plan. However, got '", name, "'.");
  std::vector<int> tasks;
  for (int t : it->second) {
    if (actor_of_task_[t] != nullptr) tasks.push_back(t);
  }
  return tasks;
}

std::string why_register_not_bound(const PlanIndex& index, const PlanIndex::RegisterInfo& reg) {
  if (std::max(1, reg.proto.register_num()) != 1) {
    return str_cat("its register has ", reg.proto.register_num(), " slots");
  }
  if (reg.proto.memory_block() >= 0) return "its register lies in a planned memory block";
  // Its readers, and those of views of it (Note [Repeated views]).
  std::vector<const PlanIndex::RegisterInfo*> pending{&reg};
  while (!pending.empty()) {
    const PlanIndex::RegisterInfo* at = pending.back();
    pending.pop_back();
    for (int64_t consumer : at->proto.consumers()) {
      const PlanIndex::TaskInfo& info = index.task(index.task_index(consumer));
      const proto::TaskProto& reader = info.proto;
      if (reader.in_place()) {
        return str_cat("the in-place ", reader.name(), " holds it in its output");
      }
      // The receiver reads the piece when it comes to it, possibly after this rank's run has
      // returned and the caller has written or freed its tensor (Note [Fed pieces are handed in]
      // refuses fed pieces a SEND reads for the same reason).
      if (reader.kind() == proto::TaskProto::SEND) {
        return str_cat(reader.name(), " sends it to rank ", reader.peer());
      }
      if (reader.view()) {
        for (int out : info.outputs) pending.push_back(&index.reg(out));
      }
    }
  }
  return "";
}

std::string Runtime::why_not_bound(int task, const Tensor& piece,
                                   const std::map<int, Tensor>& offered) const {
  const PlanIndex::TaskInfo& info = index_.task(task);
  const PlanIndex::RegisterInfo& reg = index_.reg(info.outputs.at(0));
  if (!piece.defined()) return "no tensor was given";
  if (piece.is_lazy()) return "a traced value has no memory";
  const Device device = device_of(info.proto.rank(), reg.proto.device());
  if (piece.shape() != reg.shape || piece.dtype() != reg.dtype || piece.device() != device) {
    return str_cat("its piece is ", reg.shape.to_string(), " ", dtype_name(reg.dtype), " on ",
                   device.to_string(), ", the tensor ", piece.shape().to_string(), " ",
                   dtype_name(piece.dtype()), " on ", piece.device().to_string());
  }
  if (device.type != DeviceType::kCPU) {
    return "GPU pieces are not bound (the eager stream's work on the tensor is not ordered with "
           "the runtime's streams)";
  }
  const std::string why = why_register_not_bound(index_, reg);
  if (!why.empty()) return why;
  for (const auto& [name, tasks] : index_.variables_by_name()) {
    for (int other : tasks) {
      if (other == task || actor_of_task_[other] == nullptr) continue;
      const auto it = offered.find(other);
      const Tensor held =
          it != offered.end() ? it->second : actor_of_task_[other]->outputs()[0].slots.at(0);
      if (held.defined() && held.shares_storage_with(piece)) {
        return str_cat("its tensor shares storage with variable '", name, "' of rank ",
                       index_.task(other).proto.rank());
      }
    }
  }
  return "";
}

std::string Runtime::bind_variable_pieces(const std::string& name,
                                          const std::map<int64_t, Tensor>& pieces) {
  {
    std::lock_guard<std::mutex> lock(done_mu_);
    OFL_CHECK_CODE(!running_, ErrorCode::kFailedPrecondition, kTag, "bind_variable_pieces of '",
                   name, "' must not be called during a run.");
  }
  const std::vector<int> tasks = hosted_variable_tasks(name, "bind_variable_pieces");
  std::map<int, Tensor> offered;  // task -> the caller's piece
  for (int t : tasks) {
    const int64_t rank = index_.task(t).proto.rank();
    const auto it = pieces.find(rank);
    OFL_CHECK(it != pieces.end() || pieces.empty(), kTag, "bind_variable_pieces of '", name,
              "' needs the piece of rank ", rank, ". However, got none.");
    offered[t] = it != pieces.end() && it->second.defined() ? it->second.detach() : Tensor();
  }
  std::string why = pieces.empty() ? "the caller gave no piece" : "";
  if (tasks.empty()) why = "this runtime hosts no piece of it";
  for (int t : tasks) {
    if (!why.empty()) break;
    why = why_not_bound(t, offered.at(t), offered);
  }
  for (int t : tasks) {  // every piece of the name, or none
    std::vector<Tensor>& slots = actor_of_task_[t]->outputs()[0].slots;
    if (why.empty()) {
      slots.at(0) = offered.at(t);
      bound_variables_.insert(t);
    } else if (bound_variables_.count(t) || unplaced_variables_.count(t)) {
      // Memory of its own; the caller writes the values next.
      slots = allocate_slots(index_.task(t).proto.rank(), index_.reg(index_.task(t).outputs.at(0)),
                             /*num_slots=*/1);
      bound_variables_.erase(t);
    }
    unplaced_variables_.erase(t);
  }
  return why.empty() ? std::string()
                     : str_cat("variable '", name, "' keeps memory of its own: ", why, ".");
}

void Runtime::check_variables_placed(const Pieces* fed) const {
  if (!unplaced_variables_.empty()) {
    const int t = *unplaced_variables_.begin();
    OFL_CHECK_CODE(false, ErrorCode::kFailedPrecondition, kTag, "variable '",
                   logical_op_of(index_.task(t).proto), "' of rank ", index_.task(t).proto.rank(),
                   " has no memory: it was offered for binding (RuntimeOptions::",
                   "bindable_variables), and bind_variable_pieces has not placed it.");
  }
  if (fed == nullptr || bound_variables_.empty()) return;
  for (const auto& [input, by_rank] : *fed) {
    for (const auto& [rank, piece] : by_rank) {
      for (int t : bound_variables_) {
        OFL_CHECK(!piece.defined() || !piece.shares_storage_with(variable_piece(t)), kTag,
                  "input '", input, "' of rank ", rank, " shares storage with variable '",
                  logical_op_of(index_.task(t).proto),
                  "', which the run may write in place (Note [Variables bound to the caller's "
                  "tensors]). Feed a copy (clone()).");
      }
    }
  }
}

}  // namespace ofl::actor
