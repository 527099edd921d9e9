// Loading a plan: memory blocks and registers, one actor per hosted task, their edges and the
// virtual ones of Note [What the runtime adds to a plan] (control edges, ticks, transfers).

#include <algorithm>
#include <cstdlib>
#include <set>

#include "actor/actor_kinds.h"
#include "actor/pieces.h"
#include "actor/runtime.h"
#include "actor/runtime_internal.h"
#include "comm/in_process_transport.h"
#include "oneflowlike/common/clock.h"
#include "oneflowlike/cuda/device.h"
#include "oneflowlike/plan_contract.h"
#include "oneflowlike/plan_task.h"

namespace ofl::actor {

namespace {

constexpr int64_t kMemoryAlignment = 64;

int64_t align_up(int64_t value) {
  return (value + kMemoryAlignment - 1) / kMemoryAlignment * kMemoryAlignment;
}

bool simulating_cuda(const RuntimeOptions& options) {
  const char* env = std::getenv("OFL_SIMULATE_CUDA");
  return options.simulate_cuda || (env != nullptr && std::string(env) == "1") ||
         simulated_cuda_devices() > 0;  // Note [Simulated CUDA devices]
}

}  // namespace

Runtime::Runtime(const proto::PlanProto& plan, RuntimeOptions options)
    : index_(plan, PlanIndexOptions{.check_acyclic = options.check_acyclic,
                                    .cpu_kernels = simulating_cuda(options)}),
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
  OFL_CHECK(!(options_.caller_runs && options_.deterministic), kTag,
            "caller_runs and deterministic are two modes. However, got both.");
  if (options_.caller_runs) {
    // Note [Caller-run runtimes]: a plan with GPU tasks keeps its threads and streams.
    for (const proto::RankPlanProto& rank : plan.ranks()) {
      for (const proto::TaskProto& task : rank.tasks()) {
        if (task.device() == proto::PLAN_DEVICE_CUDA) options_.caller_runs = false;
      }
    }
  }
  OFL_CHECK(!options_.caller_runs || (!options_.async_cpu_streams && !options_.make_stream), kTag,
            "caller_runs runs host tasks at their acts. However, got streams asked for.");
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

