#pragma once
// PlanBuilder: hand-made PlanProtos for executor tests, built task by task with the registers'
// producer and consumers kept in step, so a test can build exactly the plan it needs (a cycle, a
// transfer with a wrong shape, a micro-batch crossing) without the compiler.
//
//   PlanBuilder b(/*world_size=*/2);
//   const int64_t x = b.input(0, "x", Shape{4, 3});
//   const int64_t y = b.reg(0, "y", Shape{4, 3});
//   b.compute(0, "relu", "relu", NoParams{}, {x}, {y});
//   b.output(0, "y", y, Shape{4, 3});
//   actor::ReferenceExecutor executor(b.plan());

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "actor/pieces.h"
#include "oneflowlike/collective.h"
#include "oneflowlike/op.h"
#include "oneflowlike/proto/plan.pb.h"
#include "oneflowlike/proto_convert.h"
#include "oneflowlike/sbp.h"

namespace ofl::testing {

/// Builds a PlanProto task by task, keeping registers' producer and consumers in step. Task and
/// register ids come from one counter, in creation order.
class PlanBuilder {
 public:
  /// A plan with ranks 0 .. world_size - 1 and no tasks.
  explicit PlanBuilder(int world_size) {
    plan_.set_world_size(world_size);
    for (int r = 0; r < world_size; ++r) plan_.add_ranks()->set_rank(r);
  }

  /// A new register on `rank` (no producer yet, its own memory); returns its id.
  int64_t reg(int rank, const std::string& name, const Shape& shape,
              DataType dtype = DataType::kFloat32, bool persistent = false) {
    proto::RegisterProto* r = plan_.mutable_ranks(rank)->add_registers();
    const int64_t id = next_id_++;
    r->set_id(id);
    r->set_name(name);
    to_proto(shape, r->mutable_shape());
    r->set_dtype(dtype_name(dtype));
    r->set_producer(-1);
    r->set_register_num(1);
    r->set_memory_block(-1);
    r->set_bytes(shape.numel() * static_cast<int64_t>(dtype_size(dtype)));
    r->set_persistent(persistent);
    where_[id] = {rank, plan_.ranks(rank).registers_size() - 1};
    return id;
  }

  /// A task of `kind` on `rank` reading and writing the registers of these ids, which it joins
  /// as consumer and producer.
  proto::TaskProto* task(int rank, const std::string& name, proto::TaskProto::Kind kind,
                         const std::vector<int64_t>& inputs, const std::vector<int64_t>& outputs) {
    proto::TaskProto* t = plan_.mutable_ranks(rank)->add_tasks();
    t->set_id(next_id_++);
    t->set_name(name);
    t->set_rank(rank);
    t->set_kind(kind);
    for (int64_t r : inputs) {
      t->add_inputs(r);
      find(r)->add_consumers(t->id());
    }
    for (int64_t r : outputs) {
      t->add_outputs(r);
      find(r)->set_producer(t->id());
    }
    return t;
  }

  /// The register of id `id`, to change it.
  proto::RegisterProto* find(int64_t id) {
    auto [rank, index] = where_.at(id);
    return plan_.mutable_ranks(rank)->mutable_registers(index);
  }

  /// The task that writes register `id`, to change it.
  proto::TaskProto* find_task_of(int64_t id) {
    const int64_t producer = find(id)->producer();
    for (proto::RankPlanProto& rank : *plan_.mutable_ranks()) {
      for (proto::TaskProto& t : *rank.mutable_tasks()) {
        if (t.id() == producer) return &t;
      }
    }
    return nullptr;
  }

  /// Makes `t` hold the piece of `logical` at `region` (empty: all of it).
  static void set_piece(proto::TaskProto* t, const Shape& logical,
                        const std::vector<Range>& region) {
    to_proto(logical, t->mutable_logical_output_shape());
    for (const Range& r : region) {
      proto::RangeProto* p = t->add_output_region();
      p->set_begin(r.begin);
      p->set_end(r.end);
    }
  }

  /// INPUT `name` on `rank` holding `region` of `logical`; returns its register.
  int64_t input(int rank, const std::string& name, const Shape& logical,
                const std::vector<Range>& region = {}, DataType dtype = DataType::kFloat32) {
    const int64_t r = reg(rank, name + "@" + std::to_string(rank),
                          region.empty() ? logical : ofl::region_shape(region), dtype);
    proto::TaskProto* t = task(rank, "input_" + name, proto::TaskProto::INPUT, {}, {r});
    t->set_logical_op(name);
    t->set_contributes(true);
    set_piece(t, logical, region);
    return r;
  }

