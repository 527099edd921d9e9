// One rank of a multi-process training test (tests/python/test_multiprocess.py): compiles its
// rank's part of an MLP or GPT training plan, connects to the other ranks over UCX (the launch
// environment: RANK, WORLD_SIZE, MASTER_ADDR, ...), trains a few steps on the actor runtime and
// writes every piece it holds (variables, fetched outputs) to OUT/rank<R>.txt. With
// --in-process it runs every rank in this process instead and writes OUT/all.txt: the
// multi-process pieces must equal these bit for bit.
//
// Usage: ofl_train_worker --model mlp|gpt --layout NAME --steps N --out DIR [--in-process]
//          [--step-sleep-ms MS] [--die-rank R --die-at-step K]
//   --die-rank / --die-at-step: rank R kills itself (SIGKILL) before step K, for fault tests;
//   --step-sleep-ms: a pause before each step, so that such a death happens mid-run.
//   mlp layouts: the names in tests/cpp/models/mlp_training.h
//   gpt layouts: dp<a>_tp<b>_pp<c>_m<d> (any part may be left out: "dp2", "tp2_pp2_m4")

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <regex>
#include <thread>

#include "actor/runtime.h"
#include "comm/ucx_transport.h"
#include "compiler/compile.h"
#include "oneflowlike/common/logging.h"
#include "tests/cpp/models/gpt_training.h"
#include "tests/cpp/models/mlp_training.h"
#include "tests/cpp/ops/test_util.h"

namespace ofl {
namespace {

struct Args {
  std::string model = "mlp";
  std::string layout = "dp2";
  int steps = 3;
  std::string out = ".";
  bool in_process = false;
  int step_sleep_ms = 0;
  int64_t die_rank = -1;
  int die_at_step = -1;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    auto value = [&]() -> std::string {
      OFL_CHECK(i + 1 < argc, "[train_worker] ", flag, " needs a value.");
      return argv[++i];
    };
    if (flag == "--model") {
      a.model = value();
    } else if (flag == "--layout") {
      a.layout = value();
    } else if (flag == "--steps") {
      a.steps = std::stoi(value());
    } else if (flag == "--out") {
      a.out = value();
    } else if (flag == "--in-process") {
      a.in_process = true;
    } else if (flag == "--step-sleep-ms") {
      a.step_sleep_ms = std::stoi(value());
    } else if (flag == "--die-rank") {
      a.die_rank = std::stoll(value());
    } else if (flag == "--die-at-step") {
      a.die_at_step = std::stoi(value());
    } else {
      OFL_CHECK(false, "[train_worker] unknown flag '", flag, "'.");
    }
  }
  return a;
}

compiler::GptParallel parse_gpt_layout(const std::string& name) {
  compiler::GptParallel p;
  const std::regex part("(dp|tp|pp|m)(\\d+)");
  for (auto it = std::sregex_iterator(name.begin(), name.end(), part); it != std::sregex_iterator();
       ++it) {
    const int v = std::stoi((*it)[2]);
    const std::string key = (*it)[1];
    (key == "dp" ? p.dp : key == "tp" ? p.tp : key == "pp" ? p.pp : p.micro_batches) = v;
  }
  return p;
}

struct Job {
  compiler::Graph graph;
  std::function<std::map<std::string, Tensor>(int step)> feed;
};

Job make_job(const Args& a) {
  if (a.model == "gpt") {
    compiler::GptConfig config = testing::tiny_gpt_config(/*n_layer=*/2);
    config.batch_size = 8;
    const compiler::GptParallel parallel = parse_gpt_layout(a.layout);
    return {testing::build_gpt_training(config, parallel),
            [=](int step) { return testing::gpt_feed(config, parallel, step); }};
  }
  OFL_CHECK(a.model == "mlp", "[train_worker] --model must be mlp or gpt. However, got '", a.model,
            "'.");
  for (const auto& list : {testing::mlp_layouts(), testing::mlp_pipelined_layouts(),
                           testing::mlp_deep_pipelined_layouts()}) {
    for (const testing::MlpLayout& layout : list) {
      if (layout.name != a.layout) continue;
      const auto kind = compiler::OptimizerConfig::Kind::kAdamW;
      return {testing::build_mlp(layout, kind),
              [=](int step) { return testing::mlp_feed(layout, kind, step); }};
    }
  }
  OFL_CHECK(false, "[train_worker] no MLP layout named '", a.layout, "'.");
  return {};
}

// One line per piece: its name, then every value with 9 significant digits (exact for float32).
void write_pieces(const std::string& path, const std::map<std::string, Tensor>& pieces) {
  std::ofstream out(path);
  OFL_CHECK(out.good(), "[train_worker] cannot write '", path, "'.");
  for (const auto& [name, tensor] : pieces) {
    out << name;
    char buffer[32];
    for (double v : testing::values_of(tensor)) {
      std::snprintf(buffer, sizeof(buffer), " %.9g", v);
      out << buffer;
    }
    out << "\n";
  }
}

int run(int argc, char** argv) {
  const Args args = parse(argc, argv);
  Job job = make_job(args);
  actor::RuntimeOptions options;
  options.watchdog_seconds = 60;
  compiler::CompileOptions compile;
  std::shared_ptr<comm::UcxTransport> transport;
  std::string path = args.out + "/all.txt";
  int64_t rank = -1;
  if (!args.in_process) {
    const comm::LaunchEnv env = comm::LaunchEnv::from_environment();
    compile.ranks = {env.rank};  // each process compiles its own rank's part
    transport = comm::UcxTransport::connect(env);
    options.transport = transport;
    path = str_cat(args.out, "/rank", env.rank, ".txt");
    rank = env.rank;
  }
  actor::Runtime runtime(compiler::compile_graph(std::move(job.graph), compile), options);
  runtime.initialize_variables();
  for (int step = 1; step <= args.steps; ++step) {
    if (args.step_sleep_ms > 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(args.step_sleep_ms));
    }
    if (rank == args.die_rank && step == args.die_at_step) {
      std::cerr << "[train_worker] rank " << rank << " kills itself before step " << step
                << std::endl;
      raise(SIGKILL);
    }
    runtime.run(job.feed(step));
  }
  write_pieces(path, runtime.local_pieces());
  runtime.shutdown();
  if (transport) transport->leave();
  return 0;
}

}  // namespace
}  // namespace ofl

int main(int argc, char** argv) {
  ofl::init_logging(argv[0]);  // Note [Logging]
  try {
    return ofl::run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "[train_worker] error: " << e.what() << std::endl;
    return 1;
  }
}
