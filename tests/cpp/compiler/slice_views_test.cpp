// Note [Slice views]: which SLICE tasks become views, and what memory planning does with them.

#include "compiler/physical/slice_views.h"

#include <gtest/gtest.h>

#include "compiler/physical/memory_planning.h"
#include "tests/cpp/actor/plan_builder.h"

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

bool is_view(const proto::PlanProto& plan, int64_t task) {
  for (const proto::TaskProto& t : plan.ranks(0).tasks()) {
    if (t.id() == task) return t.view();
  }
  ADD_FAILURE() << "no task " << task;
  return false;
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
  mark_slice_views(&plan);
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
  mark_slice_views(&plan);
  EXPECT_FALSE(is_view(plan, of_w_task));
  EXPECT_FALSE(is_view(plan, of_y_task));
  EXPECT_FALSE(is_view(plan, of_z_task));
  EXPECT_FALSE(is_view(plan, of_x_task->id()));
  EXPECT_TRUE(is_view(plan, of_x2_task));
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
  b.output(0, "later", later, Shape{4, 3});
  proto::PlanProto plan = b.plan();
  mark_slice_views(&plan);
  plan_memory(&plan);
  const proto::RankPlanProto& rank = plan.ranks(0);
  auto reg = [&](int64_t id) -> const proto::RegisterProto& {
    for (const proto::RegisterProto& r : rank.registers()) {
      if (r.id() == id) return r;
    }
    ADD_FAILURE() << "no register " << id;
    return rank.registers(0);
  };
  EXPECT_EQ(reg(v).bytes(), 0);
  EXPECT_EQ(reg(v).memory_block(), -1);
  ASSERT_GE(reg(y).memory_block(), 0);
  ASSERT_GE(reg(later).memory_block(), 0);
  const bool disjoint = reg(y).offset() + reg(y).bytes() <= reg(later).offset() ||
                        reg(later).offset() + reg(later).bytes() <= reg(y).offset();
  EXPECT_TRUE(disjoint) << "y at " << reg(y).offset() << ", later at " << reg(later).offset();
}

}  // namespace
}  // namespace ofl::compiler::physical