  /// VARIABLE `name` on `rank` holding `region` of `logical` (empty: all of it), initialised by
  /// `init` with parameters a, b and seed; returns its persistent register.
  int64_t variable(int rank, const std::string& name, const Shape& logical,
                   const std::vector<Range>& region, proto::InitializerProto::Kind init,
                   double a = 0.0, double b = 1.0, int64_t seed = 0) {
    const int64_t r = reg(rank, name + "@" + std::to_string(rank),
                          region.empty() ? logical : ofl::region_shape(region), DataType::kFloat32,
                          /*persistent=*/true);
    proto::TaskProto* t = task(rank, "variable_" + name, proto::TaskProto::VARIABLE, {}, {r});
    t->set_logical_op(name);
    set_piece(t, logical, region);
    t->mutable_initializer()->set_kind(init);
    t->mutable_initializer()->set_a(a);
    t->mutable_initializer()->set_b(b);
    t->mutable_initializer()->set_seed(seed);
    return r;
  }

  /// OUTPUT of logical name `name` on `rank`, fetching register `reg` as `region` of `logical`.
  proto::TaskProto* output(int rank, const std::string& name, int64_t reg, const Shape& logical,
                           const std::vector<Range>& region = {}, bool contributes = true) {
    proto::TaskProto* t = task(rank, "output_" + name + "@" + std::to_string(rank),
                               proto::TaskProto::OUTPUT, {reg}, {});
    t->set_logical_op(name);
    t->set_contributes(contributes);
    set_piece(t, logical, region);
    return t;
  }

  /// COMPUTE task running op `op_type` with `params`.
  proto::TaskProto* compute(int rank, const std::string& name, const std::string& op_type,
                            const AnyParams& params, const std::vector<int64_t>& inputs,
                            const std::vector<int64_t>& outputs) {
    proto::TaskProto* t = task(rank, name, proto::TaskProto::COMPUTE, inputs, outputs);
    t->set_op_type(op_type);
    params_to_proto(OpRegistry::global().find(op_type), params, t->mutable_params());
    return t;
  }

  /// A SEND of `reg` from `from` and its RECV into a new register on `to`; returns the RECV and
  /// its register.
  std::pair<proto::TaskProto*, int64_t> send_recv(int from, int to, int64_t reg,
                                                  int64_t transfer_id,
                                                  bool per_micro_batch = false) {
    const proto::RegisterProto* r = find(reg);
    const int64_t out = this->reg(to, r->name() + "->" + std::to_string(to), from_proto(r->shape()),
                                  dtype_from_name(r->dtype()));
    proto::TaskProto* send =
        task(from, "send_" + std::to_string(transfer_id), proto::TaskProto::SEND, {reg}, {});
    send->set_peer(to);
    send->set_transfer_id(transfer_id);
    proto::TaskProto* recv =
        task(to, "recv_" + std::to_string(transfer_id), proto::TaskProto::RECV, {}, {out});
    recv->set_peer(from);
    recv->set_transfer_id(transfer_id);
    send->set_per_micro_batch(per_micro_batch);
    recv->set_per_micro_batch(per_micro_batch);
    return {recv, out};
  }

