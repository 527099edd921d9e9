// oneflowlike-plan: compiles a saved job, or with --gpt the GPT training job of
// compiler/models/gpt.h built in place, and prints the plan summary (tasks,
// bytes moved and memory per rank, pipeline depth); optionally the whole plan
// as text and as Graphviz dot. With --gpt it also times the whole job (build,
// compile and check of every rank's part). Exit codes: 0 success, 1 the job
// could not be read or compiled, 2 bad command line.

#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/text_format.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <iostream>
#include <limits>
#include <numeric>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "compiler/compile.h"
#ifdef OFL_HUGE_PAGE_HEAP
#include "compiler/huge_page_heap.h"
#endif
#include "compiler/models/gpt.h"
#include "compiler/physical/memory_report.h"
#include "compiler/plan_dump.h"
#include "oneflowlike/common/error.h"
#include "oneflowlike/common/logging.h"
#include "oneflowlike/common/status.h"

namespace ofl::compiler {
namespace {

constexpr const char* kUsage =
    "usage: oneflowlike-plan JOB_FILE [--text] [--dot FILE] [--memory-limit "
    "BYTES]\n"
    "                        [--dump-after PASS|all --dump-dir DIR] [--ranks R,R,...]\n"
    "       oneflowlike-plan --gpt LAYERS --dp D --tp T --pp P [--micro-batches M]\n"
    "                        [--device cpu|cuda] [options above]\n"
    "\n"
    "Compiles a saved JobProto (text format when JOB_FILE ends in .pbtxt or "
    ".txt, binary\n"
    "otherwise) and prints the plan summary: tasks, bytes sent and received "
    "per rank per\n"
    "iteration (and copied between the host and the GPU), peak memory per rank "
    "with and\n"
    "without reuse, pipeline depth.\n"
    "With --gpt it builds a GPT training job instead (GPT-2 small widths, "
    "sequence 256,\n"
    "vocabulary 4096, AdamW, one sequence per data-parallel rank per "
    "micro-batch), compiles\n"
    "every rank's part and ends with 'whole job: N tasks, S s' (build + compile "
    "+ check).\n"
    "\n"
    "  --gpt LAYERS           the GPT job with LAYERS transformer blocks on dp x "
    "tp x pp ranks\n"
    "  --dp D, --tp T, --pp P data-, tensor- and pipeline-parallel degrees "
    "(default 1)\n"
    "  --micro-batches M      micro-batches per iteration (default 1)\n"
    "  --device cpu|cuda      where the GPT job computes (default cpu; "
    "compiling needs no GPU)\n"
    "  --text                 also print the whole plan, task by task\n"
    "  --dot FILE             write the plan as Graphviz dot to FILE\n"
    "  --memory-limit BYTES   fail when a rank's peak memory exceeds BYTES\n"
    "  --memory               print each rank's memory report (Note [Memory report])\n"
    "  --dump-after PASS|all  dump the logical graph after PASS (repeatable) "
    "or every pass\n"
    "  --dump-dir DIR         where graph dumps go (default: .)\n"
    "  --ranks R,R,...        compile only these ranks' parts (what one node needs)\n";

struct Arguments {
  std::string job_file;
  /// Set by --gpt: build this job instead of reading job_file.
  std::optional<GptParallel> gpt_parallel;
  int64_t gpt_layers = 0;
  bool text = false;
  bool memory = false;  // --memory: the memory report
  std::string dot_file;
  CompileOptions options;
};

struct UsageError {
  std::string message;
};

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The whole of `text` as an integer >= 1, or a UsageError naming `flag`.
int64_t positive_integer(const std::string& flag, const std::string& text,
                         const std::string& what) {
  size_t used = 0;
  long long number = 0;
  try {
    number = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size() || number < 1) {
    throw UsageError{flag + " needs " + what + ", got '" + text + "'"};
  }
  return number;
}

int positive_int(const std::string& flag, const std::string& text) {
  const int64_t number = positive_integer(flag, text, "a positive integer");
  if (number > std::numeric_limits<int>::max()) {
    throw UsageError{flag + " needs a positive integer, got '" + text + "'"};
  }
  return static_cast<int>(number);
}

Arguments parse_arguments(const std::vector<std::string>& args) {
  Arguments parsed;
  bool dump_dir_given = false;
  GptParallel parallel;
  std::vector<std::string> gpt_flags;  // --dp etc., which only mean something with --gpt
  auto parallel_degree = [&](const std::string& flag) -> int* {
    if (flag == "--dp") return &parallel.dp;
    if (flag == "--tp") return &parallel.tp;
    if (flag == "--pp") return &parallel.pp;
    if (flag == "--micro-batches") return &parallel.micro_batches;
    return nullptr;
  };
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    auto value = [&]() -> const std::string& {
      if (i + 1 >= args.size()) throw UsageError{arg + " needs a value"};
      return args[++i];
    };
    if (arg == "--memory") {
      parsed.memory = true;
    } else if (arg == "--text") {
      parsed.text = true;
    } else if (arg == "--dot") {
      parsed.dot_file = value();
    } else if (arg == "--memory-limit") {
      const std::string& bytes = value();
      size_t used = 0;
      long long limit = -1;
      try {
        limit = std::stoll(bytes, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used != bytes.size() || limit < 0) {
        throw UsageError{"--memory-limit needs a non-negative number of bytes, got '" + bytes +
                         "'"};
      }
      parsed.options.memory_limit_bytes = limit;
    } else if (arg == "--dump-after") {
      parsed.options.dump_after.push_back(value());
    } else if (arg == "--ranks") {
      const std::string& list = value();
      size_t start = 0;
      while (start <= list.size()) {
        const size_t comma = std::min(list.find(',', start), list.size());
        const std::string item = list.substr(start, comma - start);
        size_t used = 0;
        long long rank = -1;
        try {
          rank = std::stoll(item, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (item.empty() || used != item.size() || rank < 0) {
          throw UsageError{"--ranks needs comma-separated non-negative ranks, got '" + list + "'"};
        }
        parsed.options.ranks.push_back(rank);
        start = comma + 1;
      }
    } else if (arg == "--gpt") {
      parsed.gpt_layers = positive_integer(arg, value(), "a positive layer count");
    } else if (int* degree = parallel_degree(arg)) {
      *degree = positive_int(arg, value());
      gpt_flags.push_back(arg);
    } else if (arg == "--device") {
      const std::string& device = value();
      if (device != "cpu" && device != "cuda") {
        throw UsageError{"--device needs cpu or cuda, got '" + device + "'"};
      }
      parallel.device = device == "cuda" ? DeviceType::kCUDA : DeviceType::kCPU;
      gpt_flags.push_back(arg);
    } else if (arg == "--dump-dir") {
      parsed.options.dump_dir = value();
      dump_dir_given = true;
    } else if (!arg.empty() && arg[0] == '-') {
      throw UsageError{"unknown option " + arg};
    } else if (parsed.job_file.empty()) {
      parsed.job_file = arg;
    } else {
      throw UsageError{"more than one JOB_FILE: '" + parsed.job_file + "' and '" + arg + "'"};
    }
  }
  if (parsed.gpt_layers > 0) {
    if (!parsed.job_file.empty()) {
      throw UsageError{"--gpt builds its own job; it cannot be used with JOB_FILE '" +
                       parsed.job_file + "'"};
    }
    parsed.gpt_parallel = parallel;
  } else if (!gpt_flags.empty()) {
    throw UsageError{gpt_flags.front() + " is only used with --gpt"};
  } else if (parsed.job_file.empty()) {
    throw UsageError{"JOB_FILE is missing"};
  }
  if (dump_dir_given && parsed.options.dump_after.empty()) {
    throw UsageError{"--dump-dir is only used with --dump-after"};
  }
  return parsed;
}

// Collects the text parser's messages so they go into our error instead of
// protobuf's log.
class ParseErrors : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, google::protobuf::io::ColumnNumber column,
                const std::string& message) override {
    messages_ << (messages_.tellp() > 0 ? "; " : "") << "line " << line + 1 << " column "
              << column + 1 << ": " << message;
  }
  std::string str() const { return messages_.str(); }

 private:
  std::ostringstream messages_;
};

proto::JobProto read_job(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  OFL_CHECK_CODE(in.good(), ErrorCode::kNotFound, "[oneflowlike-plan] The job file '", path,
                 "' must be readable. However, it could not be opened.");
  std::ostringstream content;
  content << in.rdbuf();
  proto::JobProto job;
  if (ends_with(path, ".pbtxt") || ends_with(path, ".txt")) {
    ParseErrors errors;
    google::protobuf::TextFormat::Parser parser;
    parser.RecordErrorsTo(&errors);
    OFL_CHECK(parser.ParseFromString(content.str(), &job), "[oneflowlike-plan] The job file '",
              path, "' must hold a JobProto in text format. However, got: ", errors.str());
  } else {
    OFL_CHECK(job.ParseFromString(content.str()), "[oneflowlike-plan] The job file '", path,
              "' must hold a binary JobProto. However, it could not be parsed. "
              "HINT: text "
              "format files must end in .pbtxt or .txt.");
  }
  return job;
}

// The GPT training job (gpt_training_graph) at the widths of scripts/bench/bench_compiler.cpp (its
// bench_config): GPT-2 small widths (C 768, 12 heads), a short sequence (T 256) and a small
// vocabulary (4096), since shapes do not change compile time; AdamW with weight decay 0.1. The
// batch is one sequence per data-parallel rank per micro-batch. When tp does not divide 12 heads
// (tp 8), the model has lcm(12, tp) heads so every tensor-parallel rank gets whole heads, still
// over C 768 where they divide it and otherwise at GPT-2's head width 64.
Graph gpt_job(int64_t layers, const GptParallel& parallel) {
  GptConfig config;
  config.vocab_size = 4096;
  config.block_size = 256;
  config.n_layer = layers;
  config.n_head = std::lcm(int64_t{12}, int64_t{parallel.tp});
  config.n_embd = 768 % config.n_head == 0 ? 768 : 64 * config.n_head;
  config.batch_size = int64_t{parallel.dp} * parallel.micro_batches;
  return compiler::gpt_training_graph(config, parallel);
}

// compile() for the --gpt job: build errors (a layout that does not fit) come back as a Status.
Result<proto::PlanProto> compile_gpt(int64_t layers, const GptParallel& parallel,
                                     const CompileOptions& options, Graph* logical) {
  proto::PlanProto plan;
  Status status =
      capture_status([&] { plan = compile_graph(gpt_job(layers, parallel), options, logical); });
  if (!status.ok()) return status;
  return plan;
}

// compile() of a job file, also giving the logical graph (the memory report's kinds).
Result<proto::PlanProto> compile_job(const proto::JobProto& job, const CompileOptions& options,
                                     Graph* logical) {
  proto::PlanProto plan;
  Status status =
      capture_status([&] { plan = compile_graph(graph_from_job(job), options, logical); });
  if (!status.ok()) return status;
  return plan;
}

int run(const Arguments& arguments) {
  const auto start = std::chrono::steady_clock::now();
  Graph logical;
  Result<proto::PlanProto> plan =
      arguments.gpt_parallel.has_value()
          ? compile_gpt(arguments.gpt_layers, *arguments.gpt_parallel, arguments.options, &logical)
          : compile_job(read_job(arguments.job_file), arguments.options, &logical);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!plan.ok()) {
    std::cerr << "oneflowlike-plan: " << plan.status().message() << "\n";
    return 1;
  }
  std::cout << summary_to_text(summarize_plan(plan.value()));
  if (arguments.text) std::cout << "\n" << plan_to_text(plan.value());
  if (arguments.memory) {
    std::cout << physical::memory_report_to_text(
        physical::memory_report(plan.value(), physical::memory_kinds(logical)));
  }
  if (!arguments.dot_file.empty()) {
    std::ofstream dot(arguments.dot_file);
    dot << plan_to_dot(plan.value());
    dot.close();
    OFL_CHECK_CODE(dot.good(), ErrorCode::kUnavailable, "[oneflowlike-plan] The dot file '",
                   arguments.dot_file, "' must be writable. However, writing it failed.");
  }
  if (arguments.gpt_parallel.has_value()) {
    int64_t tasks = 0;
    for (const proto::RankPlanProto& rank : plan.value().ranks()) tasks += rank.tasks_size();
    char line[96];
    std::snprintf(line, sizeof(line), "whole job: %lld tasks, %.2f s\n",
                  static_cast<long long>(tasks), seconds);
    std::cout << line;
  }
  return 0;
}

}  // namespace
}  // namespace ofl::compiler

int main(int argc, char** argv) {
  ofl::init_logging(argv[0]);  // Note [Logging]
#ifdef OFL_HUGE_PAGE_HEAP
  ofl::compiler::use_huge_page_heap();
#endif
  std::vector<std::string> args(argv + 1, argv + argc);
  for (const std::string& arg : args) {
    if (arg == "-h" || arg == "--help") {
      std::cout << ofl::compiler::kUsage;
      return 0;
    }
  }
  ofl::compiler::Arguments arguments;
  try {
    arguments = ofl::compiler::parse_arguments(args);
  } catch (const ofl::compiler::UsageError& e) {
    std::cerr << "oneflowlike-plan: " << e.message << "\n\n" << ofl::compiler::kUsage;
    return 2;
  }
  try {
    return ofl::compiler::run(arguments);
  } catch (const ofl::Error& e) {
    std::cerr << "oneflowlike-plan: " << e.what() << "\n";
  } catch (const std::exception& e) {
    std::cerr << "oneflowlike-plan: internal error: " << e.what() << "\n";
  }
  return 1;
}
