// Note [Slice views] and Note [Concats in place]: which SLICE tasks become views and which CONCAT
// tasks have their inputs written in place, and what memory planning does with them.

#include "compiler/physical/in_place_boxing.h"

#include <gtest/gtest.h>

#include <map>
#include <vector>

#include "compiler/compile.h"
#include "compiler/physical/memory_planning.h"
#include "tests/cpp/actor/plan_builder.h"
#include "tests/cpp/models/gpt_training.h"

namespace ofl::compiler::physical {
namespace {

using ofl::testing::add_range;
using ofl::testing::PlanBuilder;
using Kind = proto::TaskProto;

// A SLICE of `in` (of shape (4, 3)) to `rows` x `cols` into a new register; returns the task.
proto::TaskProto* slice(PlanBuilder& b, int64_t in, Range rows, Range cols, int64_t* out) {
  *out = b.reg(0, str_cat("slice_", in, "_", rows.begin, "_", cols.begin),
               Shape{rows.size(), cols.size()});
  proto::TaskProto* t = b.task(0, str_cat("slice_", *out), Kind::SLICE, {in}, {*out});
  add_range(t, rows, false);
  add_range(t, cols, false);
  return t;
}

const proto::TaskProto& task_of(const proto::PlanProto& plan, int64_t task) {
  for (const proto::TaskProto& t : plan.ranks(0).tasks()) {
    if (t.id() == task) return t;
  }
  ADD_FAILURE() << "no task " << task;
  return plan.ranks(0).tasks(0);
}
bool is_view(const proto::PlanProto& plan, int64_t task) { return task_of(plan, task).view(); }
bool is_in_place(const proto::PlanProto& plan, int64_t task) {
  return task_of(plan, task).in_place();
}

const proto::RegisterProto& register_of(const proto::PlanProto& plan, int64_t id) {
  for (const proto::RegisterProto& r : plan.ranks(0).registers()) {
    if (r.id() == id) return r;
  }
  ADD_FAILURE() << "no register " << id;
  return plan.ranks(0).registers(0);
}

// A CONCAT of `inputs` into a new register of `shape`, input i at `regions[i]`.
proto::TaskProto* concat(PlanBuilder& b, const std::vector<int64_t>& inputs,
                         const std::vector<std::pair<Range, Range>>& regions, const Shape& shape,
                         int64_t* out) {
  *out = b.reg(0, str_cat("concat_", inputs[0]), shape);
  proto::TaskProto* t = b.task(0, str_cat("concat_", *out), Kind::CONCAT, inputs, {*out});
  for (const auto& [rows, cols] : regions) {
    add_range(t, rows, true);
    add_range(t, cols, true);
  }
  return t;
}

// relu of `in` into a new register of `shape`; returns the register.
int64_t relu(PlanBuilder& b, int64_t in, const Shape& shape) {
  const int64_t out = b.reg(0, str_cat("relu_", in), shape);
  b.compute(0, str_cat("relu_", out), "relu", NoParams{}, {in}, {out});
  return out;
}

TEST(SliceViews, ContiguousSlicesOfTransientRegistersBecomeViews) {
  PlanBuilder b(1);
  const int64_t x = b.input(0, "x", Shape{4, 3});
  const int64_t y = b.reg(0, "y", Shape{4, 3});
  b.compute(0, "relu", "relu", NoParams{}, {x}, {y});
  int64_t rows = 0, cols = 0, rows_of_rows = 0;
  const int64_t rows_task = slice(b, y, {1, 3}, {0, 3}, &rows)->id();
  const int64_t cols_task = slice(b, y, {0, 4}, {0, 2}, &cols)->id();
  const int64_t nested = b.reg(0, "nested", Shape{1, 3});
  proto::TaskProto* nested_task = b.task(0, "nested", Kind::SLICE, {rows}, {nested});
  add_range(nested_task, {1, 2}, false);
  add_range(nested_task, {0, 3}, false);
  rows_of_rows = nested;
  for (int64_t r : {rows, cols, rows_of_rows}) b.output(0, str_cat("out", r), r, Shape{1});
  proto::PlanProto plan = b.plan();
  mark_in_place_boxing(&plan);
  EXPECT_TRUE(is_view(plan, rows_task));
  EXPECT_FALSE(is_view(plan, cols_task));  // two columns of every row: not one run
  EXPECT_TRUE(is_view(plan, nested_task->id()));
}

TEST(SliceViews, SlicesStayCopiesWhereSharingWouldChangeWhatSomeoneReads) {
  PlanBuilder b(1);
  b.set_micro_batches(2);
  // A variable, updated in place by the optimizer.
  const int64_t w = b.variable(0, "w", Shape{4, 3}, {}, proto::InitializerProto::ONES);
  int64_t of_w = 0;
  const int64_t of_w_task = slice(b, w, {0, 2}, {0, 3}, &of_w)->id();
  // A register whose other reader writes it in place.
  const int64_t x = b.input(0, "x", Shape{4, 3});
  const int64_t y = b.reg(0, "y", Shape{4, 3});
  b.compute(0, "relu", "relu", NoParams{}, {x}, {y});
  int64_t of_y = 0;
  const int64_t of_y_task = slice(b, y, {0, 2}, {0, 3}, &of_y)->id();
  const int64_t y_out = b.reg(0, "y_out", Shape{4, 3});
  b.compute(0, "relu_y", "relu", NoParams{}, {y}, {y_out})->add_mutated_inputs(0);
  // A slice whose reader writes it in place.
  const int64_t z = b.reg(0, "z", Shape{4, 3});
  b.compute(0, "relu_z", "relu", NoParams{}, {x}, {z});
  int64_t of_z = 0;
  const int64_t of_z_task = slice(b, z, {0, 2}, {0, 3}, &of_z)->id();
  const int64_t z_out = b.reg(0, "z_out", Shape{2, 3});
  b.compute(0, "relu_of_z", "relu", NoParams{}, {of_z}, {z_out})->add_mutated_inputs(0);
  // A slice read once per micro-batch of a once-per-iteration register.
  int64_t of_x = 0;
  proto::TaskProto* of_x_task = slice(b, x, {0, 2}, {0, 3}, &of_x);
  const int64_t x_out = b.reg(0, "x_out", Shape{2, 3});
  b.compute(0, "relu_x", "relu", NoParams{}, {of_x}, {x_out})->set_per_micro_batch(true);
  // And one that may be a view, for contrast.
  int64_t of_x2 = 0;
  const int64_t of_x2_task = slice(b, x, {2, 4}, {0, 3}, &of_x2)->id();
  for (int64_t r : {of_w, of_y, y_out, z_out, x_out, of_x2}) {
    b.output(0, str_cat("out", r), r, Shape{1});
  }
  proto::PlanProto plan = b.plan();
  mark_in_place_boxing(&plan);
  EXPECT_FALSE(is_view(plan, of_w_task));
  EXPECT_FALSE(is_view(plan, of_y_task));
  EXPECT_FALSE(is_view(plan, of_z_task));
  EXPECT_FALSE(is_view(plan, of_x_task->id()));
  EXPECT_TRUE(is_view(plan, of_x2_task));
}

// Note [Repeated views]: under gradient accumulation every weight enters the micro-batches as a
// view of the variable; its update waits for every reader through the view, and the plan holds
// less memory than with a copy per micro-batch.
TEST(RepeatedViews, WeightsEnterTheMicroBatchesAsViewsTheirUpdatesWaitFor) {
  compiler::GptParallel accumulate{1, 1, 1, 4};
  proto::PlanProto plan = compiler::compile_graph(
      ofl::testing::build_gpt_training(ofl::testing::tiny_gpt_config(2), accumulate));
  const proto::RankPlanProto& rank = plan.ranks(0);
  const RepeatedReaders repeated(rank);
  std::map<int64_t, const proto::TaskProto*> tasks;
  for (const auto& task : rank.tasks()) tasks[task.id()] = &task;
  int views = 0;
  for (const auto& task : rank.tasks()) {
    if (task.kind() != Kind::REPEAT) continue;
    const proto::RegisterProto& in = register_of(plan, task.inputs(0));
    if (!in.persistent()) continue;
    EXPECT_TRUE(task.view()) << task.name();
    EXPECT_EQ(register_of(plan, task.outputs(0)).bytes(), 0) << task.name();
    ++views;
    const std::vector<int64_t> readers = repeated.of(in.id());
    EXPECT_FALSE(readers.empty()) << task.name();
    int writers = 0;
    for (int64_t id : in.consumers()) {
      const proto::TaskProto& writer = *tasks.at(id);
      if (writer.mutated_inputs().empty()) continue;
      ++writers;
      for (int64_t reader : readers) {
        EXPECT_NE(std::find(writer.control_inputs().begin(), writer.control_inputs().end(), reader),
                  writer.control_inputs().end())
            << writer.name() << " updates " << in.name() << " without waiting for "
            << tasks.at(reader)->name();
      }
    }
    EXPECT_GT(writers, 0) << in.name() << " is updated in place";
  }
  EXPECT_GT(views, 10);
  // The same plan with every REPEAT a copy again plans more memory.
  proto::PlanProto copies = plan;
  for (auto& task : *copies.mutable_ranks(0)->mutable_tasks()) {
    if (task.kind() == Kind::REPEAT) task.set_view(false);
  }
  plan_memory(&copies);
  EXPECT_LT(plan.ranks(0).peak_bytes(), copies.ranks(0).peak_bytes());
}

TEST(RepeatedViews, RepeatsStayCopiesWhereSharingWouldChangeWhatSomeoneReads) {
  PlanBuilder b(1);
  b.set_micro_batches(2);
  auto repeat = [&](int64_t in, const std::string& name) {
    const int64_t out = b.reg(0, name, Shape{4, 3});
    proto::TaskProto* t = b.task(0, name, Kind::REPEAT, {in}, {out});
    t->set_per_micro_batch(true);
    return std::make_pair(t->id(), out);
  };
  auto read = [&](int64_t in, const std::string& name, bool writes) {
    const int64_t out = b.reg(0, name + "_out", Shape{4, 3});
    proto::TaskProto* t = b.compute(0, name, "relu", NoParams{}, {in}, {out});
    t->set_per_micro_batch(true);
    if (writes) t->add_mutated_inputs(0);
    return t;
  };
  // A variable whose update waits for the reader through the REPEAT: a view.
  const int64_t w = b.variable(0, "w", Shape{4, 3}, {}, proto::InitializerProto::ONES);
  const auto [w_repeat, w_micro] = repeat(w, "w_repeat");
  const proto::TaskProto* w_reader = read(w_micro, "read_w", false);
  const int64_t w_new = b.reg(0, "w_new", Shape{4, 3});
  proto::TaskProto* w_update = b.compute(0, "update_w", "relu", NoParams{}, {w}, {w_new});
  w_update->add_mutated_inputs(0);
  w_update->add_control_inputs(w_reader->id());
  // A variable whose update does not wait for that reader: a copy.
  const int64_t v = b.variable(0, "v", Shape{4, 3}, {}, proto::InitializerProto::ONES);
  const auto [v_repeat, v_micro] = repeat(v, "v_repeat");
  read(v_micro, "read_v", false);
  const int64_t v_new = b.reg(0, "v_new", Shape{4, 3});
  b.compute(0, "update_v", "relu", NoParams{}, {v}, {v_new})->add_mutated_inputs(0);
  // A REPEAT whose reader writes it in place: a copy.
  const int64_t u = b.variable(0, "u", Shape{4, 3}, {}, proto::InitializerProto::ONES);
  const auto [u_repeat, u_micro] = repeat(u, "u_repeat");
  read(u_micro, "write_u", true);
  // A fed input: a copy (the caller's piece).
  const int64_t x = b.input(0, "x", Shape{4, 3});
  const auto [x_repeat, x_micro] = repeat(x, "x_repeat");
  read(x_micro, "read_x", false);
  // A kernel's once output (a weight cast once per step), read through a view of the REPEAT: a
  // view, whose readers count through the COPY.
  const int64_t cast = b.reg(0, "cast", Shape{4, 3});
  b.compute(0, "cast_w", "relu", NoParams{}, {x}, {cast});
  const auto [cast_repeat, cast_micro] = repeat(cast, "cast_repeat");
  const int64_t reshaped = b.reg(0, "reshaped", Shape{12});
  proto::TaskProto* reshape = b.task(0, "reshape", Kind::COPY, {cast_micro}, {reshaped});
  reshape->set_per_micro_batch(true);
  const int64_t reshape_id = reshape->id();
  const proto::TaskProto* cast_reader = read(reshaped, "read_reshaped", false);
  // A REPEAT a SEND reads (through a COPY): a copy, the peer reads after the SEND's act.
  const int64_t s = b.variable(0, "s", Shape{4, 3}, {}, proto::InitializerProto::ONES);
  const auto [s_repeat, s_micro] = repeat(s, "s_repeat");
  const int64_t s_flat = b.reg(0, "s_flat", Shape{12});
  b.task(0, "s_reshape", Kind::COPY, {s_micro}, {s_flat})->set_per_micro_batch(true);
  b.task(0, "send_s", Kind::SEND, {s_flat}, {})->set_per_micro_batch(true);
  // A REPEAT onto another device (a GPU's readers): a copy.
  const int64_t g = b.variable(0, "g", Shape{4, 3}, {}, proto::InitializerProto::ONES);
  const auto [g_repeat, g_micro] = repeat(g, "g_repeat");
  b.find(g_micro)->set_device(proto::PLAN_DEVICE_CUDA);
  read(g_micro, "read_g", false);
  proto::PlanProto plan = b.plan();
  const RepeatedReaders repeated(plan.ranks(0));
  EXPECT_EQ(repeated.of(cast), (std::vector<int64_t>{reshape_id, cast_reader->id()}))
      << "the COPY and its reader";
  EXPECT_TRUE(repeated.of(s).empty());
  mark_in_place_boxing(&plan);
  EXPECT_TRUE(is_view(plan, w_repeat));
  EXPECT_FALSE(is_view(plan, v_repeat));
  EXPECT_FALSE(is_view(plan, u_repeat));
  EXPECT_FALSE(is_view(plan, x_repeat));
  EXPECT_TRUE(is_view(plan, cast_repeat));
  EXPECT_FALSE(is_view(plan, s_repeat));
  EXPECT_FALSE(is_view(plan, g_repeat));
}

// x -> slice (view v) -> ... -> reader of v. A register written after the slice while v is
// still to be read must not take x's memory, and v gets none of its own.
TEST(SliceViews, MemoryPlanningKeepsTheInputAliveUntilTheViewsLastReader) {
  PlanBuilder b(1);
  const int64_t x = b.input(0, "x", Shape{4, 3});
  const int64_t y = b.reg(0, "y", Shape{4, 3});
  b.compute(0, "relu", "relu", NoParams{}, {x}, {y});
  int64_t v = 0;
  slice(b, y, {0, 2}, {0, 3}, &v);
  const int64_t later = b.reg(0, "later", Shape{4, 3});
  b.compute(0, "neg", "neg", NoParams{}, {x}, {later});
  const int64_t sum = b.reg(0, "sum", Shape{2, 3});
  b.compute(0, "relu_v", "relu", NoParams{}, {v}, {sum});
  b.output(0, "sum", sum, Shape{2, 3});
  // Read, not fetched: a fetched register gets memory of its own (Note [Fetched pieces are
  // handed over]).
  const int64_t after = b.reg(0, "after", Shape{4, 3});
  b.compute(0, "relu_later", "relu", NoParams{}, {later}, {after});
  b.output(0, "after", after, Shape{4, 3});
  proto::PlanProto plan = b.plan();
  mark_in_place_boxing(&plan);
  plan_memory(&plan);
  auto reg = [&](int64_t id) -> const proto::RegisterProto& { return register_of(plan, id); };
  EXPECT_EQ(reg(v).bytes(), 0);
  EXPECT_EQ(reg(v).memory_block(), -1);
  ASSERT_GE(reg(y).memory_block(), 0);
  ASSERT_GE(reg(later).memory_block(), 0);
  const bool disjoint = reg(y).offset() + reg(y).bytes() <= reg(later).offset() ||
                        reg(later).offset() + reg(later).bytes() <= reg(y).offset();
  EXPECT_TRUE(disjoint) << "y at " << reg(y).offset() << ", later at " << reg(later).offset();
}

TEST(InPlaceConcats, PiecesThatTileTheOutputInRunsAreWrittenInPlace) {
  PlanBuilder b(1);
  const int64_t x = b.input(0, "x", Shape{2, 3});
  const int64_t a = relu(b, x, Shape{2, 3});
  // Made and read between the first piece's producer and the concat: the output, which the
  // piece already lives in, must not share its memory.
  const int64_t between = relu(b, x, Shape{4, 3});
  relu(b, between, Shape{1});
  const int64_t c = relu(b, x, Shape{2, 3});
  int64_t stacked = 0, side_by_side = 0;
  const int64_t stacked_task =
      concat(b, {c, a}, {{{2, 4}, {0, 3}}, {{0, 2}, {0, 3}}}, Shape{4, 3}, &stacked)->id();
  const int64_t d = relu(b, x, Shape{2, 3});
  const int64_t e = relu(b, x, Shape{2, 3});
  const int64_t side_task =
      concat(b, {d, e}, {{{0, 2}, {0, 3}}, {{0, 2}, {3, 6}}}, Shape{2, 6}, &side_by_side)->id();
  b.output(0, "stacked", stacked, Shape{4, 3});
  b.output(0, "side", side_by_side, Shape{2, 6});
  proto::PlanProto plan = b.plan();
  mark_in_place_boxing(&plan);
  EXPECT_TRUE(is_in_place(plan, stacked_task));  // in any order
  EXPECT_FALSE(is_in_place(plan, side_task));    // each piece is two runs of the output
  plan_memory(&plan);
  for (int64_t piece : {a, c}) {
    EXPECT_EQ(register_of(plan, piece).bytes(), 0);
    EXPECT_EQ(register_of(plan, piece).memory_block(), -1);
  }
  // The output is live from the first piece's producer on: `between` (made and dead before the
  // concat), d and e (after it) must not take its memory.
  const proto::RegisterProto& out = register_of(plan, stacked);
  ASSERT_GE(out.memory_block(), 0);
  for (int64_t later : {between, d, e}) {
    const proto::RegisterProto& r = register_of(plan, later);
    ASSERT_GE(r.memory_block(), 0);
    EXPECT_TRUE(r.offset() + r.bytes() <= out.offset() || out.offset() + out.bytes() <= r.offset())
        << "register " << r.id() << " at " << r.offset() << " inside register " << out.id()
        << " at " << out.offset();
  }
}

TEST(InPlaceConcats, ConcatsStayCopiesWhereWritingInPlaceCouldChangeWhatSomeoneReads) {
  PlanBuilder b(1);
  b.set_micro_batches(2);
  const int64_t x = b.input(0, "x", Shape{2, 3});
  auto pair_of = [&](int64_t first, int64_t second, int64_t* out) {
    return concat(b, {first, second}, {{{0, 2}, {0, 3}}, {{2, 4}, {0, 3}}}, Shape{4, 3}, out)->id();
  };
  int64_t out = 0;
  // A variable piece.
  const int64_t w = b.variable(0, "w", Shape{2, 3}, {}, proto::InitializerProto::ONES);
  const int64_t with_variable = pair_of(w, relu(b, x, Shape{2, 3}), &out);
  // A piece another reader writes in place.
  const int64_t mutated = relu(b, x, Shape{2, 3});
  const int64_t writer_out = b.reg(0, "writer_out", Shape{2, 3});
  b.compute(0, "writer", "relu", NoParams{}, {mutated}, {writer_out})->add_mutated_inputs(0);
  const int64_t with_mutated = pair_of(mutated, relu(b, x, Shape{2, 3}), &out);
  // An output a reader writes in place.
  const int64_t written_out = pair_of(relu(b, x, Shape{2, 3}), relu(b, x, Shape{2, 3}), &out);
  const int64_t sink = b.reg(0, "sink", Shape{4, 3});
  b.compute(0, "sink", "relu", NoParams{}, {out}, {sink})->add_mutated_inputs(0);
  // The same register twice.
  const int64_t twice = relu(b, x, Shape{2, 3});
  const int64_t with_twice = pair_of(twice, twice, &out);
  // A piece with two slots.
  const int64_t pipelined = relu(b, x, Shape{2, 3});
  b.find(pipelined)->set_register_num(2);
  const int64_t with_pipelined = pair_of(pipelined, relu(b, x, Shape{2, 3}), &out);
  // A piece made once per micro-batch for a once-per-iteration concat.
  const int64_t per_micro = relu(b, x, Shape{2, 3});
  b.find_task_of(per_micro)->set_per_micro_batch(true);
  const int64_t with_per_micro = pair_of(per_micro, relu(b, x, Shape{2, 3}), &out);
  // A piece already written into another concat.
  const int64_t shared = relu(b, x, Shape{2, 3});
  int64_t first_out = 0;
  const int64_t first = pair_of(shared, relu(b, x, Shape{2, 3}), &first_out);
  const int64_t second = pair_of(shared, relu(b, x, Shape{2, 3}), &out);
  // A concat's output fed to another: the first is in place, the second copies.
  int64_t inner_out = 0;
  const int64_t inner = pair_of(relu(b, x, Shape{2, 3}), relu(b, x, Shape{2, 3}), &inner_out);
  const int64_t outer = concat(b, {inner_out, relu(b, x, Shape{4, 3})},
                               {{{0, 4}, {0, 3}}, {{4, 8}, {0, 3}}}, Shape{8, 3}, &out)
                            ->id();
  proto::PlanProto plan = b.plan();
  mark_in_place_boxing(&plan);
  EXPECT_FALSE(is_in_place(plan, with_variable));
  EXPECT_FALSE(is_in_place(plan, with_mutated));
  EXPECT_FALSE(is_in_place(plan, written_out));
  EXPECT_FALSE(is_in_place(plan, with_twice));
  EXPECT_FALSE(is_in_place(plan, with_pipelined));
  EXPECT_FALSE(is_in_place(plan, with_per_micro));
  EXPECT_TRUE(is_in_place(plan, first));
  EXPECT_FALSE(is_in_place(plan, second));
  EXPECT_TRUE(is_in_place(plan, inner));
  EXPECT_FALSE(is_in_place(plan, outer));
}

// A host ALL_REDUCE of `in` (of shape (2, 3)) over ranks 0 and 1 into a new register `out`;
// returns the task.
proto::TaskProto* all_reduce_of(PlanBuilder& b, int64_t in, int64_t* out) {
  *out = b.reg(0, str_cat("sum_", in), Shape{2, 3});
  proto::TaskProto* t = b.task(0, str_cat("sum_", *out), Kind::COLLECTIVE, {in}, {*out});
  t->set_thread(1);
  t->mutable_collective()->set_op(proto::CollectiveProto::ALL_REDUCE);
  t->mutable_collective()->add_members(0);
  t->mutable_collective()->add_members(1);
  return t;
}

// Note [All-reduces in place]: a host all-reduce sums into an input nobody else reads; one whose
// input has another reader, or is a view, or lives on a GPU, writes a register of its own.
TEST(AllReducesInPlace, OnlyAnInputNobodyElseReadsIsSummedInPlace) {
  PlanBuilder b(1);
  const int64_t x = b.input(0, "x", Shape{2, 3});
  auto all_reduce = [&](int64_t in, int64_t* out) {  // its sum read by a kernel
    proto::TaskProto* t = all_reduce_of(b, in, out);
    relu(b, *out, Shape{2, 3});
    return t;
  };
  int64_t out = 0;
  const int64_t alone = all_reduce(relu(b, x, Shape{2, 3}), &out)->id();
  const int64_t alone_out = out;
  const int64_t shared_in = relu(b, x, Shape{2, 3});
  relu(b, shared_in, Shape{2, 3});
  const int64_t shared = all_reduce(shared_in, &out)->id();
  const int64_t viewed_in = b.reg(0, "viewed", Shape{2, 3});
  b.task(0, "view", Kind::COPY, {relu(b, x, Shape{2, 3})}, {viewed_in});
  const int64_t of_view = all_reduce(viewed_in, &out)->id();
  proto::TaskProto* on_gpu = all_reduce(relu(b, x, Shape{2, 3}), &out);
  on_gpu->set_device(proto::PLAN_DEVICE_CUDA);
  const int64_t gpu = on_gpu->id();
  // Its output a piece of an in-place concat: the concat's memory, so not summed in place.
  int64_t into_concat_out = 0;
  const int64_t into_concat = all_reduce(relu(b, x, Shape{2, 3}), &into_concat_out)->id();
  int64_t stacked = 0;
  const int64_t stack_task = concat(b, {into_concat_out, relu(b, x, Shape{2, 3})},
                                    {{{0, 2}, {0, 3}}, {{2, 4}, {0, 3}}}, Shape{4, 3}, &stacked)
                                 ->id();
  b.output(0, "stacked", stacked, Shape{4, 3});
  proto::PlanProto plan = b.plan();
  mark_in_place_boxing(&plan);
  EXPECT_TRUE(is_view(plan, alone));
  EXPECT_FALSE(is_view(plan, shared));
  EXPECT_FALSE(is_view(plan, of_view));
  EXPECT_FALSE(is_view(plan, gpu));
  EXPECT_TRUE(is_in_place(plan, stack_task));
  EXPECT_FALSE(is_view(plan, into_concat));
  plan_memory(&plan);
  EXPECT_EQ(register_of(plan, alone_out).bytes(), 0);
}

// Note [Fetched pieces are handed over] and Note [Fed pieces are handed in]: which registers
// get new memory every piece (a fetched kernel output) or the caller's (an input nobody writes),
// and that memory planning gives them no block memory.
TEST(HandedPieces, FetchedKernelOutputsAreHandedOverAndUnwrittenInputsHandedIn) {
  PlanBuilder b(1);
  const int64_t x = b.input(0, "x", Shape{4, 3});
  const int64_t computed = relu(b, x, Shape{4, 3});  // fetched: handed over
  int64_t rows = 0;
  slice(b, computed, {0, 2}, {0, 3}, &rows);  // a view of it, fetched: copied out
  const int64_t w = b.variable(0, "w", Shape{4, 3}, {}, proto::InitializerProto::ONES);
  const int64_t written = b.input(0, "written", Shape{4, 3});  // an update writes it
  const int64_t sink = b.reg(0, "sink", Shape{4, 3});
  b.compute(0, "writer", "relu", NoParams{}, {written}, {sink})->add_mutated_inputs(0);
  b.output(0, "computed", computed, Shape{4, 3});
  b.output(0, "rows", rows, Shape{2, 3});
  b.output(0, "w", w, Shape{4, 3});
  b.output(0, "sink", sink, Shape{4, 3});
  proto::PlanProto plan = b.plan();
  mark_in_place_boxing(&plan);
  EXPECT_TRUE(register_of(plan, computed).fresh_each_piece());
  EXPECT_FALSE(register_of(plan, rows).fresh_each_piece());
  EXPECT_FALSE(register_of(plan, w).fresh_each_piece());
  EXPECT_TRUE(register_of(plan, x).handed_in());
  EXPECT_FALSE(register_of(plan, written).handed_in());
  EXPECT_FALSE(register_of(plan, computed).handed_in());
  plan_memory(&plan);
  EXPECT_EQ(register_of(plan, computed).memory_block(), -1);
  EXPECT_EQ(register_of(plan, x).memory_block(), -1);
}

// A SEND's peer fetches the bytes after the SEND has acted, possibly after the run returned to
// a caller who then writes them (an eager in-place op, an optimizer step): registers a SEND
// reads, directly or through a view, are neither handed in nor handed over.
TEST(HandedPieces, RegistersASendReadsAreNeitherHandedInNorOver) {
  PlanBuilder b(2);
  const int64_t x = b.input(0, "x", Shape{4, 3});
  const int64_t y = relu(b, x, Shape{4, 3});
  int64_t rows = 0;
  slice(b, x, {0, 2}, {0, 3}, &rows);  // a view of x, sent
  b.output(0, "y", y, Shape{4, 3});
  proto::TaskProto* send_y = b.task(0, "send_y", Kind::SEND, {y}, {});
  send_y->set_peer(1);
  send_y->set_transfer_id(1);
  proto::TaskProto* send_rows = b.task(0, "send_rows", Kind::SEND, {rows}, {});
  send_rows->set_peer(1);
  send_rows->set_transfer_id(2);
  proto::PlanProto plan = b.plan();
  mark_in_place_boxing(&plan);
  ASSERT_TRUE(is_view(plan, b.find(rows)->producer()));
  EXPECT_FALSE(register_of(plan, x).handed_in());
  EXPECT_FALSE(register_of(plan, y).fresh_each_piece());
}

// Note [Donated pieces]: a donating INPUT is handed in under an in-place all-reduce (and a
// kernel writing it), and the views of it are handed over when fetched, but not a register a
// kernel writes; it is still not handed in where a SEND reads it or an in-place concat's output
// holds it, and an input that does not donate keeps its copies.
TEST(DonatedPieces, ADonatingInputIsSummedInPlaceAndComesBackAsTheResult) {
  PlanBuilder b(2);
  auto all_reduce = [&](int64_t in) {
    int64_t out = 0;
    all_reduce_of(b, in, &out);
    return out;
  };
  auto input = [&](const std::string& name, bool donates) {
    const int64_t x = b.input(0, name, Shape{2, 3});
    b.find_task_of(x)->set_donates(donates);
    return x;
  };
  auto fetch_reshaped = [&](int64_t in) {  // the eager op's reshape, a view COPY, fetched
    const int64_t out = b.reg(0, str_cat("reshaped_", in), Shape{6});
    b.task(0, str_cat("reshape_", in), Kind::COPY, {in}, {out});
    b.output(0, str_cat("out_", in), out, Shape{6});
    return out;
  };
  const int64_t donated = input("donated", true);
  const int64_t summed = all_reduce(donated);
  const int64_t fetched = fetch_reshaped(summed);
  const int64_t kept = input("kept", false);  // the same, not donated: copied in and out
  const int64_t kept_fetched = fetch_reshaped(all_reduce(kept));
  // A kernel writes it in place after the OUTPUT reading it: handed in, but the OUTPUT must
  // snapshot it, so not donated.
  const int64_t written = input("written", true);
  b.output(0, "written_out", written, Shape{2, 3});
  const int64_t sink = b.reg(0, "sink", Shape{2, 3});
  b.compute(0, "writer", "relu", NoParams{}, {written}, {sink})->add_mutated_inputs(0);
  b.output(0, "sink", sink, Shape{2, 3});
  const int64_t sent = input("sent", true);  // its peer reads it after the run
  proto::TaskProto* send = b.task(0, "send", Kind::SEND, {sent}, {});
  send->set_peer(1);
  send->set_transfer_id(1);
  const int64_t into_concat = input("into_concat", true);
  const int64_t relu_in = input("relu_in", false);
  const int64_t computed = relu(b, relu_in, Shape{2, 3});
  int64_t stacked = 0;
  const int64_t stack_task = concat(b, {into_concat, computed},
                                    {{{0, 2}, {0, 3}}, {{2, 4}, {0, 3}}}, Shape{4, 3}, &stacked)
                                 ->id();
  b.output(0, "stacked", stacked, Shape{4, 3});
  proto::PlanProto plan = b.plan();
  mark_in_place_boxing(&plan);
  EXPECT_TRUE(register_of(plan, donated).handed_in());
  EXPECT_TRUE(register_of(plan, donated).donated());
  EXPECT_TRUE(is_view(plan, register_of(plan, summed).producer()));
  EXPECT_TRUE(register_of(plan, summed).donated());
  EXPECT_TRUE(register_of(plan, fetched).donated());
  EXPECT_FALSE(register_of(plan, kept).handed_in());
  EXPECT_FALSE(register_of(plan, kept_fetched).donated());
  EXPECT_TRUE(register_of(plan, written).handed_in());
  EXPECT_FALSE(register_of(plan, written).donated());
  EXPECT_FALSE(register_of(plan, sink).donated());  // a kernel's output: new memory
  EXPECT_FALSE(register_of(plan, sent).handed_in());
  EXPECT_FALSE(register_of(plan, sent).donated());
  ASSERT_TRUE(is_in_place(plan, stack_task));
  EXPECT_FALSE(register_of(plan, into_concat).handed_in());
  EXPECT_FALSE(register_of(plan, into_concat).donated());
}

}  // namespace
}  // namespace ofl::compiler::physical