  /// A COLLECTIVE over `members` (ranks in ring order): on each members[m] a task reading
  /// inputs[m] and writing a new register of the shape the op gives it (Note [Collective
  /// tasks] in oneflowlike/collective.h), made by `logical_op`. The collective gets the next
  /// collective id and the next sequence number of its communicator; returns the output
  /// registers by member (find_task_of gives the tasks, to change them).
  /// An all-to-all's inputs are its chunks along `axis`; its outputs are split along out_axis.
  std::vector<int64_t> collective(proto::CollectiveProto::Op op, const std::vector<int>& members,
                                  const std::vector<int64_t>& inputs, int axis = -1,
                                  const std::string& logical_op = "boxing",
                                  const std::string& communicator = "test communicator",
                                  int out_axis = 0) {
    const int64_t n = static_cast<int64_t>(members.size());
    std::vector<int64_t> key(members.begin(), members.end());
    const int64_t id = next_collective_id_;
    next_collective_id_ += collective_ids(op, n, algorithm_);
    const int64_t sequence = sequences_[key]++;
    // The whole tensor: a reduction's input, a gather's inputs joined along the axis.
    Shape whole_shape = from_proto(find(inputs[0])->shape());
    if (op == proto::CollectiveProto::ALL_GATHER || op == proto::CollectiveProto::ALL_TO_ALL) {
      int64_t total = 0;
      for (int64_t r : inputs) {
        const Shape s = from_proto(find(r)->shape());
        total += axis < 0 ? s.numel() : s[axis];
      }
      if (axis < 0) {
        whole_shape = Shape{total};
      } else {
        whole_shape[axis] = total;
      }
    }
    const std::vector<std::vector<Range>> chunks = collective_chunks(whole_shape, axis, n);
    std::vector<int64_t> outputs;
    for (int64_t m = 0; m < n; ++m) {
      const int rank = members[m];
      Shape out_shape = whole_shape;
      if (op == proto::CollectiveProto::ALL_REDUCE)
        out_shape = from_proto(find(inputs[m])->shape());
      if (op == proto::CollectiveProto::REDUCE_SCATTER) out_shape = ofl::region_shape(chunks[m]);
      if (op == proto::CollectiveProto::ALL_TO_ALL) {
        out_shape = ofl::region_shape(collective_chunks(whole_shape, out_axis, n)[m]);
      }
      const std::string name = str_cat(collective_op_name(op), "_", id, "@", rank);
      const int64_t out = reg(rank, name, out_shape, dtype_from_name(find(inputs[m])->dtype()));
      proto::TaskProto* t = task(rank, name, proto::TaskProto::COLLECTIVE, {inputs[m]}, {out});
      t->set_logical_op(logical_op);
      proto::CollectiveProto* c = t->mutable_collective();
      c->set_op(op);
      for (int r : members) c->add_members(r);
      c->set_communicator(communicator);
      c->set_collective_id(id);
      c->set_sequence(sequence);
      c->set_axis(axis);
      if (op == proto::CollectiveProto::ALL_TO_ALL) c->set_out_axis(out_axis);
      c->set_algorithm(algorithm_);
      outputs.push_back(out);
    }
    return outputs;
  }

  /// A BROADCAST over ranks `members` from member `root`, which alone reads `input` (Note
  /// [Broadcast] in oneflowlike/collective.h); returns the output registers (the input's shape)
  /// by member.
  std::vector<int64_t> broadcast(const std::vector<int>& members, int root, int64_t input,
                                 const std::string& logical_op = "boxing",
                                 const std::string& communicator = "test communicator") {
    const Shape shape = from_proto(find(input)->shape());
    const DataType dtype = dtype_from_name(find(input)->dtype());
    return add_collective(
        proto::CollectiveProto::BROADCAST, members, logical_op, communicator,
        [&](int64_t m, proto::CollectiveProto* c, std::vector<int64_t>* in, int64_t* out) {
          c->set_root(root);
          c->set_axis(-1);
          if (m == root) in->push_back(input);
          *out = reg(members[m], str_cat("broadcast@", members[m]), shape, dtype);
        });
  }

  /// A grouped SEND_RECV over ranks `members` (Note [Grouped send/recv] in
  /// oneflowlike/collective.h): member m reads inputs[m], writes a register of out_shapes[m] and
  /// moves blocks[m]; returns the output registers by member.
  std::vector<int64_t> send_recv(const std::vector<int>& members,
                                 const std::vector<int64_t>& inputs,
                                 const std::vector<Shape>& out_shapes,
                                 const std::vector<CollectiveBlocks>& blocks,
                                 const std::string& logical_op = "boxing",
                                 const std::string& communicator = "test communicator") {
    return add_collective(
        proto::CollectiveProto::SEND_RECV, members, logical_op, communicator,
        [&](int64_t m, proto::CollectiveProto* c, std::vector<int64_t>* in, int64_t* out) {
          c->set_axis(-1);
          for (const auto& [list, to] : {std::pair{&blocks[m].sends, c->mutable_sends()},
                                         std::pair{&blocks[m].receives, c->mutable_receives()}}) {
            for (const CollectiveBlock& block : *list) {
              proto::CollectiveBlockProto* p = to->Add();
              p->set_member(block.member);
              add_ranges(block.region, p->mutable_region());
            }
          }
          in->push_back(inputs[m]);
          *out = reg(members[m], str_cat("send_recv@", members[m]), out_shapes[m],
                     dtype_from_name(find(inputs[m])->dtype()));
        });
  }

