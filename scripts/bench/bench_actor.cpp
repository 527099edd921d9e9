// Actor runtime benchmarks (docs/benchmarks.md, "Actor runtime (issue 4)"):
//  (a) a chain of 1,000 no-op actors (4-byte COPY tasks) on one thread and alternating between
//      two threads: microseconds per act, next to the floor of a cross-thread hand-off (two
//      threads bouncing an atomic) measured in the same run;
//  (b) the pipeline bubble of a 4-stage plan with 8 micro-batches against the ideal
//      (p - 1) / (m + p - 1);
//  (c) how much of the gradient all-reduce of a data-parallel plan is hidden behind backward.
// (b) and (c) use `bench_sleep`, an op registered here that copies its input and then sleeps
// (its gradient sleeps twice as long): stages then take a known time without using a core, so
// four stage threads behave like four devices on this 2-core machine, and what is measured is
// the runtime's schedule, not the machine's oversubscription.
//  (d) with --gpu: the chain of (a) with its actors on the GPU (a 4-byte device copy each, on
//      the rank's event-gated GPU stream, between a host-to-device and a device-to-host copy),
//      next to the host chain in the same run; without a GPU it runs simulated
//      (RuntimeOptions::simulate_cuda) and says so.
// Usage: bench_actor [--quick] | bench_actor --gpu

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <thread>

#include "actor/runtime.h"
#include "compiler/builder.h"
#include "compiler/compile.h"
#include "oneflowlike/cuda/device.h"
#include "oneflowlike/ops/matmul.h"
#include "oneflowlike/ops/reduce.h"
#include "tests/cpp/actor/plan_builder.h"

