// The reference executor (Note [Reference execution] in the header). Every check that a plan is
// well formed happens in PlanIndex when the plan is loaded, so run() only moves data, and it
// moves it with the helpers the actor runtime uses too (actor/pieces.h).

#include "actor/reference_executor.h"

#include <algorithm>
#include <cstring>

#include "actor/pieces.h"
#include "oneflowlike/collective.h"

namespace ofl::actor {

ReferenceExecutor::ReferenceExecutor(proto::PlanProto plan)
    : index_(plan, PlanIndexOptions{.cpu_kernels = true}) {
  for (const TaskInfo& task : index_.tasks()) {
    for (size_t m = 0; m < task.peers.size(); ++m) {
      OFL_CHECK(task.peers[m] >= 0, "[reference executor] runs whole plans, so every member of ",
                index_.describe_task(index_.task_index(task.proto.id())),
                " must be in the plan. However, rank ", task.proto.collective().members(m),
                " is not.");
    }
  }
  compute_schedule();
  values_.resize(index_.num_registers());
  in_flight_.resize(index_.num_tasks());
  // Variables read as zeros until initialize_variables() or write_variable().
  for (const auto& [name, pieces] : index_.variables_by_name()) {
    for (int t : pieces) {
      const PlanIndex::RegisterInfo& reg = index_.reg(index_.task(t).outputs[0]);
      values_[index_.task(t).outputs[0]] = Tensor::zeros(reg.shape, reg.dtype);
    }
  }
}

// The execution order (Note [Reference execution] in the header): the once tasks before the
// micro-batches, the per-micro-batch tasks for each micro-batch, the once tasks after them.
void ReferenceExecutor::compute_schedule() {
  const int n = index_.num_tasks();
  std::vector<bool> before(n), micro(n), after(n);
  for (int t = 0; t < n; ++t) {
    micro[t] = index_.per_micro(t);
    after[t] = index_.task(t).after_micro_batches;
    before[t] = !micro[t] && !after[t];
  }
  for (int t : index_.order_tasks(before)) schedule_.push_back(Step{t, 0});
  const std::vector<int> micro_order = index_.order_tasks(micro);
  for (int k = 0; k < index_.micro_batches(); ++k) {
    for (int t : micro_order) schedule_.push_back(Step{t, k});
  }
  for (int t : index_.order_tasks(after)) schedule_.push_back(Step{t, 0});
  OFL_ASSERT(static_cast<int>(schedule_.size()) ==
             n + (index_.micro_batches() - 1) * static_cast<int>(micro_order.size()));
}

void ReferenceExecutor::initialize_variables() {
  for (const auto& [name, pieces] : index_.variables_by_name()) {
    for (int t : pieces) initialize_variable_piece(index_, t, variable_piece(t));
  }
}

std::map<std::string, Tensor> ReferenceExecutor::run(const std::map<std::string, Tensor>& inputs) {
  check_fed_inputs(index_, inputs);
  std::vector<std::pair<int, Tensor>> fetched;
  for (const Step& step : schedule_) act(step.task, step.micro_batch, inputs, &fetched);
  ++iteration_;
  std::map<std::string, Tensor> results = assemble_outputs(index_, fetched);
  // Free this iteration's registers; variables keep theirs.
  for (int r = 0; r < index_.num_registers(); ++r) {
    if (index_.task(index_.reg(r).producer).proto.kind() != proto::TaskProto::VARIABLE) {
      values_[r] = Tensor();
    }
  }
  return results;
}

void ReferenceExecutor::act(int t, int micro_batch, const std::map<std::string, Tensor>& inputs,
                            std::vector<std::pair<int, Tensor>>* fetched) {
  const TaskInfo& task = index_.task(t);
  auto fresh = [&](int i) {
    const PlanIndex::RegisterInfo& reg = index_.reg(task.outputs[i]);
    return Tensor::empty(reg.shape, reg.dtype);
  };
  switch (task.proto.kind()) {
    case proto::TaskProto::INPUT: {
      Tensor out = fresh(0);
      feed_input_piece(index_, t, inputs, out);
      values_[task.outputs[0]] = out;
      break;
    }
    case proto::TaskProto::VARIABLE:
      break;  // its register holds the value across iterations
    case proto::TaskProto::OUTPUT:
      // A snapshot: a later in-place update must not change what was fetched.
      fetched->emplace_back(t, values_[task.inputs[0]].clone());
      break;
    case proto::TaskProto::COMPUTE:
      run_compute(task, t, micro_batch);
      break;
    case proto::TaskProto::SLICE: {
      Tensor out = fresh(0);
      copy_region(values_[task.inputs[0]], task.regions[0], out, whole_region(out.shape()));
      values_[task.outputs[0]] = out;
      break;
    }
    case proto::TaskProto::SEND:
      in_flight_[t] = values_[task.inputs[0]].clone();
      break;
    case proto::TaskProto::RECV:
      values_[task.outputs[0]] = std::move(in_flight_[task.send]);
      in_flight_[task.send] = Tensor();
      break;
    case proto::TaskProto::COLLECTIVE:
      if (!in_flight_[t].defined()) run_collective(task);
      values_[task.outputs[0]] = std::move(in_flight_[t]);
      in_flight_[t] = Tensor();
      break;
    case proto::TaskProto::ADD: {
      Tensor out = values_[task.inputs[0]].clone();
      for (size_t i = 1; i < task.inputs.size(); ++i) {
        add_region(values_[task.inputs[i]], whole_region(out.shape()), out,
                   whole_region(out.shape()));
      }
      values_[task.outputs[0]] = out;
      break;
    }
    case proto::TaskProto::CONCAT: {
      const PlanIndex::RegisterInfo& reg = index_.reg(task.outputs[0]);
      Tensor out = Tensor::zeros(reg.shape, reg.dtype);
      for (size_t i = 0; i < task.inputs.size(); ++i) {
        const Tensor& in = values_[task.inputs[i]];
        copy_region(in, whole_region(in.shape()), out, task.regions[i]);
      }
      values_[task.outputs[0]] = out;
      break;
    }
    case proto::TaskProto::ZEROS: {
      const PlanIndex::RegisterInfo& reg = index_.reg(task.outputs[0]);
      values_[task.outputs[0]] = Tensor::zeros(reg.shape, reg.dtype);
      break;
    }
    case proto::TaskProto::COPY:
    case proto::TaskProto::COPY_H2D:  // the reference keeps every register on the host
    case proto::TaskProto::COPY_D2H: {
      Tensor out = fresh(0);
      std::memcpy(out.raw_data(), values_[task.inputs[0]].raw_data(), out.nbytes());
      values_[task.outputs[0]] = out;
      break;
    }
    case proto::TaskProto::UNPACK: {  // rows [k * r0, (k + 1) * r0) of the whole batch
      Tensor out = fresh(0);
      const char* in = static_cast<const char*>(values_[task.inputs[0]].raw_data());
      std::memcpy(out.raw_data(), in + micro_batch * out.nbytes(), out.nbytes());
      values_[task.outputs[0]] = out;
      break;
    }
    case proto::TaskProto::REPEAT:
      // A copy, so that a micro-batch writing its input in place cannot change the once value
      // (the runtime's REPEAT views, Note [Repeated views], are where no reader writes it).
      values_[task.outputs[0]] = values_[task.inputs[0]].clone();
      break;
    case proto::TaskProto::ACCUMULATE: {  // the running sum lives in the output register
      const Tensor& in = values_[task.inputs[0]];
      if (micro_batch == 0) {
        values_[task.outputs[0]] = in.clone();
      } else {
        add_region(in, whole_region(in.shape()), values_[task.outputs[0]],
                   whole_region(in.shape()));
      }
      break;
    }
    case proto::TaskProto::PACK: {  // row k of (m, *shape)
      const Tensor& in = values_[task.inputs[0]];
      if (micro_batch == 0) values_[task.outputs[0]] = fresh(0);
      char* out = static_cast<char*>(values_[task.outputs[0]].raw_data());
      std::memcpy(out + micro_batch * in.nbytes(), in.raw_data(), in.nbytes());
      break;
    }
    default:
      OFL_ASSERT(false) << "kinds are checked when the plan is loaded";
  }
  if (planned_memory_) place_in_blocks(task);
}

void ReferenceExecutor::use_planned_memory() {
  for (const auto& [key, block] : index_.memory_blocks()) {  // all on the host here
    blocks_[key] = Tensor::zeros(Shape{block.bytes}, DataType::kInt8);
  }
  planned_memory_ = true;
}

// Moves each output that lives in a memory block into the block, and has later readers read it
// from there (use_planned_memory).
void ReferenceExecutor::place_in_blocks(const TaskInfo& task) {
  for (int r : task.outputs) {
    const PlanIndex::RegisterInfo& reg = index_.reg(r);
    if (reg.proto.memory_block() < 0 || !values_[r].defined()) continue;
    const Tensor view = view_of_bytes(blocks_.at({reg.rank, reg.proto.memory_block()}),
                                      reg.proto.offset(), reg.shape, reg.dtype);
    if (!view.shares_storage_with(values_[r]) || view.raw_data() != values_[r].raw_data()) {
      std::memcpy(view.raw_data(), values_[r].raw_data(), view.nbytes());
    }
    values_[r] = view;
  }
}

// Inputs are the registers themselves, so mutated inputs (optimizer updates) write in place.
void ReferenceExecutor::run_compute(const TaskInfo& task, int index, int micro_batch) {
  std::vector<Tensor> inputs;
  for (int r : task.inputs) inputs.push_back(values_[r]);
  std::vector<Tensor> outputs;
  for (int r : task.outputs) {
    outputs.push_back(Tensor::empty(index_.reg(r).shape, index_.reg(r).dtype));
  }
  const size_t temp_bytes = kernel_temp_bytes(index_, index);
  Tensor temp;
  if (temp_bytes > 0)
    temp = Tensor::empty(Shape{static_cast<int64_t>(temp_bytes)}, DataType::kInt8);
  const uint64_t random_stream =
      static_cast<uint64_t>(iteration_ * index_.micro_batches() + micro_batch);
  run_kernel(task, inputs, outputs, random_stream, temp_bytes > 0 ? temp.raw_data() : nullptr,
             temp_bytes);
  for (size_t i = 0; i < task.outputs.size(); ++i) values_[task.outputs[i]] = outputs[i];
}

// Every member's result of `task`'s collective, into in_flight_ (Note [Reference execution] in
// the header). The first member acts after the producers of every member's input and before any
// member has read its input, so with planned memory the inputs are still intact.
void ReferenceExecutor::run_collective(const TaskInfo& task) {
  const proto::CollectiveProto& c = task.proto.collective();
  const int64_t n = static_cast<int64_t>(task.peers.size());
  // Chunks of the flat elements (axis -1) are ranges of 1-d views; a broadcast's and a grouped
  // send/recv's regions are of the registers' own shapes.
  const bool flat = c.axis() < 0 && c.op() != proto::CollectiveProto::BROADCAST &&
                    c.op() != proto::CollectiveProto::SEND_RECV;
  auto chunkable = [&](const Tensor& x) {
    return flat ? view_of_bytes(x, 0, Shape{x.numel()}, x.dtype()) : x;
  };
  std::vector<Tensor> inputs, outputs;  // by member index
  for (int peer : task.peers) {
    const TaskInfo& member = index_.task(peer);
    // A broadcast's members other than the root read nothing.
    inputs.push_back(member.inputs.empty() ? Tensor() : chunkable(values_[member.inputs[0]]));
    const PlanIndex::RegisterInfo& out = index_.reg(member.outputs[0]);
    in_flight_[peer] = Tensor::empty(out.shape, out.dtype);
    outputs.push_back(chunkable(in_flight_[peer]));
  }
  if (c.op() == proto::CollectiveProto::BROADCAST) {
    const Tensor& root = inputs[c.root()];
    for (const Tensor& out : outputs) {
      copy_region(root, whole_region(root.shape()), out, whole_region(out.shape()));
    }
    return;
  }
  if (c.op() == proto::CollectiveProto::SEND_RECV) {  // each receive from its sender's block
    for (int64_t m = 0; m < n; ++m) {
      const proto::CollectiveProto& mine = index_.task(task.peers[m]).proto.collective();
      for (const CollectiveBlock& r : collective_blocks(mine, m, Shape{}, Shape{}).receives) {
        const proto::CollectiveProto& theirs = index_.task(task.peers[r.member]).proto.collective();
        for (const CollectiveBlock& b :
             collective_blocks(theirs, r.member, Shape{}, Shape{}).sends) {
          if (b.member == m) copy_region(inputs[r.member], b.region, outputs[m], r.region);
        }
      }
    }
    return;
  }
  const Shape whole_shape = collective_whole(c, inputs[0].shape(), outputs[0].shape());
  const std::vector<std::vector<Range>> chunks = collective_chunks(whole_shape, c.axis(), n);
  if (c.op() == proto::CollectiveProto::ALL_TO_ALL) {  // the whole from the inputs, re-cut
    Tensor all = Tensor::empty(whole_shape, inputs[0].dtype());
    for (int64_t j = 0; j < n; ++j)
      copy_region(inputs[j], whole_region(inputs[j].shape()), all, chunks[j]);
    const auto out_chunks = collective_chunks(whole_shape, c.out_axis(), n);
    for (int64_t j = 0; j < n; ++j) {
      copy_region(all, out_chunks[j], outputs[j], whole_region(outputs[j].shape()));
    }
    return;
  }
  if (c.op() == proto::CollectiveProto::ALL_GATHER) {
    for (int64_t j = 0; j < n; ++j) {
      for (const Tensor& out : outputs)
        copy_region(inputs[j], whole_region(inputs[j].shape()), out, chunks[j]);
    }
    return;
  }
  if (c.algorithm() == proto::CollectiveProto::RECURSIVE_DOUBLING) {  // one tree, every member
    std::vector<Tensor> partial;
    for (const Tensor& x : inputs) partial.push_back(x.clone());
    for (const auto& [into, from] : recursive_doubling_adds(n)) {
      sum_into({partial[into], partial[from]}, partial[into]);
    }
    for (const Tensor& out : outputs) sum_into({partial[0]}, out);
    return;
  }
  for (int64_t j = 0; j < n; ++j) {  // (((x[j+1] + x[j+2]) + ...) + x[j]) over chunk j
    const std::vector<int64_t> order = ring_sum_order(j, n);
    Tensor sum = Tensor::empty(region_shape(chunks[j]), inputs[0].dtype());
    copy_region(inputs[order[0]], chunks[j], sum, whole_region(sum.shape()));
    for (int64_t k = 1; k < n; ++k)
      add_region(inputs[order[k]], chunks[j], sum, whole_region(sum.shape()));
    if (c.op() == proto::CollectiveProto::REDUCE_SCATTER) {
      copy_region(sum, whole_region(sum.shape()), outputs[j], whole_region(outputs[j].shape()));
    } else {
      for (const Tensor& out : outputs) copy_region(sum, whole_region(sum.shape()), out, chunks[j]);
    }
  }
}

Tensor ReferenceExecutor::read_variable(const std::string& name) const {
  return actor::read_variable(index_, name, [&](int t) { return variable_piece(t); });
}

void ReferenceExecutor::write_variable(const std::string& name, const Tensor& value) {
  actor::write_variable(index_, name, value, [&](int t) { return variable_piece(t); });
}

std::vector<std::string> ReferenceExecutor::schedule() const {
  std::vector<std::string> names;
  for (const Step& step : schedule_) {
    const std::string& name = index_.task(step.task).proto.name();
    names.push_back(index_.micro_batches() > 1 && index_.per_micro(step.task)
                        ? str_cat(name, "#", step.micro_batch)
                        : name);
  }
  return names;
}

}  // namespace ofl::actor
