// COLLECTIVE tasks on the actor runtime (Note [Collective engine] in actor/collective_engine.h):
// every op on 2 to 4 members, along contiguous and strided axes, with uneven chunks cut into
// many pieces (and all-to-alls), gives the reference executor's values bit for bit (the ring's sum
// order) in deterministic, threaded and streamed mode, and the mathematical sums within rounding.
// The same collectives on GPUs (Note [Device collectives] in actor/device_collectives.h): the
// simulated backend everywhere (bit for bit, in member 0's order), NCCL where there are GPUs
// enough (within rounding: NCCL sums in its own order).

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>

#include "actor/pieces.h"
#include "actor/runtime.h"
#include "oneflowlike/collective.h"
#include "oneflowlike/cuda/device.h"
#include "oneflowlike/proto_convert.h"
#include "tests/cpp/actor/plan_builder.h"
#include "tests/cpp/actor/run_everywhere.h"
#include "tests/cpp/ops/test_util.h"

namespace ofl::actor {
namespace {

using Op = proto::CollectiveProto;
using ofl::testing::PlanBuilder;
using ofl::testing::random_tensor;
using ofl::testing::run_everywhere;
using ofl::testing::values_of;

// Sets OFL_COLLECTIVE_PIECE_BYTES for its lifetime.
class PieceBytes {
 public:
  explicit PieceBytes(int bytes) {
    setenv("OFL_COLLECTIVE_PIECE_BYTES", str_cat(bytes).c_str(), 1);
  }
  ~PieceBytes() { unsetenv("OFL_COLLECTIVE_PIECE_BYTES"); }
};

std::vector<Range> whole_region_of(const Shape& shape) { return ofl::whole_region(shape); }

// Sets OFL_SIMULATE_CUDA for its lifetime.
class SimulateCuda {
 public:
  SimulateCuda() { setenv("OFL_SIMULATE_CUDA", "1", 1); }
  ~SimulateCuda() { unsetenv("OFL_SIMULATE_CUDA"); }
};

struct Case {
  Op::Op op;
  int axis;
  int out_axis = 0;  // all-to-all
  Op::Algorithm algorithm = Op::RING;
  // An all-to-all run as the grouped send/recv of its blocks (Note [Grouped send/recv]).
  bool grouped = false;
};

// Turns the all-to-all whose outputs are `outputs` into a SEND_RECV of the same blocks.
void make_grouped(PlanBuilder& b, const std::vector<int64_t>& inputs,
                  const std::vector<int64_t>& outputs) {
  for (size_t m = 0; m < outputs.size(); ++m) {
    proto::CollectiveProto& c = *b.find_task_of(outputs[m])->mutable_collective();
    const CollectiveBlocks blocks =
        collective_blocks(c, static_cast<int64_t>(m), from_proto(b.find(inputs[m])->shape()),
                          from_proto(b.find(outputs[m])->shape()));
    c.set_op(Op::SEND_RECV);
    for (const auto& [list, to] : {std::pair{&blocks.sends, c.mutable_sends()},
                                   std::pair{&blocks.receives, c.mutable_receives()}}) {
      for (const CollectiveBlock& block : *list) {
        proto::CollectiveBlockProto* p = to->Add();
        p->set_member(block.member);
        add_ranges(block.region, p->mutable_region());
      }
    }
  }
}

// Where the collective runs: the host's engine, the simulated GPU backend, or the GPUs (NCCL).
enum class Where { kHost, kSimulatedGpu, kGpu };

// Puts the collective whose outputs are `outputs` on the GPU, as the compiler does on a CUDA
// placement: its inputs come through COPY_H2D (collective_from_gpu does the outputs).
void move_to_gpu(PlanBuilder& b, const std::vector<int>& members, std::vector<int64_t>* inputs) {
  for (size_t m = 0; m < members.size(); ++m) {
    const int64_t host = (*inputs)[m];
    const Shape shape = from_proto(b.find(host)->shape());
    const int64_t gpu = b.reg(members[m], str_cat("x_gpu", m), shape);
    b.find(gpu)->set_device(proto::PLAN_DEVICE_CUDA);
    b.task(members[m], str_cat("to_gpu", m), proto::TaskProto::COPY_H2D, {host}, {gpu})
        ->set_device(proto::PLAN_DEVICE_CUDA);
    (*inputs)[m] = gpu;
  }
}

// The other half of move_to_gpu, once the collective is built: its tasks and outputs on the GPU
// with a control id of their own, and their copies to the host.
std::vector<int64_t> collective_from_gpu(PlanBuilder& b, const std::vector<int>& members,
                                         const std::vector<int64_t>& outputs) {
  constexpr int64_t kControlId = 1000;  // beyond the test's collective ids
  std::vector<int64_t> host;
  for (size_t m = 0; m < members.size(); ++m) {
    b.find(outputs[m])->set_device(proto::PLAN_DEVICE_CUDA);
    proto::TaskProto* t = b.find_task_of(outputs[m]);
    t->set_device(proto::PLAN_DEVICE_CUDA);
    t->mutable_collective()->set_control_id(kControlId);
    const Shape shape = from_proto(b.find(outputs[m])->shape());
    host.push_back(b.reg(members[m], str_cat("y_host", m), shape));
    b.task(members[m], str_cat("to_host", m), proto::TaskProto::COPY_D2H, {outputs[m]},
           {host.back()});
  }
  return host;
}

// Members 0..n-1 of collective `c` over a `whole` tensor: member m reads INPUT x<m>, fed with
// random values (seed + m), and the builder is set to `c`'s algorithm.
void add_members(PlanBuilder& b, const Case& c, int n, const Shape& whole, int seed,
                 std::vector<int>* members, std::vector<int64_t>* inputs,
                 std::map<std::string, Tensor>* feed) {
  const auto chunks = collective_chunks(whole, c.axis, n);
  for (int m = 0; m < n; ++m) {
    members->push_back(m);
    // A gather's (or all-to-all's) member holds its chunk; a reduction's the whole partial sum.
    Shape shape = whole;
    if (c.op == Op::ALL_GATHER || c.op == Op::ALL_TO_ALL) {
      shape = c.axis < 0 ? Shape{chunks[m][0].size()} : region_shape(chunks[m]);
    }
    inputs->push_back(b.input(m, str_cat("x", m), shape));
    (*feed)[str_cat("x", m)] = random_tensor(shape, DataType::kFloat32, seed + m);
  }
  b.set_collective_algorithm(c.algorithm);
}

// One iteration of `plan` on real GPUs, every rank of it in this process (NCCL).
std::map<std::string, Tensor> run_on_gpus(const proto::PlanProto& plan,
                                          const std::map<std::string, Tensor>& feed) {
  RuntimeOptions options;
  options.first_gpu = 0;
  options.watchdog_seconds = 60;
  Runtime runtime(plan, options);
  EXPECT_EQ(runtime.device_collectives()->backend(), DeviceCollectiveBackend::kNccl);
  return runtime.run(feed);
}

// `plan` where `where` says: every host mode and the reference (run_everywhere), the same on
// simulated GPUs, or once on real GPUs.
std::map<std::string, Tensor> run_where(Where where, const proto::PlanProto& plan,
                                        const std::map<std::string, Tensor>& feed) {
  if (where == Where::kGpu) return run_on_gpus(plan, feed);
  if (where == Where::kSimulatedGpu) {
    SimulateCuda simulate;
    return run_everywhere(plan, feed);
  }
  return run_everywhere(plan, feed);
}

// One collective over ranks 0..n-1 of a `whole` tensor: member m reads INPUT x<m> and its
// result is fetched as y<m>, checked against the reference executor (bit for bit) and against
// the definition (within float rounding).
void check_collective(int n, Case c, int piece_bytes, const Shape& whole = Shape{7, 5},
                      Where where = Where::kHost) {
  SCOPED_TRACE(str_cat(collective_op_name(c.op), c.grouped ? " as send_recv" : "", " axis ", c.axis,
                       " on ", n, " ranks by ", collective_algorithm_name(c.algorithm),
                       ", pieces of ", piece_bytes, " bytes, whole ", whole.to_string(),
                       where == Where::kHost           ? ""
                       : where == Where::kSimulatedGpu ? ", simulated GPUs"
                                                       : ", GPUs"));
  PieceBytes pieces(piece_bytes);
  const auto chunks = collective_chunks(whole, c.axis, n);
  PlanBuilder b(n);
  std::vector<int> members;
  std::vector<int64_t> inputs;
  std::map<std::string, Tensor> feed;
  add_members(b, c, n, whole, /*seed=*/100, &members, &inputs, &feed);
  if (where != Where::kHost) move_to_gpu(b, members, &inputs);
  std::vector<int64_t> outputs =
      b.collective(c.op, members, inputs, c.axis, "boxing", "test communicator", c.out_axis);
  if (c.grouped) make_grouped(b, inputs, outputs);
  if (where != Where::kHost) outputs = collective_from_gpu(b, members, outputs);
  for (int m = 0; m < n; ++m) {
    const Shape shape = from_proto(b.find(outputs[m])->shape());
    b.output(m, str_cat("y", m), outputs[m], shape);
  }
  const std::map<std::string, Tensor> out = run_where(where, b.plan(), feed);
  // The definition: sums in any order within rounding; gathers exactly.
  for (int m = 0; m < n; ++m) {
    const std::vector<double> x = values_of(feed.at(str_cat("x", m)));
    const std::vector<double> y = values_of(out.at(str_cat("y", m)));
    if (c.op == Op::ALL_TO_ALL) {
      // The whole from the inputs (chunks along axis); member m gets chunk m along out_axis.
      Tensor all = Tensor::zeros(whole, DataType::kFloat32);
      for (int j = 0; j < n; ++j) {
        copy_region(feed.at(str_cat("x", j)), whole_region_of(region_shape(chunks[j])), all,
                    chunks[j]);
      }
      const auto out_chunk = collective_chunks(whole, c.out_axis, n)[m];
      Tensor want = Tensor::zeros(region_shape(out_chunk), DataType::kFloat32);
      copy_region(all, out_chunk, want, whole_region_of(want.shape()));
      EXPECT_EQ(y, values_of(want)) << "member " << m;
      continue;
    }
    if (c.op == Op::ALL_GATHER) {
      // Chunk j of the result is member j's input.
      for (int j = 0; j < n; ++j) {
        const Tensor got = Tensor::zeros(
            c.axis < 0 ? Shape{chunks[j][0].size()} : region_shape(chunks[j]), DataType::kFloat32);
        const Tensor y_tensor = out.at(str_cat("y", m));
        if (c.axis < 0) {
          const auto all = values_of(y_tensor);
          const auto want = values_of(feed.at(str_cat("x", j)));
          EXPECT_EQ(
              std::vector<double>(all.begin() + chunks[j][0].begin, all.begin() + chunks[j][0].end),
              want);
        } else {
          copy_region(y_tensor, chunks[j], got, whole_region_of(got.shape()));
          EXPECT_EQ(values_of(got), values_of(feed.at(str_cat("x", j)))) << "chunk " << j;
        }
      }
      continue;
    }
    std::vector<double> sum(x.size(), 0.0);
    for (int q = 0; q < n; ++q) {
      const std::vector<double> xq = values_of(feed.at(str_cat("x", q)));
      for (size_t i = 0; i < sum.size(); ++i) sum[i] += xq[i];
    }
    Tensor sum_tensor = Tensor::zeros(whole, DataType::kFloat64);
    std::copy(sum.begin(), sum.end(), sum_tensor.data<double>());
    std::vector<double> want = sum;
    if (c.op == Op::REDUCE_SCATTER) {
      if (c.axis < 0) {
        want.assign(sum.begin() + chunks[m][0].begin, sum.begin() + chunks[m][0].end);
      } else {
        Tensor part = Tensor::zeros(region_shape(chunks[m]), DataType::kFloat64);
        copy_region(sum_tensor, chunks[m], part, whole_region_of(part.shape()));
        want = values_of(part);
      }
    }
    ASSERT_EQ(y.size(), want.size()) << "member " << m;
    for (size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(y[i], want[i], 1e-5) << "member " << m;
  }
}

// A broadcast from member `root` of ranks 0..n-1 (Note [Broadcast]): only the root reads an
// INPUT; every member's output is its value, bit for bit, in every mode and in the reference.
void check_broadcast(int n, int root, Op::Algorithm algorithm, const Shape& shape, int piece_bytes,
                     Where where = Where::kHost) {
  SCOPED_TRACE(str_cat("broadcast from member ", root, " of ", n, " by ",
                       collective_algorithm_name(algorithm), ", ", shape.to_string(),
                       ", pieces of ", piece_bytes, " bytes",
                       where == Where::kHost ? "" : " on (simulated) GPUs"));
  PieceBytes pieces(piece_bytes);
  PlanBuilder b(n);
  int64_t x = b.input(root, "x", shape);
  const std::map<std::string, Tensor> feed = {
      {"x", random_tensor(shape, DataType::kFloat32, 400 + n)}};
  const bool on_gpu = where != Where::kHost;
  if (on_gpu) {
    const int64_t gpu = b.reg(root, "x_gpu", shape);
    b.find(gpu)->set_device(proto::PLAN_DEVICE_CUDA);
    b.task(root, "to_gpu", proto::TaskProto::COPY_H2D, {x}, {gpu})
        ->set_device(proto::PLAN_DEVICE_CUDA);
    x = gpu;
  }
  // On GPUs the root is member 0, as the compiler makes it (Note [Device collectives], "Order").
  std::vector<int> members;
  for (int m = 0; m < n; ++m) members.push_back(on_gpu ? (root + m) % n : m);
  b.set_collective_algorithm(algorithm);
  std::vector<int64_t> outputs = b.broadcast(members, on_gpu ? 0 : root, x);
  if (on_gpu) outputs = collective_from_gpu(b, members, outputs);
  for (int m = 0; m < n; ++m) {
    b.output(members[m], str_cat("y", members[m]), outputs[m], shape);
  }
  const std::map<std::string, Tensor> out = run_where(where, b.plan(), feed);
  for (int m = 0; m < n; ++m) {
    EXPECT_EQ(values_of(out.at(str_cat("y", m))), values_of(feed.at("x"))) << "member " << m;
  }
}

TEST(RuntimeCollectives, BroadcastsReachEveryMemberByChainAndTree) {
  for (int n : {2, 3, 4, 5}) {
    for (int root : {0, n - 1, n / 2}) {
      check_broadcast(n, root, Op::RING, Shape{7, 5}, 1 << 20);  // one piece
      check_broadcast(n, root, Op::RING, Shape{7, 5}, 8);        // pieces forwarded one by one
      check_broadcast(n, root, Op::TREE, Shape{7, 5}, 1 << 20);
    }
  }
  check_broadcast(3, 1, Op::RING, Shape{0, 5}, 8);  // nothing to send
  check_broadcast(3, 1, Op::TREE, Shape{1}, 8);
  check_broadcast(3, 2, Op::RING, Shape{7, 5}, 8, Where::kSimulatedGpu);
  check_broadcast(4, 1, Op::TREE, Shape{7, 5}, 8, Where::kSimulatedGpu);
}

const std::vector<Case>& every_case() {
  static const std::vector<Case> cases = {Case{Op::ALL_REDUCE, -1},
                                          Case{Op::REDUCE_SCATTER, 0},
                                          Case{Op::REDUCE_SCATTER, 1},
                                          Case{Op::REDUCE_SCATTER, -1},
                                          Case{Op::ALL_GATHER, 0},
                                          Case{Op::ALL_GATHER, 1},
                                          Case{Op::ALL_GATHER, -1},
                                          Case{Op::ALL_TO_ALL, 0, 1},
                                          Case{Op::ALL_TO_ALL, 1, 0},
                                          Case{Op::ALL_TO_ALL, 0, 1, Op::RING, /*grouped=*/true},
                                          Case{Op::ALL_TO_ALL, 1, 0, Op::RING, /*grouped=*/true}};
  return cases;
}

TEST(RuntimeCollectives, EveryOpMatchesTheReferenceBitForBitOnTwoToFourRanks) {
  for (int n : {2, 3, 4}) {
    for (Case c : every_case()) {
      check_collective(n, c, /*piece_bytes=*/1 << 20);  // one piece per chunk
      check_collective(n, c, /*piece_bytes=*/8);        // two floats: many pieces in flight
    }
  }
}

// On (simulated) GPUs: the registers behind host-device copies, the collective in member 0's
// order, the same bits in every mode.
TEST(RuntimeCollectives, EveryOpOnSimulatedGpusMatchesTheReferenceBitForBit) {
  for (int n : {2, 3}) {
    for (Case c : every_case()) {
      check_collective(n, c, /*piece_bytes=*/8, Shape{7, 5}, Where::kSimulatedGpu);
    }
  }
  check_collective(4, Case{Op::ALL_TO_ALL, 0, 1}, 1 << 20, Shape{2, 3}, Where::kSimulatedGpu);
}

// NCCL (Note [Collectives through NCCL] in oneflowlike/cuda/nccl.cpp): strided and uneven
// chunks, all-to-alls, chunks without elements, on as many GPUs as there are (up to 4).
TEST(RuntimeCollectives, EveryOpThroughNcclMatchesItsDefinition) {
  const int gpus = cuda::device_count();
  if (gpus < 2) {
    GTEST_SKIP() << "needs 2 GPUs (NCCL puts each member of a communicator on a GPU of its "
                    "own); this machine has "
                 << gpus;
  }
  for (int n = 2; n <= std::min(gpus, 4); ++n) {
    for (Case c : every_case()) check_collective(n, c, 1 << 20, Shape{7, 5}, Where::kGpu);
    check_collective(n, Case{Op::ALL_GATHER, 0}, 1 << 20, Shape{1, 1}, Where::kGpu);
    for (int root : {0, n - 1}) {
      check_broadcast(n, root, Op::RING, Shape{70, 50}, 1 << 20, Where::kGpu);
    }
  }
}

// Recursive doubling (Note [Recursive doubling]): powers of two and the members above one,
// every member with the reference's bits.
TEST(RuntimeCollectives, RecursiveDoublingMatchesTheReferenceOnTwoToEightRanks) {
  for (int n : {2, 3, 4, 5, 6, 8}) {
    check_collective(n, Case{Op::ALL_REDUCE, -1, 0, Op::RECURSIVE_DOUBLING}, 1 << 20);
    check_collective(n, Case{Op::ALL_REDUCE, 0, 0, Op::RECURSIVE_DOUBLING}, 1 << 20, Shape{1, 1});
  }
}

// Fewer elements than members: some chunks, and so some pieces of every step, are empty.
TEST(RuntimeCollectives, ChunksWithoutElementsAreSkippedOnBothSides) {
  for (int n : {3, 4}) {
    for (Case c : {Case{Op::ALL_REDUCE, -1}, Case{Op::REDUCE_SCATTER, 0}, Case{Op::ALL_GATHER, 0},
                   Case{Op::ALL_TO_ALL, 0, 1}, Case{Op::ALL_TO_ALL, 0, 1, Op::RING, true}}) {
      check_collective(n, c, 1 << 20, Shape{2, 3});
      check_collective(n, c, 4, Shape{1, 1});
    }
  }
}

// Note [Collective scratch]: with its scratch planned in the rank's block, a member works there
// (what it received and packed is found in the block afterwards) and gives the same values as
// with scratch of its own; when larger pieces are configured than the plan's, it leaves the
// block alone.
TEST(RuntimeCollectives, MembersWorkInTheScratchThePlanGivesThem) {
  const Shape whole{6, 20};
  for (Case c : {Case{Op::ALL_REDUCE, -1}, Case{Op::REDUCE_SCATTER, 1}, Case{Op::ALL_GATHER, 1},
                 Case{Op::ALL_TO_ALL, 0, 1}, Case{Op::ALL_REDUCE, -1, 0, Op::RECURSIVE_DOUBLING}}) {
    SCOPED_TRACE(str_cat(collective_op_name(c.op), " axis ", c.axis, " by ",
                         collective_algorithm_name(c.algorithm)));
    constexpr int n = 2;
    PlanBuilder b(n);
    std::vector<int> members;
    std::vector<int64_t> inputs;
    std::map<std::string, Tensor> feed;
    add_members(b, c, n, whole, /*seed=*/300, &members, &inputs, &feed);
    const std::vector<int64_t> outputs =
        b.collective(c.op, members, inputs, c.axis, "boxing", "test communicator", c.out_axis);
    for (int m = 0; m < n; ++m) {
      b.output(m, str_cat("y", m), outputs[m], from_proto(b.find(outputs[m])->shape()));
    }
    proto::PlanProto plan = b.plan();
    const proto::PlanProto own = plan;  // scratch of their own
    int64_t scratch_bytes = 0;
    for (proto::RankPlanProto& rank : *plan.mutable_ranks()) {
      for (proto::TaskProto& task : *rank.mutable_tasks()) {
        if (task.kind() != proto::TaskProto::COLLECTIVE) continue;
        const Shape in = from_proto(b.find(task.inputs(0))->shape());
        const Shape out = from_proto(b.find(task.outputs(0))->shape());
        proto::CollectiveProto& col = *task.mutable_collective();
        const int64_t member = std::find(col.members().begin(), col.members().end(), rank.rank()) -
                               col.members().begin();
        scratch_bytes = collective_scratch(col, member, in, out, DataType::kFloat32).bytes();
        ASSERT_GT(scratch_bytes, 0);
        col.set_scratch_bytes(scratch_bytes);
        col.set_scratch_in_block(true);
        col.set_scratch_block(7);
        col.set_scratch_offset(64);
        proto::MemoryBlockProto* block = rank.add_memory_blocks();
        block->set_id(7);
        block->set_bytes(64 + scratch_bytes);
      }
    }
    const std::map<std::string, Tensor> want = Runtime(own, RuntimeOptions{}).run(feed);
    {
      Runtime runtime(plan, RuntimeOptions{});
      const std::map<std::string, Tensor> got = runtime.run(feed);
      for (int m = 0; m < n; ++m) {
        EXPECT_EQ(values_of(got.at(str_cat("y", m))), values_of(want.at(str_cat("y", m))));
        const std::vector<double> block = values_of(runtime.memory_block(m, 7));
        EXPECT_TRUE(std::all_of(block.begin(), block.begin() + 64, [](double v) { return v == 0; }))
            << "member " << m << " wrote before its scratch";
        EXPECT_TRUE(std::any_of(block.begin() + 64, block.end(), [](double v) { return v != 0; }))
            << "member " << m << " never used the planned scratch";
      }
    }
    // Pieces that round up beyond the plan's: chunks of 60 floats in 9 pieces of 7 take 63
    // floats of received pieces (one reduce-scatter step on 2 members), where the plan has 60.
    // The block stays 0.
    if (c.op == Op::ALL_REDUCE && c.algorithm == Op::RING) {
      PieceBytes pieces(28);
      Runtime runtime(plan, RuntimeOptions{});
      runtime.run(feed);
      const std::vector<double> block = values_of(runtime.memory_block(0, 7));
      EXPECT_TRUE(std::all_of(block.begin(), block.end(), [](double v) { return v == 0; }));
    }
  }
}

}  // namespace
}  // namespace ofl::actor
