// Plans with GPU placements (Note [Devices in a plan] in compiler/physical/expansion.h): where
// the compiler puts tasks, registers, copies and memory blocks, and training through them.
//
// Without a GPU (CI) the runtime runs the GPU tasks with CPU kernels in host memory, on a worker
// stream per rank standing for the GPU's (RuntimeOptions::simulate_cuda): the copies, the
// per-device memory and the event-gated handovers between the two then run for real, and every
// layout must train like one CPU rank. With a GPU, the same layouts also run on it.

#include <gtest/gtest.h>

#include <cstdlib>
#include <map>

#include "actor/runtime.h"
#include "compiler/compile.h"
#include "compiler/plan_dump.h"
#include "oneflowlike/cuda/device.h"
#include "oneflowlike/plan_contract.h"
#include "tests/cpp/models/gpt_training.h"
#include "tests/cpp/models/mlp_training.h"

namespace ofl::actor {
namespace {

using compiler::GptParallel;
using compiler::OptimizerConfig;
using testing::MlpLayout;
using testing::RunnerFactory;
using testing::TrainingRun;

RunnerFactory device_runner(bool simulate, bool deterministic = false) {
  return [simulate, deterministic](proto::PlanProto plan) -> std::unique_ptr<PlanRunner> {
    RuntimeOptions options;
    options.simulate_cuda = simulate;
    options.deterministic = deterministic;
    options.first_gpu = 0;
    options.watchdog_seconds = 60;
    return std::make_unique<Runtime>(plan, options);
  };
}

Placement on_cuda(const Placement& p) {
  return Placement(DeviceType::kCUDA, p.ranks(), p.hierarchy());
}

MlpLayout all_on_cuda(MlpLayout layout) {
  layout.placement = on_cuda(layout.placement);
  for (Placement& p : layout.later_stages) p = on_cuda(p);
  layout.name += "_cuda";
  return layout;
}

MlpLayout find_layout(const std::vector<MlpLayout>& layouts, const std::string& name) {
  for (const MlpLayout& layout : layouts) {
    if (layout.name == name) return layout;
  }
  ADD_FAILURE() << "no layout " << name;
  return layouts.at(0);
}

const proto::TaskProto* find_task(const proto::RankPlanProto& rank, proto::TaskProto::Kind kind,
                                  const std::string& name_part = "") {
  for (const auto& task : rank.tasks()) {
    if (task.kind() == kind && task.name().find(name_part) != std::string::npos) return &task;
  }
  return nullptr;
}

const proto::RegisterProto& find_register(const proto::RankPlanProto& rank, int64_t id) {
  for (const auto& reg : rank.registers()) {
    if (reg.id() == id) return reg;
  }
  ADD_FAILURE() << "no register " << id;
  return rank.registers(0);
}

TEST(DevicePlans, ComputeAndVariablesGoToTheGpuAndCopiesJoinThemToTheHost) {
  const MlpLayout layout = all_on_cuda(testing::mlp_layouts()[0]);
  const proto::PlanProto plan =
      compiler::compile_graph(testing::build_mlp(layout, OptimizerConfig::Kind::kAdamW));
  ASSERT_EQ(plan.ranks_size(), 1);
  const proto::RankPlanProto& rank = plan.ranks(0);
  int h2d = 0, d2h = 0, inputs = 0;
  for (const auto& task : rank.tasks()) {
    switch (task.kind()) {
      case proto::TaskProto::COMPUTE:
      case proto::TaskProto::VARIABLE:
        EXPECT_EQ(task.device(), proto::PLAN_DEVICE_CUDA) << task.name();
        break;
      case proto::TaskProto::INPUT:
        ++inputs;
        [[fallthrough]];
      case proto::TaskProto::OUTPUT:
        EXPECT_EQ(task.device(), proto::PLAN_DEVICE_CPU) << task.name();
        break;
      case proto::TaskProto::COPY_H2D:
        ++h2d;
        break;
      case proto::TaskProto::COPY_D2H:
        ++d2h;
        break;
      default:
        break;
    }
  }
  // x, labels, the learning rate and AdamW's step come in; the loss goes out. One copy per
  // register, however many tasks read it on the GPU.
  EXPECT_EQ(inputs, 4);
  EXPECT_EQ(h2d, inputs);
  EXPECT_GE(d2h, 1);
  const proto::TaskProto* x = find_task(rank, proto::TaskProto::INPUT, "x");
  ASSERT_NE(x, nullptr);
  const proto::RegisterProto& fed = find_register(rank, x->outputs(0));
  EXPECT_EQ(fed.device(), proto::PLAN_DEVICE_CPU);
  ASSERT_EQ(fed.consumers_size(), 1);
  const proto::TaskProto* copy = find_task(rank, proto::TaskProto::COPY_H2D, "x");
  ASSERT_NE(copy, nullptr);
  EXPECT_EQ(copy->id(), fed.consumers(0));
  EXPECT_EQ(find_register(rank, copy->outputs(0)).device(), proto::PLAN_DEVICE_CUDA);
  // One block per device; the GPU's is counted apart as well as in the peak.
  std::set<proto::PlanDevice> devices;
  for (const auto& block : rank.memory_blocks()) devices.insert(block.device());
  EXPECT_EQ(devices.size(), 2u);
  EXPECT_GT(rank.device_peak_bytes(), 0);
  EXPECT_GT(rank.peak_bytes(), rank.device_peak_bytes());
  // The plan's summary and dump say which memory is the GPU's.
  const std::string summary = compiler::summary_to_text(compiler::summarize_plan(plan));
  EXPECT_NE(
      summary.find(str_cat("(", compiler::format_bytes(rank.device_peak_bytes()), " on the GPU)")),
      std::string::npos)
      << summary;
  EXPECT_NE(compiler::plan_to_text(plan).find(" B on the GPU\n"), std::string::npos);
}

// Note [Slice views]: a reshape's COPY on the GPU hands out its input's bytes, as on the host:
// its register takes no memory and the copy moves nothing (the simulated and real GPU runs
// below train through such views).
TEST(DevicePlans, ReshapesOnTheGpuAreViewsOfTheirInput) {
  compiler::GptParallel on_gpu{1, 1, 1, 1};
  on_gpu.device = DeviceType::kCUDA;
  const proto::PlanProto plan =
      compiler::compile_graph(testing::build_gpt_training(testing::tiny_gpt_config(1), on_gpu));
  const proto::RankPlanProto& rank = plan.ranks(0);
  int gpu_copies = 0, views = 0;
  for (const auto& task : rank.tasks()) {
    if (task.kind() != proto::TaskProto::COPY || task.device() != proto::PLAN_DEVICE_CUDA) {
      continue;
    }
    ++gpu_copies;
    if (!task.view()) continue;
    ++views;
    const proto::RegisterProto& out = find_register(rank, task.outputs(0));
    EXPECT_EQ(out.bytes(), 0) << task.name();
    EXPECT_EQ(out.memory_block(), -1) << task.name();
  }
  EXPECT_GT(gpu_copies, 0);
  EXPECT_GT(views, gpu_copies / 2) << "of " << gpu_copies << " COPY tasks on the GPU";
}

TEST(DevicePlans, ACpuStageFeedsAGpuStageThroughHostTransfers) {
  MlpLayout layout = find_layout(testing::mlp_pipelined_layouts(), "pp2_micro4");
  layout.later_stages[0] = on_cuda(layout.later_stages[0]);
  const proto::PlanProto plan =
      compiler::compile_graph(testing::build_mlp(layout, OptimizerConfig::Kind::kSgd));
  ASSERT_EQ(plan.ranks_size(), 2);
  for (const auto& task : plan.ranks(0).tasks()) {
    EXPECT_EQ(task.device(), proto::PLAN_DEVICE_CPU) << task.name();
  }
  const proto::RankPlanProto& gpu_rank = plan.ranks(1);
  const proto::TaskProto* recv = find_task(gpu_rank, proto::TaskProto::RECV);
  ASSERT_NE(recv, nullptr);
  const proto::RegisterProto& received = find_register(gpu_rank, recv->outputs(0));
  EXPECT_EQ(received.device(), proto::PLAN_DEVICE_CPU);  // UCX moves host memory
  ASSERT_EQ(received.consumers_size(), 1);
  bool to_gpu = false;
  for (const auto& task : gpu_rank.tasks()) {
    to_gpu = to_gpu || (task.id() == received.consumers(0) &&
                        task.kind() == proto::TaskProto::COPY_H2D && task.per_micro_batch());
  }
  EXPECT_TRUE(to_gpu) << "the received activation is copied to the GPU once per micro-batch";
}

// Note [Transfers between GPUs]: between two GPU stages the activations and their gradients
// move GPU to GPU, one send/recv collective per micro-batch over the pair of ranks, with no
// copy to the host on either side (the loss fetched onto rank 0's host keeps SEND/RECV).
TEST(DevicePlans, GpuStagesPassActivationsGpuToGpu) {
  const MlpLayout layout = all_on_cuda(find_layout(testing::mlp_pipelined_layouts(), "pp2_micro4"));
  const proto::PlanProto plan =
      compiler::compile_graph(testing::build_mlp(layout, OptimizerConfig::Kind::kSgd));
  ASSERT_EQ(plan.ranks_size(), 2);
  std::map<int64_t, const proto::TaskProto*> tasks;
  std::map<int64_t, const proto::RegisterProto*> registers;
  for (const auto& rank : plan.ranks()) {
    for (const auto& task : rank.tasks()) tasks[task.id()] = &task;
    for (const auto& reg : rank.registers()) registers[reg.id()] = &reg;
  }
  int forward = 0, backward = 0;
  for (const auto& [id, task] : tasks) {
    if (task->kind() != proto::TaskProto::COLLECTIVE) continue;
    const proto::CollectiveProto& c = task->collective();
    if (c.communicator().rfind("the GPUs of ranks ", 0) != 0) continue;
    EXPECT_EQ(c.op(), proto::CollectiveProto::SEND_RECV);
    EXPECT_EQ(task->device(), proto::PLAN_DEVICE_CUDA);
    EXPECT_TRUE(task->per_micro_batch()) << task->name();
    if (task->rank() != c.members(0)) continue;  // member 0 sends (Note [Transfers between GPUs])
    EXPECT_GT(c.sends_size(), 0) << task->name();
    (task->rank() == 0 ? forward : backward) += 1;
    const proto::RegisterProto& in = *registers.at(task->inputs(0));
    EXPECT_EQ(in.device(), proto::PLAN_DEVICE_CUDA) << task->name();
    EXPECT_NE(tasks.at(in.producer())->kind(), proto::TaskProto::COPY_H2D) << task->name();
  }
  EXPECT_GT(forward, 0) << "activations from stage 0 to stage 1";
  EXPECT_GT(backward, 0) << "their gradients back";
  for (const auto& [id, task] : tasks) {
    if (task->kind() != proto::TaskProto::RECV) continue;
    const proto::RegisterProto& out = *registers.at(task->outputs(0));
    for (int64_t c : out.consumers()) {
      EXPECT_NE(tasks.at(c)->kind(), proto::TaskProto::COPY_H2D)
          << task->name() << ": a host transfer between the GPU stages";
    }
  }
}

// Note [Micro-batch tasks on a GPU]: under gradient accumulation, and pipelining, the weights
// repeat into the micro-batches and the gradients are summed on the GPU; per micro-batch only
// the fed batch's rows cross to it, and the packed loss leaves it once.
TEST(DevicePlans, UnderGradientAccumulationWeightsAndGradientsStayOnTheGpu) {
  for (const auto& [name, parallel] :
       std::vector<std::pair<std::string, GptParallel>>{{"micro4", {1, 1, 1, 4}},
                                                        {"dp2_micro2", {2, 1, 1, 2}},
                                                        {"pp2_micro4", {1, 1, 2, 4}},
                                                        {"dp2_tp2_pp2_micro2", {2, 2, 2, 2}}}) {
    SCOPED_TRACE(name);
    GptParallel on_gpu = parallel;
    on_gpu.device = DeviceType::kCUDA;
    const proto::PlanProto plan =
        compiler::compile_graph(testing::build_gpt_training(testing::tiny_gpt_config(2), on_gpu));
    ASSERT_EQ(plan.micro_batches(), parallel.micro_batches);
    const compiler::PlanSummary summary = compiler::summarize_plan(plan);
    std::map<int64_t, const proto::TaskProto*> tasks;
    std::map<int64_t, const proto::RegisterProto*> registers;
    for (const auto& rank : plan.ranks()) {
      for (const auto& task : rank.tasks()) tasks[task.id()] = &task;
      for (const auto& reg : rank.registers()) registers[reg.id()] = &reg;
    }
    std::map<proto::TaskProto::Kind, int> on_gpu_tasks;
    for (int r = 0; r < plan.ranks_size(); ++r) {
      const proto::RankPlanProto& rank = plan.ranks(r);
      int64_t weights = 0, fed_per_micro = 0, packed = 0;
      for (const auto& task : rank.tasks()) {
        const proto::RegisterProto* out =
            task.outputs_size() > 0 ? registers.at(task.outputs(0)) : nullptr;
        switch (task.kind()) {
          case proto::TaskProto::VARIABLE:
            weights += out->bytes();
            break;
          case proto::TaskProto::REPEAT:
          case proto::TaskProto::ACCUMULATE:
          case proto::TaskProto::PACK:
            EXPECT_EQ(task.device(), proto::PLAN_DEVICE_CUDA) << task.name();
            ++on_gpu_tasks[task.kind()];
            if (task.kind() == proto::TaskProto::PACK) packed += out->bytes();
            break;
          case proto::TaskProto::UNPACK:
            EXPECT_EQ(task.device(), proto::PLAN_DEVICE_CPU) << task.name();  // the fed batch
            fed_per_micro += out->bytes();
            break;
          case proto::TaskProto::COPY_H2D:
          case proto::TaskProto::COPY_D2H: {
            const proto::TaskProto& producer = *tasks.at(registers.at(task.inputs(0))->producer());
            // Per micro-batch: the fed rows, and under DP the per-token losses, which the loss
            // (on rank 0) gathers through the host; once: the packed loss leaves the GPU.
            const int64_t bytes = registers.at(task.outputs(0))->bytes();
            if (task.per_micro_batch()) {
              EXPECT_TRUE(producer.kind() == proto::TaskProto::UNPACK || bytes <= 4096)
                  << task.name() << " crosses between the host and the GPU every micro-batch";
            } else if (task.kind() == proto::TaskProto::COPY_D2H) {
              EXPECT_EQ(producer.kind(), proto::TaskProto::PACK)
                  << task.name() << " leaves the GPU";
            } else {
              EXPECT_EQ(producer.kind(), proto::TaskProto::INPUT)
                  << task.name() << " comes to the GPU";
            }
            break;
          }
          default:
            break;
        }
      }
      // Nothing of the model's size crosses (on 8 ranks each holds too few weights to say it
      // so); on one rank, exactly the fed rows of every micro-batch and a few once inputs (the
      // learning rate, Adam's step) to the GPU, and the packed loss back.
      const compiler::RankSummary& counted = summary.ranks.at(r);
      EXPECT_GE(counted.bytes_to_gpu, plan.micro_batches() * fed_per_micro);
      if (plan.ranks_size() <= 2) {
        EXPECT_LT(counted.bytes_to_gpu + counted.bytes_to_host, weights / 100);
      }
      if (plan.ranks_size() == 1) {
        EXPECT_LE(counted.bytes_to_gpu, plan.micro_batches() * fed_per_micro + 64);
        EXPECT_EQ(counted.bytes_to_host, packed);
      }
    }
    EXPECT_GT(on_gpu_tasks[proto::TaskProto::REPEAT], 0) << "weights into the micro-batches";
    EXPECT_GT(on_gpu_tasks[proto::TaskProto::ACCUMULATE], 0) << "the gradients are summed";
    EXPECT_GT(on_gpu_tasks[proto::TaskProto::PACK], 0) << "the fetched loss";
  }
}

TEST(DevicePlans, TheContractRefusesAHostTaskReadingGpuMemory) {
  const MlpLayout layout = all_on_cuda(testing::mlp_layouts()[0]);
  proto::PlanProto plan =
      compiler::compile_graph(testing::build_mlp(layout, OptimizerConfig::Kind::kSgd));
  proto::RankPlanProto* rank = plan.mutable_ranks(0);
  // Make the loss's copy to the host a plain host COPY: it would read GPU memory with memcpy.
  for (auto& task : *rank->mutable_tasks()) {
    if (task.kind() == proto::TaskProto::COPY_D2H) {
      task.set_kind(proto::TaskProto::COPY);
      break;
    }
  }
  try {
    check_plan_contract(plan);
    FAIL() << "the plan was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kFailedPrecondition);
    EXPECT_NE(std::string(e.what()).find("must read registers in PLAN_DEVICE_CPU memory"),
              std::string::npos)
        << e.what();
  }
}

// GPU work off the compute thread would run without the stream's events: its readers would
// hear of it when it was only queued. The contract refuses it, naming the task and thread.
TEST(DevicePlans, TheContractRefusesGpuWorkOffTheComputeThread) {
  const MlpLayout layout = all_on_cuda(testing::mlp_layouts()[0]);
  proto::PlanProto plan =
      compiler::compile_graph(testing::build_mlp(layout, OptimizerConfig::Kind::kSgd));
  check_plan_contract(plan);
  for (const auto kind : {proto::TaskProto::COMPUTE, proto::TaskProto::COPY_H2D}) {
    proto::PlanProto moved = plan;
    std::string name;
    for (auto& task : *moved.mutable_ranks(0)->mutable_tasks()) {
      if (task.kind() == kind) {
        task.set_thread(1);
        name = task.name();
        break;
      }
    }
    ASSERT_FALSE(name.empty()) << proto::TaskProto::Kind_Name(kind);
    try {
      check_plan_contract(moved);
      ADD_FAILURE() << "the plan was accepted with " << name << " on thread 1";
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_EQ(e.code(), ErrorCode::kFailedPrecondition);
      EXPECT_NE(what.find("must be on the rank's compute thread (0). However, it is on thread 1"),
                std::string::npos)
          << what;
      EXPECT_NE(what.find(name), std::string::npos) << what;
    }
  }
}

TEST(DevicePlans, WithoutAGpuLoadingAGpuPlanFailsNamingTheRank) {
  if (cuda::device_count() > 0) GTEST_SKIP() << "this machine has a GPU";
  const MlpLayout layout = all_on_cuda(find_layout(testing::mlp_layouts(), "dp2"));
  const proto::PlanProto plan =
      compiler::compile_graph(testing::build_mlp(layout, OptimizerConfig::Kind::kSgd));
  try {
    Runtime runtime(plan, RuntimeOptions{});
    FAIL() << "the plan loaded";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnavailable);
    EXPECT_NE(std::string(e.what()).find("rank 0 runs tasks on a GPU, so it needs CUDA device 0"),
              std::string::npos)
        << e.what();
  }
}

// OFL_CUDA_DEVICE (several ranks sharing a GPU) must be a GPU index; anything else is refused
// naming the variable, before a device is looked at.
TEST(DevicePlans, ABadGpuChoiceInTheEnvironmentIsRefusedNamingIt) {
  const MlpLayout layout = all_on_cuda(testing::mlp_layouts()[0]);
  const proto::PlanProto plan =
      compiler::compile_graph(testing::build_mlp(layout, OptimizerConfig::Kind::kSgd));
  for (const char* value : {"one", "-1", "", "2x"}) {
    SCOPED_TRACE(value);
    ::setenv("OFL_CUDA_DEVICE", value, 1);
    RuntimeOptions options;
    options.simulate_cuda = true;
    try {
      Runtime runtime(plan, options);
      ADD_FAILURE() << "the plan loaded";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(str_cat("OFL_CUDA_DEVICE must be a GPU index (an "
                                                   "integer >= 0). However, got '",
                                                   value, "'.")),
                std::string::npos)
          << e.what();
    }
  }
  ::unsetenv("OFL_CUDA_DEVICE");
  RuntimeOptions options;
  options.simulate_cuda = true;
  ::setenv("OFL_CUDA_DEVICE", "0", 1);
  EXPECT_NO_THROW(Runtime(plan, options));
  ::unsetenv("OFL_CUDA_DEVICE");
}