  /// The algorithm of the collectives made from now on (ring until set; the compiler chooses by
  /// size, collective_algorithm).
  void set_collective_algorithm(proto::CollectiveProto::Algorithm algorithm) {
    algorithm_ = algorithm;
  }

  /// m micro-batches per iteration (Note [Micro-batches] in plan.proto).
  void set_micro_batches(int m) { plan_.set_micro_batches(m); }

  /// A micro-batched INPUT: its register holds `region` of each of the m micro-batches of
  /// logical shape `micro`, (m * r0, r1, ...). Call set_micro_batches first.
  int64_t batched_input(int rank, const std::string& name, const Shape& micro,
                        const std::vector<Range>& region = {}) {
    const int64_t r = input(rank, name, micro, region);
    std::vector<int64_t> dims = region.empty() ? micro.dims() : ofl::region_shape(region).dims();
    dims[0] *= plan_.micro_batches();
    to_proto(Shape(dims), find(r)->mutable_shape());
    find(r)->set_bytes(Shape(dims).numel() * static_cast<int64_t>(dtype_size(DataType::kFloat32)));
    return r;
  }

  /// A per-micro-batch task of `kind` reading `in` and writing a new register of `shape`;
  /// returns that register.
  int64_t micro_task(int rank, const std::string& name, proto::TaskProto::Kind kind, int64_t in,
                     const Shape& shape) {
    const proto::RegisterProto* r = find(in);
    const int64_t out = reg(rank, name, shape, dtype_from_name(r->dtype()));
    task(rank, name, kind, {in}, {out})->set_per_micro_batch(true);
    return out;
  }

  /// The plan built so far.
  const proto::PlanProto& plan() const { return plan_; }

 private:
  proto::PlanProto plan_;
  int64_t next_id_ = 0;
  std::map<int64_t, std::pair<int, int>> where_;  // register id -> (rank, index)
  // One COLLECTIVE task per member of `op`, numbered as the compiler does; `fill(m, collective,
  // inputs, output)` sets member m's op-specific fields, its inputs and its output register.
  template <class Fill>
  std::vector<int64_t> add_collective(proto::CollectiveProto::Op op,
                                      const std::vector<int>& members,
                                      const std::string& logical_op,
                                      const std::string& communicator, Fill fill) {
    const int64_t n = static_cast<int64_t>(members.size());
    const int64_t id = next_collective_id_;
    next_collective_id_ += collective_ids(op, n, algorithm_);
    const int64_t sequence = sequences_[std::vector<int64_t>(members.begin(), members.end())]++;
    std::vector<int64_t> outputs;
    for (int64_t m = 0; m < n; ++m) {
      proto::CollectiveProto c;
      c.set_op(op);
      for (int r : members) c.add_members(r);
      c.set_communicator(communicator);
      c.set_collective_id(id);
      c.set_sequence(sequence);
      c.set_algorithm(algorithm_);
      std::vector<int64_t> in;
      int64_t out = -1;
      fill(m, &c, &in, &out);
      proto::TaskProto* t =
          task(members[m], str_cat(collective_op_name(op), "_", id, "@", members[m]),
               proto::TaskProto::COLLECTIVE, in, {out});
      t->set_logical_op(logical_op);
      *t->mutable_collective() = std::move(c);
      outputs.push_back(out);
    }
    return outputs;
  }

  int64_t next_collective_id_ = 0;
  proto::CollectiveProto::Algorithm algorithm_ = proto::CollectiveProto::RING;
  std::map<std::vector<int64_t>, int64_t> sequences_;  // members -> next sequence number
};

/// Appends `r` to a SLICE task's slice (concat = false) or a CONCAT task's concat_regions.
inline void add_range(proto::TaskProto* t, Range r, bool concat) {
  proto::RangeProto* p = concat ? t->add_concat_regions() : t->add_slice();
  p->set_begin(r.begin);
  p->set_end(r.end);
}

}  // namespace ofl::testing
