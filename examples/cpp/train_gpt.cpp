// Multi-rank GPT training from C++: a byte-level GPT on the King James text, with data, tensor
// and pipeline parallelism chosen by flags. Each process compiles its own rank's part of the
// plan, connects to the others over UCX and trains on the actor runtime. The Python front end
// (flow.nn.Graph) will drive the same machinery; this is the same job without it.
//
//   .venv/bin/python -m oneflowlike.distributed.launch --nproc_per_node 4 --no_python
//       build/examples/train_gpt --dp 2 --pp 2 --micro-batches 4 --steps 30
//
// Flags (nanoGPT names): --dp --tp --pp --micro-batches --n-layer --n-embd --n-head
// --block-size --batch-size (global) --lr --steps --seed --data PATH. Started without the
// launcher, it runs every rank in this process (the in-process cluster).

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>

#include "actor/runtime.h"
#include "comm/ucx_transport.h"
#include "compiler/compile.h"
#include "compiler/models/gpt.h"
#include "oneflowlike/common/logging.h"

namespace ofl {
namespace {

using Clock = std::chrono::steady_clock;
using compiler::GptConfig;
using compiler::GptNames;
using compiler::GptParallel;

struct Flags {
  GptParallel parallel;
  GptConfig config;
  double lr = 3e-3;
  int steps = 30;
  uint64_t seed = 1;
  std::string data = "examples/data/kjv-genesis-deuteronomy.txt";
};

Flags parse(int argc, char** argv) {
  Flags f;
  f.config.vocab_size = 256;  // bytes
  f.config.block_size = 64;
  f.config.n_layer = 4;
  f.config.n_head = 4;
  f.config.n_embd = 64;
  f.config.batch_size = 16;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    OFL_CHECK(i + 1 < argc, "[train_gpt] ", flag, " needs a value.");
    const std::string value = argv[++i];
    auto as_int = [&] { return std::stoll(value); };
    if (flag == "--dp")
      f.parallel.dp = static_cast<int>(as_int());
    else if (flag == "--tp")
      f.parallel.tp = static_cast<int>(as_int());
    else if (flag == "--pp")
      f.parallel.pp = static_cast<int>(as_int());
    else if (flag == "--micro-batches")
      f.parallel.micro_batches = static_cast<int>(as_int());
    else if (flag == "--n-layer")
      f.config.n_layer = as_int();
    else if (flag == "--n-embd")
      f.config.n_embd = as_int();
    else if (flag == "--n-head")
      f.config.n_head = as_int();
    else if (flag == "--block-size")
      f.config.block_size = as_int();
    else if (flag == "--batch-size")
      f.config.batch_size = as_int();
    else if (flag == "--lr")
      f.lr = std::stod(value);
    else if (flag == "--steps")
      f.steps = static_cast<int>(as_int());
    else if (flag == "--seed")
      f.seed = static_cast<uint64_t>(as_int());
    else if (flag == "--data")
      f.data = value;
    else
      OFL_CHECK(false, "[train_gpt] unknown flag '", flag, "'.");
  }
  return f;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  OFL_CHECK_CODE(in.good(), ErrorCode::kNotFound,
                 "[train_gpt] --data must name a readable file. "
                 "However, cannot read '",
                 path, "'.");
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The batch of step `step`: batch_size windows of block_size + 1 bytes at random places (the
// same on every rank: each takes its own region of the logical batch).
std::map<std::string, Tensor> batch(const Flags& f, const std::string& text, int step) {
  const int64_t b = f.config.batch_size, t = f.config.block_size;
  Tensor tokens = Tensor::empty(Shape{b, t}, DataType::kInt64);
  Tensor targets = Tensor::empty(Shape{b, t}, DataType::kInt64);
  std::mt19937_64 rng(f.seed * 1000003 + static_cast<uint64_t>(step));
  std::uniform_int_distribution<int64_t> start(0, static_cast<int64_t>(text.size()) - t - 2);
  for (int64_t i = 0; i < b; ++i) {
    const int64_t s = start(rng);
    for (int64_t j = 0; j < t; ++j) {
      tokens.data<int64_t>()[i * t + j] = static_cast<unsigned char>(text[s + j]);
      targets.data<int64_t>()[i * t + j] = static_cast<unsigned char>(text[s + j + 1]);
    }
  }
  std::map<std::string, Tensor> feed = {{GptNames::kTokens, tokens}, {GptNames::kTargets, targets}};
  for (int stage = 0; stage < f.parallel.pp; ++stage) {
    feed[GptNames::lr(stage)] = Tensor::scalar(f.lr, DataType::kFloat32);
    feed[GptNames::step(stage)] = Tensor::scalar(step, DataType::kFloat32);
  }
  return feed;
}

int run(int argc, char** argv) {
  const Flags f = parse(argc, argv);
  const std::string text = read_file(f.data);
  compiler::GraphBuilder b("gpt");
  const int loss = build_gpt(b, f.config, f.parallel);
  b.fetch(loss);
  b.set_loss(loss);
  b.train().optimizer.kind = compiler::OptimizerConfig::Kind::kAdamW;
  b.train().optimizer.weight_decay = 0.01;

  actor::RuntimeOptions options;
  compiler::CompileOptions compile;
  std::shared_ptr<comm::UcxTransport> transport;
  const int64_t world = f.parallel.num_ranks();
  // The rank that prints: the first of the last stage, whose loss piece counts.
  const int64_t reporter = (f.parallel.pp - 1) * f.parallel.dp * f.parallel.tp;
  int64_t rank = reporter;  // in one process, every rank is here
  if (std::getenv("RANK") != nullptr) {
    const comm::LaunchEnv env = comm::LaunchEnv::from_environment();
    OFL_CHECK(env.world_size == world, "[train_gpt] the launcher must start dp * tp * pp = ", world,
              " ranks. However, WORLD_SIZE is ", env.world_size, ".");
    rank = env.rank;
    compile.ranks = {env.rank};
    transport = comm::UcxTransport::connect(env);
    options.transport = transport;
  }
  const auto compile_start = Clock::now();
  actor::Runtime runtime(compiler::compile_graph(std::move(b.graph()), compile), options);
  runtime.initialize_variables();
  const bool report = rank == reporter;
  if (report) {
    std::printf(
        "gpt: %lld layers, %lld channels, %lld heads, block %lld, batch %lld on %lld ranks "
        "(dp %d x tp %d x pp %d, %d micro-batches); compile + load %.2f s\n",
        static_cast<long long>(f.config.n_layer), static_cast<long long>(f.config.n_embd),
        static_cast<long long>(f.config.n_head), static_cast<long long>(f.config.block_size),
        static_cast<long long>(f.config.batch_size), static_cast<long long>(world), f.parallel.dp,
        f.parallel.tp, f.parallel.pp, f.parallel.micro_batches,
        std::chrono::duration<double>(Clock::now() - compile_start).count());
  }
  double first = 0, last = 0;
  for (int step = 1; step <= f.steps; ++step) {
    const auto start = Clock::now();
    const auto fetched = runtime.run(batch(f, text, step));
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    if (!report) continue;
    const Tensor& losses = fetched.at(std::string(GptNames::kLoss) + "/out0");
    double mean = 0;
    for (int64_t i = 0; i < losses.numel(); ++i) mean += losses.data<float>()[i] / losses.numel();
    if (step == 1) first = mean;
    last = mean;
    std::printf("step %3d  loss %.4f  %7.1f ms  %8.0f tokens/s\n", step, mean, ms,
                f.config.batch_size * f.config.block_size / (ms / 1e3));
    std::fflush(stdout);
  }
  if (report) std::printf("loss %.4f -> %.4f over %d steps\n", first, last, f.steps);
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
    std::cerr << "[train_gpt] error: " << e.what() << std::endl;
    return 1;
  }
}