// Every layout on the GPU placements trains like one CPU rank: simulated here, and on the GPU
// too when there is one (one GPU hosts every rank then: ranks take consecutive device indices,
// so only the one-rank layouts run there).
void expect_mlp_layouts_train_like_one_cpu_rank(bool simulate) {
  const auto kind = OptimizerConfig::Kind::kAdamW;
  const std::vector<MlpLayout> layouts = testing::mlp_layouts();
  const TrainingRun reference = testing::train_mlp(layouts[0], kind, 3);
  std::vector<MlpLayout> cuda_layouts;
  for (const MlpLayout& layout : layouts) cuda_layouts.push_back(all_on_cuda(layout));
  for (const MlpLayout& layout : testing::mlp_pipelined_layouts()) {
    if (layout.name != "single") cuda_layouts.push_back(all_on_cuda(layout));
  }
  MlpLayout mixed = find_layout(testing::mlp_pipelined_layouts(), "pp2_micro4");
  mixed.later_stages[0] = on_cuda(mixed.later_stages[0]);
  mixed.name = "pp2_micro4_cpu_then_cuda";
  cuda_layouts.push_back(mixed);
  for (const MlpLayout& layout : cuda_layouts) {
    SCOPED_TRACE(layout.name);
    const int64_t ranks = layout.placement.num_ranks() * layout.num_stages();
    if (!simulate && ranks > cuda::device_count()) continue;
    testing::expect_same_training(
        reference, testing::train_mlp(layout, kind, 3, device_runner(simulate)), layout.name);
  }
}

