// The runtime: builds actors, registers and threads from a plan (Note [What the runtime adds to
// a plan] in the header), routes messages, and watches iterations.

#include "actor/runtime.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <functional>
#include <optional>
#include <set>

#include "actor/actor_kinds.h"
#include "actor/pieces.h"
#include "comm/in_process_transport.h"
#include "oneflowlike/common/clock.h"

namespace ofl::actor {

namespace {

constexpr const char* kTag = "[runtime] ";

// Virtual ids (Note [What the runtime adds to a plan]); plan ids stay far below them.
constexpr int64_t kCallerActor = -1;  // run() and the destructor, which start and end ticks
constexpr int64_t kTickActorBase = int64_t{1} << 60;
constexpr int64_t kRunRegisterBase = int64_t{1} << 59;
constexpr int64_t kVirtualRegisterBase = int64_t{1} << 58;
constexpr int64_t kTransferRegisterBase = int64_t{1} << 57;
constexpr int64_t kFirstVirtualId = int64_t{1} << 56;  // plan ids stay below

constexpr int64_t kMemoryAlignment = 64;

int64_t align_up(int64_t value) {
  return (value + kMemoryAlignment - 1) / kMemoryAlignment * kMemoryAlignment;
}

std::string json_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

Runtime::Runtime(const proto::PlanProto& plan, RuntimeOptions options)
    : index_(plan, PlanIndexOptions{options.check_acyclic}),
      options_(std::move(options)),
      job_name_(plan.job_name()) {
  OFL_CHECK(options_.watchdog_seconds > 0, kTag, "watchdog_seconds must be positive. However, got ",
            options_.watchdog_seconds, ".");
  OFL_CHECK(options_.spin_microseconds >= 0, kTag,
            "spin_microseconds must not be negative. However, got ", options_.spin_microseconds,
            ".");
  OFL_CHECK(!options_.record_messages || options_.deterministic, kTag,
            "record_messages needs deterministic mode (one thread keeps the log). However, got "
            "record_messages with threads.");
  ranks_ = options_.ranks.empty() ? index_.ranks() : options_.ranks;
  std::sort(ranks_.begin(), ranks_.end());
  OFL_CHECK(
      std::adjacent_find(ranks_.begin(), ranks_.end()) == ranks_.end(), kTag,
      "a runtime must host each rank once. However, got a rank twice in RuntimeOptions::ranks.");
  for (int64_t r : ranks_) {
    OFL_CHECK(std::binary_search(index_.ranks().begin(), index_.ranks().end(), r), kTag,
              "a runtime must host ranks of its plan. However, got rank ", r, "; the plan has ",
              index_.ranks().size(), " ranks.");
  }
  OFL_CHECK_CODE(ranks_ == index_.ranks(), ErrorCode::kUnimplemented, kTag,
                 "a runtime must host every rank of the plan it loads (a process compiles its "
                 "own ranks' part with CompileOptions::ranks). However, got ",
                 ranks_.size(), " of the plan's ", index_.ranks().size(), " ranks.");
  check_virtual_ids();
  transport_ =
      options_.transport ? options_.transport : std::make_shared<comm::InProcessTransport>();

  // Actors first (priority = position in the rank's plan: later acts first when both are ready).
  actor_of_task_.assign(index_.num_tasks(), nullptr);
  std::map<int64_t, int> position;
  for (int t = 0; t < index_.num_tasks(); ++t) {
    const int64_t rank = index_.task(t).proto.rank();
    if (!std::binary_search(ranks_.begin(), ranks_.end(), rank)) continue;
    actors_.push_back(make_task_actor(index_, t, position[rank]++));
    actor_of_task_[t] = actors_.back().get();
  }
  for (const auto& [key, bytes] : index_.memory_blocks()) {  // once, when the plan loads
    blocks_[key] = Tensor::zeros(Shape{bytes}, DataType::kInt8);
  }
  for (int64_t rank : ranks_) allocate_registers(rank);
  int next_virtual = 0;
  for (int t = 0; t < index_.num_tasks(); ++t) {
    if (actor_of_task_[t] != nullptr) connect_task(t, &next_virtual);
  }
  add_ticks(&next_virtual);
  for (const auto& actor : actors_) actor_by_id_[actor->id()] = actor.get();
  link_slots();
  for (const auto& actor : actors_) {
    actor->finish_setup();
    acts_per_iteration_ += actor->acts_per_iteration();
  }
  assign_threads();
  trace_origin_ns_ = now_ns();
  transport_->set_fault_handler(
      [this](int64_t rank, const std::string& why) { on_rank_failure(rank, why); });
  for (int t = 0; t < index_.num_tasks(); ++t) {
    const proto::TaskProto& task = index_.task(t).proto;
    if (actor_of_task_[t] != nullptr &&
        (task.kind() == proto::TaskProto::SEND || task.kind() == proto::TaskProto::RECV)) {
      peers_.insert(task.peer());
    }
  }
  for (int64_t r : index_.ranks()) {
    if (!std::binary_search(ranks_.begin(), ranks_.end(), r)) peers_.insert(r);
  }
  for (int64_t r : ranks_) peers_.erase(r);
  transport_->set_departure_handler(
      [this](int64_t rank, int64_t iterations) { on_rank_departure(rank, iterations); });
  std::vector<int64_t> served;
  try {
    for (int64_t rank : ranks_) {
      transport_->serve_rank(rank, [this](const comm::MessageBytes& m) { deliver(from_bytes(m)); });
      served.push_back(rank);
    }
    if (!options_.deterministic) {
      for (auto& thread : threads_) thread->start();
    }
  } catch (...) {
    // The destructor does not run for a constructor that throws: undo what was started.
    for (auto& thread : threads_) thread->stop();
    for (int64_t rank : served) transport_->stop_serving_rank(rank);
    transport_->set_fault_handler(nullptr);
    transport_->set_departure_handler(nullptr);
    throw;
  }
}

// Plan ids must stay below the runtime's own (Note [What the runtime adds to a plan]).
void Runtime::check_virtual_ids() const {
  auto check = [&](int64_t id, const std::string& what) {
    OFL_CHECK(id >= 0 && id < kFirstVirtualId, kTag, what, " must be in [0, 2^56). However, got ",
              id, ".");
  };
  for (int t = 0; t < index_.num_tasks(); ++t) {
    check(index_.task(t).proto.id(), index_.describe_task(t) + " id");
    if (index_.task(t).proto.kind() == proto::TaskProto::SEND) {
      check(index_.task(t).proto.transfer_id(), index_.describe_task(t) + " transfer_id");
    }
  }
  for (int r = 0; r < index_.num_registers(); ++r) {
    check(index_.reg(r).proto.id(), index_.describe_register(r) + " id");
  }
}

Runtime::~Runtime() { shutdown(); }

// Data registers of `rank`: each register's slots, in its planned block at its offset, or in an
// allocation of its own (persistent, multi-slot and unshared registers).
// A register's slots: in the rank's planned block (one slot, PlanIndex checks) or in an
// allocation of their own.
std::vector<Tensor> Runtime::allocate_slots(int64_t rank, const PlanIndex::RegisterInfo& reg,
                                            int num_slots) const {
  const int64_t bytes = reg.shape.numel() * static_cast<int64_t>(dtype_size(reg.dtype));
  const int64_t stride = align_up(std::max<int64_t>(bytes, 1));
  const bool in_block = reg.proto.memory_block() >= 0;
  const Tensor storage = in_block ? blocks_.at({rank, reg.proto.memory_block()})
                                  : Tensor::zeros(Shape{stride * num_slots}, DataType::kInt8);
  const int64_t base = in_block ? reg.proto.offset() : 0;
  std::vector<Tensor> slots;
  for (int s = 0; s < num_slots; ++s) {
    slots.push_back(view_of_bytes(storage, base + s * stride, reg.shape, reg.dtype));
  }
  return slots;
}

namespace {

// A view or an in-place concat keeps its input pieces until its output piece is read, one
// piece per act (Note [Slice views], Note [Concats in place]): its inputs' producers and its
// output's readers must act at its rate, and a view's input must not be written in place.
void check_borrowing(const PlanIndex& index, int t) {
  const PlanIndex::TaskInfo& task = index.task(t);
  if (!task.proto.view() && !task.proto.in_place()) return;
  const bool rate = index.per_micro(t);
  auto same_rate = [&](int other, const std::string& what) {
    OFL_CHECK(index.per_micro(other) == rate, kTag, index.describe_task(t), " is ",
              task.proto.view() ? "a view" : "in place", ", so ", what, " ",
              index.describe_task(other), " must act at its rate (once per ",
              rate ? "micro-batch" : "iteration", ").");
  };
  for (int r : task.inputs) {
    same_rate(index.reg(r).producer, "the producer");
    OFL_CHECK(!task.proto.view() || !index.reg(r).proto.persistent(), kTag, index.describe_task(t),
              " is a view, so its input ", index.describe_register(r), " must not be persistent.");
  }
  for (int64_t consumer : index.reg(task.outputs[0]).proto.consumers()) {
    same_rate(index.task_index(consumer), "the reader");
  }
}

}  // namespace

void Runtime::allocate_registers(int64_t rank) {
  // In each task's output order: a kernel's outputs are its actor's first outputs, in order.
  std::vector<int> order;
  // Note [Concats in place]: an in-place CONCAT's inputs are runs of its output's slot, so
  // they are placed once every other register has its memory.
  std::map<int, std::pair<int, int64_t>> written_into;  // input -> (output, byte offset)
  for (int t = 0; t < index_.num_tasks(); ++t) {
    const PlanIndex::TaskInfo& task = index_.task(t);
    if (task.proto.rank() != rank) continue;
    for (int r : task.outputs) order.push_back(r);
    check_borrowing(index_, t);
    if (!task.proto.in_place()) continue;
    const PlanIndex::RegisterInfo& out = index_.reg(task.outputs[0]);
    for (size_t i = 0; i < task.inputs.size(); ++i) {
      const int r = task.inputs[i];
      const proto::TaskProto& producer = index_.task(index_.reg(r).producer).proto;
      OFL_CHECK(!written_into.count(r) && !producer.view() && !producer.in_place(), kTag,
                index_.describe_task(t), " is in place, so its input ", index_.describe_register(r),
                " must be written into no other concat and be neither a view nor an in-place ",
                "concat's output.");
      written_into[r] = {task.outputs[0], *contiguous_offset(out.shape, task.regions[i]) *
                                              static_cast<int64_t>(dtype_size(out.dtype))};
    }
  }
  std::map<int, std::vector<Tensor>> slots;
  for (int r : order) {
    const PlanIndex::RegisterInfo& reg = index_.reg(r);
    const int num_slots = std::max(1, reg.proto.register_num());
    if (index_.task(reg.producer).proto.view()) {
      // Note [Slice views]: each piece is a view of the SLICE's input piece, made when it acts.
      slots[r].resize(num_slots);
    } else if (!written_into.count(r)) {
      slots[r] = allocate_slots(rank, reg, num_slots);
    }
  }
  for (const auto& [r, into] : written_into) {
    const PlanIndex::RegisterInfo& reg = index_.reg(r);
    for (const Tensor& whole : slots.at(into.first)) {  // one slot each (PlanIndex checks)
      slots[r].push_back(view_of_bytes(whole, into.second, reg.shape, reg.dtype));
    }
  }

  for (int r : order) {
    const PlanIndex::RegisterInfo& reg = index_.reg(r);
    Actor* producer = actor_of_task_[reg.producer];
    OFL_ASSERT(producer != nullptr);
    OutputRegister out;
    out.register_id = reg.proto.id();
    out.what = str_cat(index_.describe_register(r), " of ", producer->name());
    out.num_slots = std::max(1, reg.proto.register_num());
    out.slots = std::move(slots.at(r));
    // A view's and an in-place concat's pieces are their inputs' pieces, kept until the
    // consumers have acknowledged them.
    const proto::TaskProto& task = index_.task(reg.producer).proto;
    out.releases_inputs = task.view() || task.in_place();
    std::set<int64_t> seen;  // a task reading a register twice is one consumer
    for (int64_t consumer : reg.proto.consumers()) {
      if (!seen.insert(consumer).second) continue;
      const int c = index_.task_index(consumer);
      out.consumers.push_back(
          OutputRegister::Consumer{actor_of_task_[c]->id(), rank, index_.describe_task(c)});
      if (index_.per_micro(reg.producer) && !index_.per_micro(c)) {
        out.emit_every = index_.micro_batches();  // ACCUMULATE, PACK
      }
    }
    producer->outputs().push_back(std::move(out));
  }
}

// Inputs of one task: its data registers (each once, however many op inputs read it), the
// transfer from its SEND, its control inputs; and the SEND side of a transfer.
void Runtime::connect_task(int t, int* next_virtual) {
  const PlanIndex::TaskInfo& task = index_.task(t);
  Actor* actor = actor_of_task_[t];
  const int m = index_.micro_batches();
  auto hold = [&](int producer) {
    return !index_.per_micro(producer) && index_.per_micro(t) ? m : 1;
  };

  // Note [Transfer actor ids] in actor_kinds.h: the other end may be in another process.
  const int64_t transfer = task.proto.transfer_id();
  if (task.proto.kind() == proto::TaskProto::RECV) {
    InputEdge in;
    in.register_id = kTransferRegisterBase + transfer;
    in.producer = kSendActorBase + transfer;
    in.producer_rank = task.proto.peer();
    in.what = str_cat("transfer ", transfer, " from ",
                      task.send >= 0 ? index_.describe_task(task.send)
                                     : str_cat("the SEND on rank ", task.proto.peer()));
    in.hold = task.send >= 0 ? hold(task.send) : 1;
    const PlanIndex::RegisterInfo& out = index_.reg(task.outputs[0]);
    in.acked_on_send =
        is_inline_transfer(out.shape.numel() * static_cast<int64_t>(dtype_size(out.dtype)));
    actor->inputs().push_back(std::move(in));  // first: RecvActor reads input 0
  }
  if (task.proto.kind() == proto::TaskProto::SEND) {
    OutputRegister out;
    out.register_id = kTransferRegisterBase + transfer;
    const std::string recv =
        str_cat("the RECV of transfer ", transfer, " on rank ", task.proto.peer());
    out.what = str_cat("transfer ", transfer, " to ", recv);
    const PlanIndex::RegisterInfo& in = index_.reg(task.inputs[0]);
    out.num_slots = std::max(1, in.proto.register_num());
    out.releases_inputs = true;
    out.acked_on_send =
        is_inline_transfer(in.shape.numel() * static_cast<int64_t>(dtype_size(in.dtype)));
    out.consumers.push_back(
        OutputRegister::Consumer{kRecvActorBase + transfer, task.proto.peer(), recv});
    actor->outputs().push_back(std::move(out));
  }

  for (size_t position = 0; position < task.inputs.size(); ++position) {
    const int r = task.inputs[position];
    const int64_t id = index_.reg(r).proto.id();
    auto it = std::find_if(actor->inputs().begin(), actor->inputs().end(),
                           [&](const InputEdge& in) { return in.register_id == id; });
    if (it == actor->inputs().end()) {
      const int producer = index_.reg(r).producer;
      const Actor* from = actor_of_task_[producer];
      InputEdge in;
      in.register_id = id;
      in.producer = from->id();
      in.producer_rank = from->rank();
      in.what = str_cat(index_.describe_register(r), " from ", from->name());
      in.hold = hold(producer);
      actor->inputs().push_back(std::move(in));  // slots: link_slots(), once outputs are final
      it = actor->inputs().end() - 1;
    }
    it->positions.push_back(static_cast<int>(position));
  }

  for (int64_t id : task.proto.control_inputs()) {
    const int from = index_.task_index(id);
    const int slots = index_.per_micro(from) && index_.per_micro(t) ? index_.pipeline_depth() : 1;
    add_control_edge(from, t, slots, kVirtualRegisterBase + (*next_virtual)++);
  }
}

// Points every data input at its producer's slot tensors (the output lists no longer grow).
void Runtime::link_slots() {
  for (const auto& actor : actors_) {
    for (InputEdge& in : actor->inputs()) {
      if (in.positions.empty()) continue;  // control, tick and transfer edges carry no tensor
      Actor* from = actor_by_id_.at(in.producer);
      auto out =
          std::find_if(from->outputs().begin(), from->outputs().end(),
                       [&](const OutputRegister& o) { return o.register_id == in.register_id; });
      OFL_ASSERT(out != from->outputs().end());
      in.slots = &out->slots;
    }
  }
}

void Runtime::add_control_edge(int from, int to, int slots, int64_t register_id) {
  Actor* producer = actor_of_task_[from];
  Actor* consumer = actor_of_task_[to];
  const int m = index_.micro_batches();
  OutputRegister out;
  out.register_id = register_id;
  out.what = str_cat("the control register of ", producer->name());
  out.num_slots = slots;
  out.emit_every = index_.per_micro(from) && !index_.per_micro(to) ? m : 1;
  out.consumers.push_back(
      OutputRegister::Consumer{consumer->id(), consumer->rank(), consumer->name()});
  producer->outputs().push_back(std::move(out));
  InputEdge in;
  in.register_id = register_id;
  in.producer = producer->id();
  in.producer_rank = producer->rank();
  in.what = str_cat("control input from ", producer->name());
  in.hold = !index_.per_micro(from) && index_.per_micro(to) ? m : 1;
  consumer->inputs().push_back(std::move(in));
}

// Per rank: the tick, its edge to every task with nothing else to wait for, and the strict
// cycle of the compute thread's micro-batch part.
void Runtime::add_ticks(int* next_virtual) {
  const int m = index_.micro_batches();
  for (int64_t rank : ranks_) {
    actors_.push_back(make_tick_actor(kTickActorBase + rank, rank));
    Actor* tick = actors_.back().get();
    ticks_.push_back(tick);
    InputEdge start;
    start.register_id = kRunRegisterBase + rank;
    start.producer = kCallerActor;
    start.producer_rank = rank;
    start.what = "the start of an iteration from run()";
    tick->inputs().push_back(std::move(start));

    int first_micro = -1, last_micro = -1;
    for (int t = 0; t < index_.num_tasks(); ++t) {
      Actor* actor = actor_of_task_[t];
      if (actor == nullptr || actor->rank() != rank) continue;
      if (index_.per_micro(t) && index_.task(t).proto.thread() == 0) {
        if (first_micro < 0) first_micro = t;
        last_micro = t;
      }
      if (!actor->inputs().empty()) continue;
      const int64_t id = kVirtualRegisterBase + (*next_virtual)++;
      OutputRegister out;
      out.register_id = id;
      out.what = str_cat("the start register of ", tick->name());
      out.consumers.push_back(OutputRegister::Consumer{actor->id(), rank, actor->name()});
      tick->outputs().push_back(std::move(out));
      InputEdge in;
      in.register_id = id;
      in.producer = tick->id();
      in.producer_rank = rank;
      in.what = str_cat("the start of the iteration from ", tick->name());
      in.hold = index_.per_micro(t) ? m : 1;
      actor->inputs().push_back(std::move(in));
    }
    if (m > 1 && first_micro >= 0 && first_micro != last_micro) {
      add_control_edge(first_micro, last_micro, index_.pipeline_depth(),
                       kVirtualRegisterBase + (*next_virtual)++);
    }
  }
}

// One thread per (rank, plan thread): 0 is the compute stream, 1 communication. Deterministic
// mode puts every actor on one thread run by the caller.
void Runtime::assign_threads() {
  std::set<int64_t> compute_ranks;
  for (const auto& actor : actors_) compute_ranks.insert(actor->rank());
  ActorThread::Options thread_options;
  thread_options.spin_microseconds = options_.spin_microseconds;
  thread_options.trace = options_.trace;
  thread_options.kernel_threads =
      options_.kernel_threads > 0 ? options_.kernel_threads : (compute_ranks.size() > 1 ? 1 : 0);
  auto on_failure = [this](const Actor* actor, std::exception_ptr error) {
    this->on_failure(actor, error);
  };
  std::map<std::pair<int64_t, int>, ActorThread*> by_key;
  for (const auto& actor : actors_) {
    const int plan_thread = actor->task() >= 0 ? index_.task(actor->task()).proto.thread() : 0;
    const auto key = options_.deterministic ? std::make_pair(int64_t{0}, 0)
                                            : std::make_pair(actor->rank(), plan_thread);
    ActorThread*& thread = by_key[key];
    if (thread == nullptr) {
      const std::string name =
          options_.deterministic
              ? "deterministic"
              : str_cat("rank ", key.first, key.second == 0 ? " compute" : " communication");
      threads_.push_back(std::make_unique<ActorThread>(name, key.first, key.second, thread_options,
                                                       static_cast<ActorHost*>(this), on_failure));
      thread = threads_.back().get();
      if (options_.record_messages) thread->record_messages(&message_log_);
    }
    thread->add_actor(actor.get());
  }
  // Threads running transfers drive the transport while idle (Note [Spin, then park]).
  if (options_.deterministic) return;
  comm::Transport* transport = transport_.get();
  for (auto& thread : threads_) {
    for (const Actor* actor : thread->actors()) {
      if (actor->task() < 0) continue;
      const auto kind = index_.task(actor->task()).proto.kind();
      if (kind == proto::TaskProto::SEND || kind == proto::TaskProto::RECV) {
        thread->set_poll([transport] { return transport->progress(); });
        break;
      }
    }
  }
}

void Runtime::send(const ActorMessage& message) {
  if (message.dst_actor == kCallerActor) return;  // the tick's ack of a start
  if (message.src_rank != message.dst_rank) {
    transport_->send(message.dst_rank, to_bytes(message));
    return;
  }
  deliver(message);
}

void Runtime::deliver(const ActorMessage& message) {
  auto it = actor_by_id_.find(message.dst_actor);
  OFL_ASSERT(it != actor_by_id_.end()) << "no actor for " << message.to_string();
  it->second->thread()->post(message);
}

// Note [Iterations across processes]: a process's tick starts its iteration i + 1 only after
// run() returned for i, but actors fed by other processes (RECV and what follows from it) may
// act for i + 1 while this process still finishes i. Acts are therefore counted by their own
// iteration, and run() waits for the count of its iteration. No actor runs kIterationSlots
// iterations ahead: every iteration needs this process's tick.
void Runtime::count_act(int64_t iteration) {
  const int64_t n =
      acts_done_[iteration % kIterationSlots].fetch_add(1, std::memory_order_acq_rel) + 1;
  OFL_ASSERT(n <= acts_per_iteration_) << "an actor ran " << kIterationSlots << " iterations ahead";
  if (n == acts_per_iteration_) {
    std::lock_guard<std::mutex> lock(done_mu_);
    done_cv_.notify_all();
  }
}

bool Runtime::iteration_done() const {
  return acts_done_[iteration_ % kIterationSlots].load(std::memory_order_acquire) ==
         acts_per_iteration_;
}

void Runtime::on_failure(const Actor* actor, std::exception_ptr error) {
  std::string what = "unknown error";
  ErrorCode code = ErrorCode::kInternal;
  try {
    std::rethrow_exception(error);
  } catch (const Error& e) {
    what = e.what();
    code = e.code();
  } catch (const std::exception& e) {
    what = e.what();
  } catch (...) {
  }
  std::lock_guard<std::mutex> lock(done_mu_);
  if (failure_.empty()) {
    const std::string where =
        actor == nullptr
            ? "an actor thread"
            : str_cat(actor->name(), " in iteration ", actor->iteration(),
                      index_.micro_batches() > 1 ? str_cat(", micro-batch ", actor->micro_batch())
                                                 : "");
    failure_ = str_cat(kTag, where, " failed: ", what);
    failure_code_ = code;
  }
  done_cv_.notify_all();
}

// Note [Faults] in comm/ucx_transport.h: another rank failed; the run ends naming it.
void Runtime::on_rank_failure(int64_t rank, const std::string& why) {
  std::lock_guard<std::mutex> lock(done_mu_);
  if (failure_.empty()) {
    failure_ = str_cat(kTag, "rank ", rank, " failed: ", why);
    failure_code_ = ErrorCode::kUnavailable;
  }
  done_cv_.notify_all();
}

void Runtime::on_rank_departure(int64_t rank, int64_t iterations) {
  if (peers_.count(rank) == 0) return;  // this runtime never needs it
  std::lock_guard<std::mutex> lock(done_mu_);
  departed_[rank] = iterations;
  if (running_ && iteration_ >= iterations && failure_.empty()) {
    failure_ = departure_failure(rank, iterations);
    failure_code_ = ErrorCode::kUnavailable;
    failed_by_departure_ = true;
  }
  done_cv_.notify_all();
}

std::string Runtime::departure_failure(int64_t rank, int64_t iterations) const {
  std::string hosted;
  for (int64_t r : ranks_) hosted += str_cat(hosted.empty() ? "" : ", ", r);
  return str_cat(kTag, "rank ", rank, " ended its program after ", iterations, " iteration",
                 iterations == 1 ? "" : "s", " of '", job_name_, "', while rank",
                 ranks_.size() == 1 ? " " : "s ", hosted, " needs it in iteration ", iteration_ + 1,
                 ": every rank must run each graph (and each op on global tensors) the same "
                 "number of times. Rank ",
                 rank, " left early (a loop with fewer steps, or an exception it caught?).");
}

std::map<std::string, Tensor> Runtime::local_pieces() const {
  std::map<std::string, Tensor> pieces;
  for (int t = 0; t < index_.num_tasks(); ++t) {
    const Actor* actor = actor_of_task_[t];
    if (actor == nullptr) continue;
    const std::string name = str_cat("rank", actor->rank(), "/", index_.task(t).proto.name());
    if (index_.task(t).proto.kind() == proto::TaskProto::VARIABLE) {
      pieces[name] = variable_piece(t);
    } else if (const Tensor* fetched = last_fetched_piece(*actor)) {
      if (fetched->defined()) pieces[name] = *fetched;
    }
  }
  return pieces;
}

// After a failure or a stall no actor may act on: the caller's inputs go away when run()
// throws, and variables are read afterwards. Stops every thread (each finishes its current act).
void Runtime::stop_threads() {
  for (auto& thread : threads_) thread->stop();
  broken_ = true;
  inputs_ = nullptr;
}

void Runtime::initialize_variables() {
  OFL_CHECK_CODE(!broken_, ErrorCode::kFailedPrecondition, kTag,
                 shut_down_ ? "the runtime was shut down and cannot be used again."
                            : "the runtime stopped after an error and cannot be used again.");
  for (int t = 0; t < index_.num_tasks(); ++t) {
    if (actor_of_task_[t] != nullptr && index_.task(t).proto.kind() == proto::TaskProto::VARIABLE) {
      initialize_variable_piece(index_, t, variable_piece(t));
    }
  }
}

Tensor Runtime::variable_piece(int task) const {
  const Actor* actor = actor_of_task_[task];
  OFL_ASSERT(actor != nullptr && !actor->outputs().empty());
  return actor->outputs()[0].slots.at(0);
}

Tensor Runtime::read_variable(const std::string& name) const {
  return actor::read_variable(index_, name, [this](int t) { return variable_piece(t); });
}

void Runtime::write_variable(const std::string& name, const Tensor& value) {
  actor::write_variable(index_, name, value, [this](int t) { return variable_piece(t); });
}

std::map<std::string, Tensor> Runtime::run(const std::map<std::string, Tensor>& inputs) {
  return assemble_outputs(index_, run_iteration(&inputs, nullptr));
}

Runtime::Pieces Runtime::run_local(const Pieces& inputs) {
  Pieces out;
  for (auto& [t, piece] : run_iteration(nullptr, &inputs)) {
    out[index_.output_name(index_.task(t))][index_.task(t).proto.rank()] = std::move(piece);
  }
  return out;
}

const Tensor* Runtime::input_piece(const std::string& name, int64_t rank) const {
  if (input_pieces_ == nullptr) return nullptr;
  return &input_pieces_->at(name).at(rank);  // checked by run_iteration
}

std::vector<std::pair<int, Tensor>> Runtime::run_iteration(
    const std::map<std::string, Tensor>* inputs, const Pieces* pieces) {
  OFL_CHECK_CODE(!broken_, ErrorCode::kFailedPrecondition, kTag,
                 shut_down_ ? "the runtime was shut down and cannot be used again."
                            : "the runtime stopped after an error and cannot be used again.");
  // Every feed is checked before any actor acts, so a bad one leaves the runtime usable. A
  // process holding part of a job's ranks ignores the inputs only other ranks read.
  if (inputs != nullptr && static_cast<int64_t>(index_.ranks().size()) == index_.world_size()) {
    check_fed_inputs(index_, *inputs);
  }
  static const std::map<std::string, Tensor> kNoInputs;
  for (const auto& [name, tasks] : index_.inputs_by_name()) {
    for (int t : tasks) {
      if (actor_of_task_[t] == nullptr) continue;
      if (inputs != nullptr) {
        check_fed_input(index_, t, *inputs);
      } else {
        check_fed_piece(index_, t, *pieces);
      }
    }
  }
  {
    std::lock_guard<std::mutex> lock(done_mu_);
    for (const auto& [rank, ran] : departed_) {
      if (iteration_ >= ran) throw_error(ErrorCode::kUnavailable, departure_failure(rank, ran));
    }
    running_ = true;
  }
  // Not running once this returns or throws (Note [Departures] reads iteration_ only then).
  struct NotRunning {
    explicit NotRunning(Runtime* r) : runtime(r) {}
    NotRunning(const NotRunning&) = delete;
    ~NotRunning() {
      std::lock_guard<std::mutex> lock(runtime->done_mu_);
      runtime->running_ = false;
    }
    Runtime* runtime;
  };
  std::optional<NotRunning> running;
  running.emplace(this);
  inputs_ = inputs != nullptr ? inputs : &kNoInputs;
  input_pieces_ = pieces;
  for (Actor* tick : ticks_) {
    deliver(ActorMessage::register_ready({kCallerActor, tick->rank()}, {tick->id(), tick->rank()},
                                         kRunRegisterBase + tick->rank(), /*slot=*/0, iteration_));
  }
  wait_for_iteration();
  running.reset();
  inputs_ = nullptr;
  input_pieces_ = nullptr;
  std::vector<std::pair<int, Tensor>> fetched;
  for (int t = 0; t < index_.num_tasks(); ++t) {
    if (actor_of_task_[t] == nullptr) continue;
    auto piece = take_fetched_piece(*actor_of_task_[t], iteration_);
    if (piece && piece->defined()) {
      fetched.emplace_back(t, *piece);
    }
  }
  acts_done_[iteration_ % kIterationSlots].store(0, std::memory_order_release);
  ++iteration_;
  return fetched;
}

std::map<int64_t, Tensor> Runtime::read_variable_pieces(const std::string& name) const {
  std::map<int64_t, Tensor> out;
  for (int t : hosted_variable_tasks(name, "read_variable_pieces")) {
    out[index_.task(t).proto.rank()] = variable_piece(t).clone();
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
    copy_region(piece, whole(piece.shape()), target, whole(target.shape()));
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

// Note [Watchdog]: the iteration ends when every actor has acted its share. If for
// watchdog_seconds no actor acts (and none is in the middle of an act: a long kernel is
// progress), every waiting actor is reported with the registers it lacks and from whom, and
// the cycle among them, if there is one. In deterministic mode a stall shows at once: no
// message is pending and no actor can act.
void Runtime::wait_for_iteration() {
  if (options_.deterministic) {
    threads_.at(0)->run_inline();
    std::unique_lock<std::mutex> lock(done_mu_);
    if (!failure_.empty()) {
      lock.unlock();
      stop_threads();
      throw_error(failure_code_, failure_);
    }
    if (!iteration_done()) {
      lock.unlock();
      const std::string report = stall_report();
      stop_threads();
      throw_error(ErrorCode::kDeadlineExceeded,
                  str_cat(kTag, "no actor can act and no message is pending in iteration ",
                          iteration_, " (deterministic mode).", report));
    }
    return;
  }
  const int64_t timeout_ns = static_cast<int64_t>(options_.watchdog_seconds * 1e9);
  int64_t last_remaining = acts_per_iteration_ - acts_done_[iteration_ % kIterationSlots].load();
  int64_t last_progress = now_ns();
  std::unique_lock<std::mutex> lock(done_mu_);
  while (!iteration_done() && failure_.empty()) {
    done_cv_.wait_for(lock, std::chrono::milliseconds(20));
    if (iteration_done() || !failure_.empty()) break;
    const int64_t remaining = acts_per_iteration_ - acts_done_[iteration_ % kIterationSlots].load();
    bool acting = false;
    for (const auto& thread : threads_) acting = acting || thread->acting() != nullptr;
    const int64_t now = now_ns();
    if (remaining != last_remaining || acting) {
      last_remaining = remaining;
      last_progress = now;
    } else if (now - last_progress > timeout_ns) {
      lock.unlock();
      throw_stall();
    }
  }
  if (!failure_.empty()) {
    std::string failure = failure_;
    const ErrorCode code = failure_code_;
    const bool departure = failed_by_departure_;
    lock.unlock();
    // The rank that left comes first; what each actor waits for after, for those who want it.
    if (departure) {
      const std::string report = stall_report();
      failure += "\n" + report.substr(report.find_first_not_of(' '));
    }
    stop_threads();
    throw_error(code, failure);
  }
}

void Runtime::throw_stall() {
  const std::string report = stall_report();
  const int64_t done = acts_done_[iteration_ % kIterationSlots].load();
  stop_threads();
  throw_error(
      ErrorCode::kDeadlineExceeded,
      str_cat(kTag, "no actor made progress for ", options_.watchdog_seconds, " s in iteration ",
              iteration_, " (", done, " of ", acts_per_iteration_, " acts done).", report));
}

std::string Runtime::stall_report() const {
  std::map<int64_t, std::vector<int64_t>> waits_on;  // actor -> actors it waits for
  std::map<int64_t, const Actor*> waiting;
  std::map<int64_t, std::string> reports;
  std::string lines;
  int listed = 0;
  for (const auto& thread : threads_) {
    auto lock = thread->lock_state(/*seconds=*/1);
    if (!lock.owns_lock()) {  // acting again after all: a long act started late
      lines += str_cat("\n  thread '", thread->name(), "' is busy and was not inspected");
      continue;
    }
    for (const Actor* actor : thread->actors()) {
      if (actor->acts() >= (iteration_ + 1) * actor->acts_per_iteration()) continue;
      std::vector<int64_t> on;
      const std::string waits = actor->waiting_for(&on);
      if (waits.empty()) {  // a bug if it stays so: it could act, yet no thread runs it
        lines += str_cat("\n  ", actor->name(), " could act (", actor->acts(), " acts, ",
                         actor->queued ? "queued" : "not queued", ") but has not");
        continue;
      }
      waiting[actor->id()] = actor;
      waits_on[actor->id()] = on;
      reports[actor->id()] = waits;
    }
  }
  // The frontier first: actors waiting on one that is not waiting itself (a rank elsewhere, a
  // message in flight); the others wait on them.
  std::vector<int64_t> order;
  for (int pass = 0; pass < 2; ++pass) {
    for (const auto& [id, on] : waits_on) {
      const bool frontier =
          std::any_of(on.begin(), on.end(), [&](int64_t a) { return waiting.count(a) == 0; });
      if (frontier == (pass == 0)) order.push_back(id);
    }
  }
  for (int64_t id : order) {
    if (listed++ < 20)
      lines += str_cat("\n  ", waiting.at(id)->name(), " waits for ", reports.at(id));
  }
  if (listed > 20) lines += str_cat("\n  and ", listed - 20, " more waiting actors");

  // A cycle among the waiting actors: depth-first search over "waits for".
  std::map<int64_t, int> state;  // 1: on the stack, 2: done
  std::vector<int64_t> stack, cycle;
  std::function<bool(int64_t)> visit = [&](int64_t a) {
    state[a] = 1;
    stack.push_back(a);
    for (int64_t b : waits_on[a]) {
      if (!waiting.count(b)) continue;
      if (state[b] == 1) {
        cycle.assign(std::find(stack.begin(), stack.end(), b), stack.end());
        cycle.push_back(b);
        return true;
      }
      if (state[b] == 0 && visit(b)) return true;
    }
    stack.pop_back();
    state[a] = 2;
    return false;
  };
  for (const auto& [id, actor] : waiting) {
    if (state[id] == 0 && visit(id)) break;
  }
  std::string cycle_text;
  if (!cycle.empty()) {
    cycle_text = "\nCycle:";
    for (size_t i = 0; i < cycle.size(); ++i) {
      cycle_text += str_cat(i ? " -> " : " ", waiting.at(cycle[i])->name());
    }
  } else {
    cycle_text =
        "\nNo cycle among them: they wait for an actor that is not waiting itself (a message "
        "in flight, a busy thread, or a rank outside this process).";
  }
  return str_cat(" Waiting actors:", lines.empty() ? " none" : lines, cycle_text);
}

std::vector<Runtime::Act> Runtime::take_acts() {
  std::vector<Act> acts;
  for (const auto& thread : threads_) {
    for (const TraceEvent& e : thread->take_trace()) {
      const Actor& actor = *e.actor;
      Act act;
      act.rank = actor.rank();
      act.thread = thread->index();
      act.tick = actor.task() < 0;
      if (!act.tick) {
        act.task = index_.task(actor.task()).proto.name();
        act.kind = index_.task(actor.task()).proto.kind();
      }
      act.iteration = e.iteration;
      act.micro_batch = e.micro_batch;
      act.begin_us = (e.begin_ns - trace_origin_ns_) / 1000.0;
      act.end_us = (e.end_ns - trace_origin_ns_) / 1000.0;
      acts.push_back(std::move(act));
    }
  }
  return acts;
}

std::string Runtime::chrome_trace() {
  std::string json = "{\"traceEvents\":[";
  bool first = true;
  auto add = [&](const std::string& event) {
    json += (first ? "\n" : ",\n") + event;
    first = false;
  };
  for (const auto& thread : threads_) {
    add(str_cat("{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":", thread->rank(), ",\"tid\":",
                thread->index(), ",\"args\":{\"name\":\"", json_escape(thread->name()), "\"}}"));
  }
  for (const Act& act : take_acts()) {
    const std::string name = act.tick ? str_cat("tick of rank ", act.rank) : act.task;
    const std::string kind = act.tick ? "TICK" : proto::TaskProto::Kind_Name(act.kind);
    add(str_cat("{\"name\":\"", json_escape(name), "\",\"cat\":\"", kind,
                "\",\"ph\":\"X\",\"pid\":", act.rank, ",\"tid\":", act.thread,
                ",\"ts\":", act.begin_us, ",\"dur\":", act.end_us - act.begin_us,
                ",\"args\":{\"iteration\":", act.iteration, ",\"micro_batch\":", act.micro_batch,
                "}}"));
  }
  return json + "\n]}\n";
}

bool Runtime::shutdown() {
  if (shut_down_) return all_retired_;
  shut_down_ = true;
  bool retired = !broken_;
  if (!broken_) {
    for (Actor* tick : ticks_) {
      deliver(ActorMessage::end_of_stream({kCallerActor, tick->rank()}, {tick->id(), tick->rank()},
                                          kRunRegisterBase + tick->rank()));
    }
    if (options_.deterministic && !threads_.empty()) threads_[0]->run_inline();
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (auto& thread : threads_) {
    const double left =
        std::chrono::duration<double>(deadline - std::chrono::steady_clock::now()).count();
    if (broken_) {
      thread->stop();
    } else if (!thread->join(std::max(0.0, left))) {
      retired = false;
      std::string names;
      for (const Actor* actor : thread->actors()) {
        if (!actor->retired()) names += "\n  " + actor->name();
      }
      LOG(ERROR) << kTag << "thread '" << thread->name()
                 << "' still had actors that had not retired 10 s after the end of stream:"
                 << names;
    }
  }
  for (const auto& actor : actors_) retired = retired && actor->retired();
  for (int64_t rank : ranks_) transport_->stop_serving_rank(rank);
  transport_->set_fault_handler(nullptr);
  transport_->set_departure_handler(nullptr);
  broken_ = true;  // nothing runs after this
  all_retired_ = retired;
  return retired;
}

}  // namespace ofl::actor