namespace ofl {

struct BenchSleepParams {
  double microseconds = 1000;
  OFL_PARAMS(BenchSleepParams, microseconds)
};

namespace {

std::vector<TensorMeta> infer_same(const InferContext& ctx) { return {ctx.input(0)}; }

std::vector<SbpSignature> sleep_signatures(const InferContext& ctx) {
  std::vector<SbpSignature> sigs;
  for (int i = 0; i < ctx.shape(0).ndim(); ++i) sigs.push_back({{S(i)}, {S(i)}});
  sigs.push_back({{B()}, {B()}});
  sigs.push_back({{P()}, {P()}});
  return sigs;
}

void sleep_gradient(GradBuilder& g) {
  const GradBuilder::Value dy = g.output_grad(0);
  if (dy == GradBuilder::kNone) return;
  g.set_input_grad(
      0, g.apply1("bench_sleep", BenchSleepParams{2 * g.params<BenchSleepParams>().microseconds},
                  {dy}));
}

template <class T>
struct BenchSleepKernel {
  static void run(const KernelContext& ctx) {
    std::memcpy(ctx.out(0).raw_data(), ctx.in(0).raw_data(), ctx.in(0).nbytes());
    std::this_thread::sleep_for(
        std::chrono::duration<double, std::micro>(ctx.p<BenchSleepParams>().microseconds));
  }
};

}  // namespace

OFL_REGISTER_OP("bench_sleep")
    .inputs({"x"})
    .outputs({"y"})
    .params<BenchSleepParams>()
    .set<FInferMeta>(infer_same)
    .set<FSbpSignatures>(sleep_signatures)
    .set<FGradient>(sleep_gradient);
OFL_REGISTER_KERNEL("bench_sleep", kCPU, BenchSleepKernel, float);

namespace actor {
namespace {

using Clock = std::chrono::steady_clock;
using compiler::GraphBuilder;
using compiler::Initializer;
using compiler::OptimizerConfig;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// (a) ------------------------------------------------------------------------------------------

proto::PlanProto chain_plan(int actors, bool two_threads) {
  testing::PlanBuilder b(1);
  int64_t previous = b.input(0, "x", Shape{1});
  for (int i = 0; i < actors; ++i) {
    const int64_t next = b.reg(0, str_cat("c", i), Shape{1});
    b.task(0, str_cat("copy", i), proto::TaskProto::COPY, {previous}, {next})
        ->set_thread(two_threads ? i % 2 : 0);
    previous = next;
  }
  b.output(0, "y", previous, Shape{1});
  return b.plan();
}

// (d): the chain's first copy brings the input to the GPU, the last takes it back to the host,
// and every copy between runs on the GPU (Note [Devices in a plan]).
proto::PlanProto gpu_chain_plan(int actors) {
  proto::PlanProto plan = chain_plan(actors, false);
  proto::RankPlanProto& rank = *plan.mutable_ranks(0);
  std::map<int64_t, proto::RegisterProto*> registers;
  for (auto& reg : *rank.mutable_registers()) registers[reg.id()] = &reg;
  for (auto& task : *rank.mutable_tasks()) {
    if (task.kind() != proto::TaskProto::COPY) continue;
    const int i = std::stoi(task.name().substr(4));
    if (i == actors - 1) {
      task.set_kind(proto::TaskProto::COPY_D2H);
      continue;
    }
    task.set_kind(i == 0 ? proto::TaskProto::COPY_H2D : proto::TaskProto::COPY);
    task.set_device(proto::PLAN_DEVICE_CUDA);
    registers.at(task.outputs(0))->set_device(proto::PLAN_DEVICE_CUDA);
  }
  return plan;
}

// Microseconds per act of the chain: best of 3 rounds of `iterations` runs.
double chain_us_per_act(int actors, bool two_threads, int iterations, bool stream = false,
                        bool gpu = false) {
  RuntimeOptions options;
  options.async_cpu_streams = stream;
  options.first_gpu = 0;
  options.simulate_cuda = gpu && cuda::device_count() == 0;
  Runtime runtime(gpu ? gpu_chain_plan(actors) : chain_plan(actors, two_threads), options);
  const std::map<std::string, Tensor> feed = {{"x", Tensor::zeros(Shape{1}, DataType::kFloat32)}};
  for (int i = 0; i < 10; ++i) runtime.run(feed);
  double best = 1e30;
  for (int round = 0; round < 3; ++round) {
    const auto start = Clock::now();
    for (int i = 0; i < iterations; ++i) runtime.run(feed);
    // Acts: the chain, input, output and the tick.
    best = std::min(best, seconds_since(start) * 1e6 / (iterations * double(actors + 3)));
  }
  return best;
}

// The floor of one cross-thread hand-off: two spinning threads bounce an atomic counter.
double handoff_us() {
  std::atomic<int64_t> turn{0};
  constexpr int64_t kRounds = 200000;
  std::thread other([&] {
    for (int64_t i = 1; i < 2 * kRounds; i += 2) {
      while (turn.load(std::memory_order_acquire) != i) {
      }
      turn.store(i + 1, std::memory_order_release);
    }
  });
  const auto start = Clock::now();
  for (int64_t i = 0; i < 2 * kRounds; i += 2) {
    while (turn.load(std::memory_order_acquire) != i) {
    }
    turn.store(i + 1, std::memory_order_release);
  }
  while (turn.load(std::memory_order_acquire) != 2 * kRounds) {
  }
  const double us = seconds_since(start) * 1e6 / (2 * kRounds);
  other.join();
  return us;
}

// (b) and (c) -----------------------------------------------------------------------------------

struct Timing {
  double iteration_ms = 0;      // wall time of one run(), best of the measured ones
  double busy_ms = 0;           // compute-thread busy time per rank, averaged
  double boxing_ms = 0;         // per rank: acts of boxing and transfer tasks, summed
  double hidden_boxing_ms = 0;  // of which ran while the rank's compute thread was busy
};

bool is_boxing(const Runtime::Act& act) {
  if (act.tick) return false;
  switch (act.kind) {
    case proto::TaskProto::SLICE:
    case proto::TaskProto::SEND:
    case proto::TaskProto::RECV:
    case proto::TaskProto::ADD:
    case proto::TaskProto::CONCAT:
    case proto::TaskProto::ZEROS:
      return true;
    default:
      return false;
  }
}

// Runs `plan` with tracing; measures the iteration with the shortest wall time.
Timing measure(const proto::PlanProto& plan, const std::map<std::string, Tensor>& feed,
               int iterations) {
  RuntimeOptions options;
  options.trace = true;
  Runtime runtime(plan, options);
  runtime.initialize_variables();
  runtime.run(feed);
  runtime.take_acts();
  Timing best;
  best.iteration_ms = 1e30;
  for (int i = 0; i < iterations; ++i) {
    const auto start = Clock::now();
    runtime.run(feed);
    const double ms = seconds_since(start) * 1e3;
    const std::vector<Runtime::Act> acts = runtime.take_acts();
    if (ms >= best.iteration_ms) continue;
    Timing t;
    t.iteration_ms = ms;
    std::map<int64_t, double> busy, boxing, hidden;
    std::map<int64_t, std::vector<std::pair<double, double>>> compute;  // rank -> intervals
    for (const Runtime::Act& a : acts) {
      if (a.thread == 0 && !a.tick) {
        busy[a.rank] += a.end_us - a.begin_us;
        if (a.kind == proto::TaskProto::COMPUTE) compute[a.rank].push_back({a.begin_us, a.end_us});
      }
    }
    for (const Runtime::Act& a : acts) {
      if (!is_boxing(a)) continue;
      boxing[a.rank] += a.end_us - a.begin_us;
      if (a.thread == 0) continue;  // on the compute thread it cannot overlap compute
      for (const auto& [b, e] : compute[a.rank]) {
        hidden[a.rank] += std::max(0.0, std::min(e, a.end_us) - std::max(b, a.begin_us));
      }
    }
    for (const auto& [rank, us] : busy) t.busy_ms += us / 1e3 / busy.size();
    for (const auto& [rank, us] : boxing) t.boxing_ms += us / 1e3 / boxing.size();
    for (const auto& [rank, us] : hidden) t.hidden_boxing_ms += us / 1e3 / boxing.size();
    best = t;
  }
  return best;
}

// (b): 4 stages, one rank each; stage s: h = bench_sleep(h * w_s). Forward sleeps `forward_us`
// per stage and micro-batch, backward twice that.
proto::PlanProto pipeline_plan(int stages, int micro_batches, double forward_us) {
  GraphBuilder b("pipeline");
  const int64_t rows = 2;
  b.set_placement(Placement::parse("cpu, [0]"));
  int h = b.input("x", Shape{rows, 4}, DataType::kFloat32, {B()});
  for (int s = 0; s < stages; ++s) {
    b.set_placement(Placement::parse(str_cat("cpu, [", s, "]")));
    b.set_stage(s);
    const int w =
        b.variable(str_cat("w", s), Shape{4}, Initializer{Initializer::Kind::kOnes}, {B()});
    h = b.op1("bench_sleep", BenchSleepParams{forward_us}, {b.op1("mul", NoParams{}, {h, w})});
  }
  // mean(h * h): its gradient 2h depends on the forward pass, as a real loss's does.
  const int loss = b.op1("reduce_mean", ReduceParams{}, {b.op1("mul", NoParams{}, {h, h})}, "loss");
  b.fetch(loss);
  b.set_loss(loss);
  b.train().optimizer.kind = OptimizerConfig::Kind::kSgd;
  b.train().gradient_accumulation_steps = micro_batches;
  return compiler::compile_graph(std::move(b.graph()));
}

std::map<std::string, Tensor> pipeline_feed(int stages, int micro_batches) {
  std::map<std::string, Tensor> feed = {
      {"x", Tensor::zeros(Shape{2 * micro_batches, 4}, DataType::kFloat32)}};
  for (int s = 0; s < stages; ++s) {
    feed[s == 0 ? std::string("lr") : str_cat("lr@", s)] = Tensor::scalar(0.0, DataType::kFloat32);
  }
  return feed;
}

// (c): data parallel over `ranks`; layers of h = bench_sleep(h @ W_l), W_l (width, width)
// broadcast, so each W_l's gradient is all-reduced while backward goes on to earlier layers.
proto::PlanProto data_parallel_plan(int ranks, int layers, int64_t width, int64_t rows,
                                    double forward_us) {
  GraphBuilder b("data_parallel");
  std::string placement = "cpu, [";
  for (int r = 0; r < ranks; ++r) placement += str_cat(r ? ", " : "", r);
  b.set_placement(Placement::parse(placement + "]"));
  int h = b.input("x", Shape{rows * ranks, width}, DataType::kFloat32, {S(0)});
  for (int l = 0; l < layers; ++l) {
    const int w = b.variable(str_cat("w", l), Shape{width, width},
                             Initializer{Initializer::Kind::kNormal, 0.0, 0.02, l}, {B()});
    h = b.op1("bench_sleep", BenchSleepParams{forward_us},
              {b.op1("matmul", MatmulParams{}, {h, w})});
  }
  const int loss = b.op1("reduce_mean", ReduceParams{}, {b.op1("mul", NoParams{}, {h, h})}, "loss");
  b.fetch(loss);
  b.set_loss(loss);
  b.train().optimizer.kind = OptimizerConfig::Kind::kSgd;
  return compiler::compile_graph(std::move(b.graph()));
}

int main_gpu() {
  const bool simulated = cuda::device_count() == 0;
  std::printf("# bench_actor --gpu%s\n",
              simulated ? " (no CUDA device: simulated on the host)" : "");
  const int iterations = 300;
  const double host = chain_us_per_act(1000, false, iterations);
  const double gpu = chain_us_per_act(1000, false, iterations, false, /*gpu=*/true);
  std::printf("(d) chain of 1000 copy actors\n");
  std::printf("    on the host, one thread: %.3f us/act\n", host);
  std::printf(
      "    on the GPU%s (4-byte device copies on its event-gated stream): %.3f us/act   goal "
      "< 10 us\n",
      simulated ? " (simulated)" : "", gpu);
  return 0;
}

int main(bool quick) {
  std::printf("# bench_actor%s\n", quick ? " --quick" : "");
  const int iterations = quick ? 50 : 300;
  const double handoff = handoff_us();
  const double one = chain_us_per_act(1000, false, iterations);
  const double two = chain_us_per_act(1000, true, iterations);
  const double streamed = chain_us_per_act(1000, false, iterations, /*stream=*/true);
  std::printf("(a) chain of 1000 no-op actors\n");
  std::printf("    one thread:  %.3f us/act (%.2f M acts/s)   goal <= 1 us\n", one, 1 / one);
  std::printf("    two threads: %.3f us/act (%.2f M acts/s)   goal <= 5 us\n", two, 1 / two);
  std::printf(
      "    cross-thread hand-off floor (atomic ping-pong): %.3f us; two-thread act / "
      "hand-off = %.1fx\n",
      handoff, two / handoff);
  std::printf(
      "    one thread, work on a CPU worker stream (Note [Event-gated acts]): %.3f us/act\n",
      streamed);

  const int stages = 4, micro = 8;
  const double forward_us = quick ? 1000 : 2000;
  const Timing pipe = measure(pipeline_plan(stages, micro, forward_us),
                              pipeline_feed(stages, micro), quick ? 3 : 10);
  const double ideal = double(stages - 1) / (micro + stages - 1);
  const double bubble = 1 - pipe.busy_ms / pipe.iteration_ms;
  std::printf(
      "(b) pipeline, %d stages x %d micro-batches, forward %.0f us, backward %.0f us per "
      "stage and micro-batch\n",
      stages, micro, forward_us, 2 * forward_us);
  std::printf(
      "    iteration %.1f ms, busy per stage %.1f ms: bubble %.1f%% (ideal %.1f%%, "
      "%+.1f points)   goal within 5 points\n",
      pipe.iteration_ms, pipe.busy_ms, 100 * bubble, 100 * ideal, 100 * (bubble - ideal));

  const int layers = 4;
  const int64_t width = 512, rows = 64;
  const Timing dp = measure(data_parallel_plan(2, layers, width, rows, forward_us),
                            {{"x", Tensor::zeros(Shape{2 * rows, width}, DataType::kFloat32)},
                             {"lr", Tensor::scalar(0.0, DataType::kFloat32)}},
                            quick ? 3 : 10);
  const Timing alone = measure(data_parallel_plan(1, layers, width, rows, forward_us),
                               {{"x", Tensor::zeros(Shape{rows, width}, DataType::kFloat32)},
                                {"lr", Tensor::scalar(0.0, DataType::kFloat32)}},
                               quick ? 3 : 10);
  const double exposed = std::max(0.0, dp.iteration_ms - alone.iteration_ms);
  std::printf(
      "(c) data parallel on 2 ranks, %d layers of (%lld x %lld) float32 weights "
      "(%.1f MiB of gradients), %lld rows per rank\n",
      layers, static_cast<long long>(width), static_cast<long long>(width),
      layers * width * width * 4 / 1048576.0, static_cast<long long>(rows));
  std::printf(
      "    iteration %.2f ms vs %.2f ms on 1 rank with the same rows: %.2f ms exposed; "
      "all-reduce acts %.2f ms per rank\n",
      dp.iteration_ms, alone.iteration_ms, exposed, dp.boxing_ms);
  std::printf(
      "    hidden: %.0f%% by wall time (1 - exposed / all-reduce acts); %.0f%% of the "
      "all-reduce acts ran on the communication thread during compute\n",
      100 * std::max(0.0, 1 - exposed / dp.boxing_ms), 100 * dp.hidden_boxing_ms / dp.boxing_ms);
  return 0;
}

}  // namespace
}  // namespace actor
}  // namespace ofl

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "--gpu") == 0) return ofl::actor::main_gpu();
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  return ofl::actor::main(quick);
}