TEST(DevicePlans, MlpOnGpuPlacementsTrainsLikeOneCpuRankSimulated) {
  expect_mlp_layouts_train_like_one_cpu_rank(/*simulate=*/true);
}

TEST(DevicePlans, MlpOnGpuPlacementsTrainsLikeOneCpuRankOnTheGpu) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device: " << cuda::why_no_device();
  expect_mlp_layouts_train_like_one_cpu_rank(/*simulate=*/false);
}

TEST(DevicePlans, GptOnGpuPlacementsTrainsLikeOneCpuRankSimulated) {
  compiler::GptConfig config = testing::tiny_gpt_config(/*n_layer=*/2);
  config.batch_size = 8;
  const TrainingRun reference = testing::train_gpt(config, GptParallel{}, 2);
  for (const auto& [name, parallel] :
       std::vector<std::pair<std::string, GptParallel>>{{"single", {1, 1, 1, 1}},
                                                        {"dp2_tp2", {2, 2, 1, 1}},
                                                        {"micro4", {1, 1, 1, 4}},
                                                        {"pp2_micro4", {1, 1, 2, 4}},
                                                        {"dp2_tp2_pp2_micro2", {2, 2, 2, 2}}}) {
    SCOPED_TRACE(name);
    GptParallel on_gpu = parallel;
    on_gpu.device = DeviceType::kCUDA;
    testing::expect_same_gpt_training(reference,
                                      testing::train_gpt(config, on_gpu, 2, device_runner(true)),
                                      config, name + "_cuda");
  }
  GptParallel deterministic{2, 1, 2, 2};
  deterministic.device = DeviceType::kCUDA;
  testing::expect_same_gpt_training(
      reference, testing::train_gpt(config, deterministic, 2, device_runner(true, true)), config,
      "dp2_pp2_micro2_cuda deterministic");
}

TEST(DevicePlans, GptOnOneGpuTrainsLikeOneCpuRank) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device: " << cuda::why_no_device();
  compiler::GptConfig config = testing::tiny_gpt_config(/*n_layer=*/2);
  config.batch_size = 8;
  const TrainingRun reference = testing::train_gpt(config, GptParallel{}, 2);
  for (const auto& [name, parallel] : std::vector<std::pair<std::string, GptParallel>>{
           {"cuda", {1, 1, 1, 1}}, {"cuda_micro4", {1, 1, 1, 4}}}) {
    GptParallel on_gpu = parallel;
    on_gpu.device = DeviceType::kCUDA;
    testing::expect_same_gpt_training(
        reference, testing::train_gpt(config, on_gpu, 2, device_runner(false)), config, name);
  }
}

}  // namespace
}  // namespace ofl::actor
