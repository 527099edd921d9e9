// Compiler benchmarks on GPT training jobs (docs/benchmarks.md, "Compiler (issue 3)"):
//  (a) memory planning: peak bytes of a 1-rank plan with buffer reuse vs without;
//  (b) compile time of a 24-layer GPT on 8 ranks as dp2 x tp2 x pp2 with 4 micro-batches (the
//      issue's configuration), best of 3, split by phase;
//  (c) compile-time scaling over ranks (dp = ranks / 2, tp = 2) and layers.
//  (d) the part one process compiles: one rank of the same jobs (CompileOptions::ranks).
// Plans are compiled, never run. Usage: bench_compiler [--quick]

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "compiler/compile.h"
#include "compiler/models/gpt.h"
#include "compiler/passes/passes.h"
#include "compiler/physical/expansion.h"
#include "compiler/physical/memory_planning.h"
#include "oneflowlike/plan_contract.h"

namespace ofl::compiler {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// GPT-2 small widths with a short sequence and a small vocabulary: shapes do not change compile
// time, only the bytes memory planning reports.
GptConfig bench_config(int64_t layers, int64_t batch) {
  GptConfig c;
  c.vocab_size = 4096;
  c.block_size = 256;
  c.n_layer = layers;
  c.n_head = 12;
  c.n_embd = 768;
  c.batch_size = batch;
  return c;
}

double mib(int64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }

void memory_planning() {
  const GptConfig config = bench_config(/*layers=*/12, /*batch=*/8);
  const proto::PlanProto plan = compile_graph(gpt_training_graph(config, GptParallel{}));
  const proto::RankPlanProto& rank = plan.ranks(0);
  const double reduction = 1.0 - static_cast<double>(rank.peak_bytes()) /
                                     static_cast<double>(rank.bytes_without_reuse());
  std::printf(
      "## (a) memory planning: GPT 12 layers, C 768, H 12, T 256, batch 8, vocab 4096, "
      "AdamW, 1 rank\n\n");
  std::printf("| tasks | registers | peak with reuse | without reuse | reduction | goal |\n");
  std::printf("| --- | --- | --- | --- | --- | --- |\n");
  std::printf("| %d | %d | %.1f MiB | %.1f MiB | %.1f%% | >= 40%% |\n\n", rank.tasks_size(),
              rank.registers_size(), mib(rank.peak_bytes()), mib(rank.bytes_without_reuse()),
              100.0 * reduction);
}

// The phases of compile_graph, timed one by one on the same graph. "other" is what
// compile_graph does between them (in-place write ordering and task sorting), measured as the
// difference to an untimed compile_graph of the same job.
struct PhaseTimes {
  std::vector<std::pair<std::string, double>> passes;
  double expand = 0, memory = 0, checks = 0, total = 0;
  int64_t tasks = 0;
};

PhaseTimes time_phases(const GptConfig& config, const GptParallel& parallel) {
  PhaseTimes t;
  Graph graph = gpt_training_graph(config, parallel);
  std::vector<std::unique_ptr<Pass>> passes;
  passes.push_back(make_shape_inference_pass());
  passes.push_back(make_autograd_pass());
  passes.push_back(make_checkpointing_pass());
  passes.push_back(make_zero_pass());
  passes.push_back(make_optimizer_pass());
  passes.push_back(make_common_subexpression_elimination_pass());
  passes.push_back(make_fusion_pass());
  passes.push_back(make_dead_code_elimination_pass());
  passes.push_back(make_sbp_inference_pass());
  passes.push_back(make_boxing_insertion_pass());
  // The phases must be compile_graph's; say so if the default pipeline has changed.
  std::vector<std::string> names;
  for (const auto& pass : passes) names.push_back(pass->name());
  if (names != default_pass_manager().pass_names()) {
    std::printf("WARNING: the timed passes differ from default_pass_manager()'s\n\n");
  }
  const CompileOptions options;
  for (auto& pass : passes) {
    const auto start = Clock::now();
    pass->run(graph, options);
    t.passes.emplace_back(pass->name(), seconds_since(start));
  }
  auto start = Clock::now();
  proto::PlanProto plan = physical::expand_to_plan(graph);
  t.expand = seconds_since(start);
  start = Clock::now();
  physical::plan_memory(&plan);
  t.memory = seconds_since(start);
  start = Clock::now();
  check_plan_contract(plan);
  t.checks = seconds_since(start);
  for (const auto& rank : plan.ranks()) t.tasks += rank.tasks_size();
  return t;
}

// Best of `repeats` wall-clock compile_graph times; the graph is built outside the timing.
double compile_seconds(const GptConfig& config, const GptParallel& parallel, int repeats,
                       int64_t* tasks = nullptr, const CompileOptions& options = {}) {
  double best = std::numeric_limits<double>::infinity();
  for (int r = 0; r < repeats; ++r) {
    Graph graph = gpt_training_graph(config, parallel);
    const auto start = Clock::now();
    const proto::PlanProto plan = compile_graph(std::move(graph), options);
    best = std::min(best, seconds_since(start));
    if (tasks != nullptr) {
      *tasks = 0;
      for (const auto& rank : plan.ranks()) *tasks += rank.tasks_size();
    }
  }
  return best;
}

void print_phases(const GptConfig& config, const GptParallel& parallel, double compile_total) {
  const PhaseTimes t = time_phases(config, parallel);
  double logical = 0;
  for (const auto& [name, s] : t.passes) logical += s;
  std::printf("| phase | seconds | share |\n| --- | --- | --- |\n");
  const double sum = logical + t.expand + t.memory + t.checks;
  for (const auto& [name, s] : t.passes) {
    std::printf("| pass %s | %.3f | %.1f%% |\n", name.c_str(), s, 100 * s / sum);
  }
  std::printf("| run_logical_passes (sum) | %.3f | %.1f%% |\n", logical, 100 * logical / sum);
  std::printf("| expand_to_plan | %.3f | %.1f%% |\n", t.expand, 100 * t.expand / sum);
  std::printf("| plan_memory | %.3f | %.1f%% |\n", t.memory, 100 * t.memory / sum);
  std::printf("| check_plan | %.3f | %.1f%% |\n", t.checks, 100 * t.checks / sum);
  std::printf("| other (compile_graph - phases) | %.3f | |\n\n",
              std::max(0.0, compile_total - sum));
}

void compile_time(int repeats) {
  const GptConfig config = bench_config(/*layers=*/24, /*batch=*/8);
  const GptParallel parallel{.dp = 2, .tp = 2, .pp = 2, .micro_batches = 4};
  int64_t tasks = 0;
  const double best = compile_seconds(config, parallel, repeats, &tasks);
  std::printf(
      "## (b) compile time: GPT 24 layers on 8 ranks (dp2 x tp2 x pp2, 4 micro-batches), "
      "AdamW\n\n");
  std::printf("compile_graph best of %d: %.3f s (goal < 2 s); %lld tasks in the plan\n\n", repeats,
              best, static_cast<long long>(tasks));
  print_phases(config, parallel, best);
}

void scaling(const std::vector<int>& ranks, const std::vector<int64_t>& layers, int repeats) {
  std::printf("## (c) compile-time scaling: dp = ranks / 2, tp = 2, batch 64, best of %d\n\n",
              repeats);
  std::printf("| layers | ranks | tasks | compile s | ms per (layer x rank) |\n");
  std::printf("| --- | --- | --- | --- | --- |\n");
  for (int64_t l : layers) {
    for (int r : ranks) {
      int64_t tasks = 0;
      const double s = compile_seconds(bench_config(l, /*batch=*/64),
                                       GptParallel{.dp = r / 2, .tp = 2}, repeats, &tasks);
      std::printf("| %lld | %d | %lld | %.3f | %.3f |\n", static_cast<long long>(l), r,
                  static_cast<long long>(tasks), s, 1e3 * s / static_cast<double>(l * r));
      std::fflush(stdout);
    }
  }
  std::printf("\n");
  const GptConfig config = bench_config(layers.front(), /*batch=*/64);
  const GptParallel parallel{.dp = ranks.back() / 2, .tp = 2};
  std::printf("Phases at %lld layers on %d ranks:\n\n", static_cast<long long>(layers.front()),
              ranks.back());
  print_phases(config, parallel, compile_seconds(config, parallel, /*repeats=*/1));
}

// (d) What one process compiles: only its own rank (CompileOptions::ranks), over layers and
// ranks; for the first layer count also the whole job in one process, for comparison.
void per_rank_scaling(const std::vector<int>& ranks, const std::vector<int64_t>& layers) {
  std::printf("## (d) compiling one rank's part: dp = ranks / 2, tp = 2, batch 64\n\n");
  std::printf(
      "| layers | ranks | tasks of rank 0 | compile s (rank 0) | ms per (layer x rank) | "
      "whole job s |\n");
  std::printf("| --- | --- | --- | --- | --- | --- |\n");
  for (int64_t l : layers) {
    for (int r : ranks) {
      CompileOptions one;
      one.ranks = {0};
      int64_t tasks = 0, all_tasks = 0;
      const GptConfig config = bench_config(l, /*batch=*/64);
      const GptParallel parallel{.dp = r / 2, .tp = 2};
      const double part = compile_seconds(config, parallel, /*repeats=*/1, &tasks, one);
      std::string whole = "";
      if (l == layers.front()) {
        whole = str_cat(compile_seconds(config, parallel, /*repeats=*/1, &all_tasks));
      }
      std::printf("| %lld | %d | %lld | %.3f | %.3f | %s |\n", static_cast<long long>(l), r,
                  static_cast<long long>(tasks), part, 1e3 * part / static_cast<double>(l * r),
                  whole.c_str());
      std::fflush(stdout);
    }
  }
  std::printf("\n");
}

}  // namespace
}  // namespace ofl::compiler

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  if (argc > 1 && std::strcmp(argv[1], "--per-rank") == 0) {  // (d) alone
    ofl::compiler::per_rank_scaling({8, 16, 32, 64}, {6, 12, 24});
    return 0;
  }
  ofl::compiler::memory_planning();
  std::fflush(stdout);
  ofl::compiler::compile_time(/*repeats=*/quick ? 1 : 3);
  std::fflush(stdout);
  if (quick) {
    ofl::compiler::scaling({8, 16}, {6}, /*repeats=*/1);
  } else {
    ofl::compiler::scaling({8, 16, 32, 64}, {6, 12, 24}, /*repeats=*/1);
  }
  ofl::compiler::per_rank_scaling(
      quick ? std::vector<int>{8, 16} : std::vector<int>{8, 16, 32, 64},
      quick ? std::vector<int64_t>{6} : std::vector<int64_t>{6, 12, 24});
  return 0;
}