  options_.simulate_cuda = simulating_cuda(options_);
  choose_gpus();
  // Actors first (priority = position in the rank's plan: later acts first when both are ready).
  actor_of_task_.assign(index_.num_tasks(), nullptr);
  std::map<int64_t, int> position;
  for (int t = 0; t < index_.num_tasks(); ++t) {
    const int64_t rank = index_.task(t).proto.rank();
    if (!std::binary_search(ranks_.begin(), ranks_.end(), rank)) continue;
    actors_.push_back(make_task_actor(index_, t, position[rank]++,
                                      device_of(rank, index_.task(t).proto.device())));
    actor_of_task_[t] = actors_.back().get();
  }
  for (const auto& [key, block] : index_.memory_blocks()) {  // once, when the plan loads
    blocks_[key] =
        Tensor::zeros(Shape{block.bytes}, DataType::kInt8, device_of(key.first, block.device));
    // Note [Pinned host blocks] (cuda/device.h): a rank with GPU tasks copies between its host
    // block and its GPU (inputs, outputs, boxing through the host), queued (CopyActor).
    const Tensor& memory = blocks_[key];
    if (!options_.simulate_cuda && gpu_of_rank_.count(key.first) &&
        memory.device().type == DeviceType::kCPU && memory.nbytes() > 0) {
      pinned_.push_back(
          {memory, std::make_unique<cuda::PinnedRange>(memory.raw_data(), memory.nbytes(),
                                                       gpu_of_rank_.at(key.first))});
      if (!pinned_.back().range->pinned()) {
        LOG(WARNING) << kTag << "rank " << key.first << "'s host block of " << memory.nbytes()
                     << " bytes stays pageable (its copies to and from the GPU are staged by "
                        "the driver): "
                     << pinned_.back().range->why_not();
      }
    }
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
  assign_streams();
  trace_origin_ns_ = now_ns();
  transport_->set_fault_handler(
      [this](int64_t rank, const std::string& why) { on_rank_failure(rank, why); });
  for (int t = 0; t < index_.num_tasks(); ++t) {
    const proto::TaskProto& task = index_.task(t).proto;
    if (actor_of_task_[t] != nullptr &&
        (task.kind() == proto::TaskProto::SEND || task.kind() == proto::TaskProto::RECV)) {
      peers_.insert(task.peer());
    }
    if (actor_of_task_[t] != nullptr && task.kind() == proto::TaskProto::COLLECTIVE) {
      peers_.insert(task.collective().members().begin(), task.collective().members().end());
    }
  }
  for (int64_t r : index_.ranks()) {
    if (!std::binary_search(ranks_.begin(), ranks_.end(), r)) peers_.insert(r);
  }
  for (int64_t r : ranks_) peers_.erase(r);
  transport_->set_departure_handler(
      [this](int64_t rank, int64_t iterations) { on_rank_departure(rank, iterations); });
  announced_to_.assign(peers_.begin(), peers_.end());
  transport_->set_position_handler([this](const std::string& why) { on_position_difference(why); },
                                   job_name_);
  std::vector<int64_t> served;
  try {
    for (int64_t rank : ranks_) {
      transport_->serve_rank(rank,
                             [this](const comm::MessageBytes& m) { on_message(from_bytes(m)); });
      served.push_back(rank);
    }
    make_device_collectives();
    if (!on_caller()) {
      for (auto& thread : threads_) thread->start();
    }
  } catch (...) {
    // The destructor does not run for a constructor that throws: undo what was started.
    for (auto& thread : threads_) thread->stop();
    for (int64_t rank : served) transport_->stop_serving_rank(rank);
    transport_->set_fault_handler(nullptr);
    transport_->set_departure_handler(nullptr);
    transport_->set_position_handler(nullptr);
    throw;
  }
}

// Note [The GPU of a rank]
// ------------------------
// A plan says only that a task runs on its rank's GPU (Note [Devices in a plan]); which GPU is
// the runtime's choice, as in OneFlow and torchrun: the launcher starts one process per rank on
// a host and sets LOCAL_RANK, and that process takes GPU LOCAL_RANK. A process hosting several
// ranks (the in-process cluster) gives them consecutive GPUs. Every GPU is checked when the
// plan loads, so a missing driver or too few GPUs fail before anything runs, naming the rank.
// OFL_CUDA_DEVICE=i overrides LOCAL_RANK: every process of the job then starts at GPU i, which
// is how several ranks share one GPU (a DP2 check on a one-GPU machine). Eager "cuda" starts at
// the same GPU (current_cuda_device in oneflowlike/device.h).
void Runtime::choose_gpus() {
  int next = options_.first_gpu;
  if (next < 0) {
    const LauncherGpu launcher = launcher_gpu();
    OFL_CHECK(launcher.variable == nullptr || launcher.index >= 0, kTag, launcher.variable,
              " must be a GPU index (an integer >= 0). However, got '", launcher.text, "'.");
    next = launcher.variable == nullptr ? 0 : launcher.index;
  }
  std::set<int64_t> on_gpu;  // ranks with GPU tasks
  for (int t = 0; t < index_.num_tasks(); ++t) {
    const proto::TaskProto& task = index_.task(t).proto;
    if (task.device() == proto::PLAN_DEVICE_CUDA) on_gpu.insert(task.rank());
  }
  for (int64_t rank : ranks_) {
    if (!on_gpu.count(rank)) continue;
    const int gpu = next++;
    gpu_of_rank_[rank] = gpu;
    if (options_.simulate_cuda) continue;
    const int count = cuda::device_count();
    OFL_CHECK_CODE(gpu < count, ErrorCode::kUnavailable, kTag, "rank ", rank,
                   " runs tasks on a GPU, so it needs CUDA device ", gpu,
                   ". However, this process sees ", count, " CUDA device", count == 1 ? "" : "s",
                   count == 0 ? str_cat(" (", cuda::why_no_device(), ")") : std::string(), ".");
    cuda::check_device(gpu);
  }
}

// Note [Device collectives] in device_collectives.h: the communicators of the hosted ranks' GPU
// collectives, made once the ranks are served and before any actor runs.
void Runtime::make_device_collectives() {
  bool any = false;
  for (int t = 0; t < index_.num_tasks() && !any; ++t) {
    const proto::TaskProto& task = index_.task(t).proto;
    any = actor_of_task_[t] != nullptr && task.kind() == proto::TaskProto::COLLECTIVE &&
          task.device() == proto::PLAN_DEVICE_CUDA;
  }
  if (!any) return;
  device_collectives_ = std::make_unique<DeviceCollectives>(
      *transport_, index_, ranks_, gpu_of_rank_,
      choose_device_collective_backend(options_.simulate_cuda, options_.deterministic),
      options_.watchdog_seconds);
}

Device Runtime::device_of(int64_t rank, proto::PlanDevice device) const {
  if (device == proto::PLAN_DEVICE_CPU || options_.simulate_cuda) return Device::cpu();
  return Device{DeviceType::kCUDA, gpu_of_rank_.at(rank)};
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
                                  : Tensor::zeros(Shape{stride * num_slots}, DataType::kInt8,
                                                  device_of(rank, reg.proto.device()));
  const int64_t base = in_block ? reg.proto.offset() : 0;
  std::vector<Tensor> slots;
  for (int s = 0; s < num_slots; ++s) {
    slots.push_back(view_of_bytes(storage, base + s * stride, reg.shape, reg.dtype));
  }
  return slots;
}

namespace {

// Note [Repeated views] in compiler/physical/in_place_boxing.h: every micro-batch reads the once
// piece itself, so the piece must come from a variable, a kernel or a copy that is no view,
// nothing may read it through the view and send it (the peer reads after the SEND's act), and
// whatever writes the piece in place must wait for every reader through the view.
void check_repeated_view(const PlanIndex& index, int t) {
  const PlanIndex::TaskInfo& task = index.task(t);
  const int input = task.inputs.at(0);
  const proto::TaskProto& producer = index.task(index.reg(input).producer).proto;
  OFL_CHECK(
      (producer.kind() == proto::TaskProto::VARIABLE ||
       producer.kind() == proto::TaskProto::COMPUTE || producer.kind() == proto::TaskProto::COPY) &&
          !producer.view(),
      kTag, index.describe_task(t),
      " is a view, so its input must come from a VARIABLE, a kernel or a copy that is no "
      "view. However, ",
      index.describe_task(index.reg(input).producer), " makes it.");
  OFL_CHECK(index.reg(input).proto.register_num() <= 1, kTag, index.describe_task(t),
            " is a view, so its input ", index.describe_register(input),
            " must have one slot. However, it has ", index.reg(input).proto.register_num(), ".");
  std::vector<int> readers, pending{task.outputs.at(0)};  // through views
  while (!pending.empty()) {
    const int r = pending.back();
    pending.pop_back();
    const int64_t viewed = index.reg(r).proto.id();
    for (int64_t consumer : index.reg(r).proto.consumers()) {
      const int c = index.task_index(consumer);
      const proto::TaskProto& reader = index.task(c).proto;
      OFL_CHECK(reader.kind() != proto::TaskProto::SEND, kTag, index.describe_task(t),
                " is a view of ", index.describe_register(input),
                ", so no SEND may read it. However, ", index.describe_task(c), " does.");
      OFL_CHECK(!writes_in_place(reader, viewed), kTag, index.describe_task(t), " is a view of ",
                index.describe_register(input), ", so nothing may write it in place. However, ",
                index.describe_task(c), " does.");
      readers.push_back(c);
      if (index.task(c).proto.view()) {
        for (int out : index.task(c).outputs) pending.push_back(out);
      }
    }
  }
  const int64_t input_id = index.reg(input).proto.id();
  for (int64_t consumer : index.reg(input).proto.consumers()) {
    const proto::TaskProto& writer = index.task(index.task_index(consumer)).proto;
    if (!writes_in_place(writer, input_id)) continue;
    for (int reader : readers) {
      const auto& waits = writer.control_inputs();
      if (index.task(reader).proto.id() == writer.id()) continue;
      OFL_CHECK(std::find(waits.begin(), waits.end(), index.task(reader).proto.id()) != waits.end(),
                kTag, index.describe_task(t), " is a view of ", index.describe_register(input),
                ", so ", writer.name(),
                ", which writes it in place, must wait for every reader "
                "of the view. However, it does not wait for ",
                index.describe_task(reader), ".");
    }
  }
}

// A view or an in-place concat keeps its input pieces until its output piece is read, one
// piece per act (Note [Slice views], Note [Concats in place]): its inputs' producers must hand
// out pieces and its output's readers act at its rate, and a view's input must not be
// persistent; a REPEAT view (Note [Repeated views]) reads one once-per-iteration piece in
// every micro-batch, a variable's included. An all-reduce in place (Note [All-reduces in
// place]) must be its input's only reader: it writes the sums there.
void check_borrowing(const PlanIndex& index, int t) {
  const PlanIndex::TaskInfo& task = index.task(t);
  if (!task.proto.view() && !task.proto.in_place()) return;
  const bool rate = index.per_micro(t);
  const bool repeat = task.proto.kind() == proto::TaskProto::REPEAT;
  auto same_rate = [&](int other, bool other_rate, const std::string& what) {
    OFL_CHECK(other_rate == rate, kTag, index.describe_task(t), " is ",
              task.proto.view() ? "a view" : "in place", ", so ", what, " ",
              index.describe_task(other), " must act at its rate (once per ",
              rate ? "micro-batch" : "iteration", ").");
  };
  for (int r : task.inputs) {
    const int producer = index.reg(r).producer;
    if (!repeat) {
      same_rate(producer, outputs_per_micro_batch(index.task(producer).proto), "the producer");
    }
    OFL_CHECK(!task.proto.view() || repeat || !index.reg(r).proto.persistent(), kTag,
              index.describe_task(t), " is a view, so its input ", index.describe_register(r),
              " must not be persistent.");
    const auto& readers = index.reg(r).proto.consumers();
    OFL_CHECK(!task.proto.view() || task.proto.kind() != proto::TaskProto::COLLECTIVE ||
                  (readers.size() == 1 && readers[0] == task.proto.id()),
              kTag, index.describe_task(t), " sums in place, so it must be the only reader of ",
              index.describe_register(r), ". However, it has ", readers.size(), " readers.");
  }
  for (int64_t consumer : index.reg(task.outputs[0]).proto.consumers()) {
    const int c = index.task_index(consumer);
    same_rate(c, index.per_micro(c), "the reader");
  }
  if (repeat) check_repeated_view(index, t);
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
  // Note [Variables bound to the caller's tensors]: pieces the caller may bind get their memory
  // when it binds them (or declines to).
  std::set<int> bindable;  // registers
  for (const std::string& name : options_.bindable_variables) {
    const auto it = index_.variables_by_name().find(name);
    if (it == index_.variables_by_name().end()) continue;  // on ranks of another process's part
    for (int t : it->second) {
      const int r = index_.task(t).outputs.at(0);
      const PlanIndex::RegisterInfo& reg = index_.reg(r);
      if (index_.task(t).proto.rank() == rank && why_register_not_bound(index_, reg).empty()) {
        bindable.insert(r);
        unplaced_variables_.insert(t);
      }
    }
  }
  std::map<int, std::vector<Tensor>> slots;
  for (int r : order) {
    const PlanIndex::RegisterInfo& reg = index_.reg(r);
    const int num_slots = std::max(1, reg.proto.register_num());
    if (reg.proto.fresh_each_piece()) {  // Note [Fetched pieces are handed over]
      const proto::TaskProto& producer = index_.task(reg.producer).proto;
      OFL_CHECK(!reg.proto.persistent() && reg.proto.device() == proto::PLAN_DEVICE_CPU &&
                    !producer.view() && !producer.in_place() && !written_into.count(r) &&
                    producer.kind() != proto::TaskProto::RECV,
                kTag, index_.describe_register(r),
                " is fresh each piece, so it must be a transient host register its producer "
                "writes in memory of its own (not a view, an in-place concat or a receive).");
    }
    OFL_CHECK(!reg.proto.handed_in() ||
                  (index_.task(reg.producer).proto.kind() == proto::TaskProto::INPUT &&
                   reg.proto.device() == proto::PLAN_DEVICE_CPU),
              kTag, index_.describe_register(r),
              " is handed in, so it must be a host INPUT task's register.");
    // Note [Donated pieces]: the caller's memory, fed or viewed, never the plan's.
    const PlanIndex::TaskInfo& producer = index_.task(reg.producer);
    OFL_CHECK(!reg.proto.donated() ||
                  (!written_into.count(r) && ((reg.proto.handed_in() && producer.proto.donates()) ||
                                              (producer.proto.view() && !producer.inputs.empty() &&
                                               index_.reg(producer.inputs[0]).proto.donated()))),
              kTag, index_.describe_register(r),
              " is donated, so it must be a donating INPUT's handed-in register or a view of a "
              "donated register.");
    if (index_.task(reg.producer).proto.view() || reg.proto.fresh_each_piece() ||
        reg.proto.handed_in() || bindable.count(r)) {
      // Note [Slice views]: each piece is a view of the SLICE's input piece, made when it acts;
      // Note [Fetched pieces are handed over]: new memory, taken when the producer claims a slot;
      // Note [Fed pieces are handed in]: the caller's piece, or new memory, set when it acts;
      // Note [Variables bound to the caller's tensors]: the caller's, or memory when it declines.
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
    if (reg.proto.fresh_each_piece()) {
      out.fresh = true;
      out.shape = reg.shape;
      out.dtype = reg.dtype;
    }
    out.drops_pieces = reg.proto.fresh_each_piece() || reg.proto.handed_in() || reg.proto.donated();
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
      // An INPUT reads the caller's feed of its iteration, which exists only once this
      // process's run of it has started, and a VARIABLE hands out state the caller reads and
      // writes between runs: they wait for the tick even where the plan orders them after
      // other tasks (control inputs), whose data may come early from another process (Note
      // [Iterations across processes]). Without it such an INPUT read a feed not there.
      const proto::TaskProto::Kind kind = index_.task(t).proto.kind();
      const bool per_run = kind == proto::TaskProto::INPUT || kind == proto::TaskProto::VARIABLE;
      if (!actor->inputs().empty() && !per_run) continue;
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

}  // namespace ofl::actor
