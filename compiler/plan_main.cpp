// oneflowlike-plan: compiles a saved job and prints the plan summary (tasks,
// bytes moved and memory per rank, pipeline depth); optionally the whole plan
// as text and as Graphviz dot. Exit codes: 0 success, 1 the job could not be
// read or compiled, 2 bad command line.

#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/text_format.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "compiler/compile.h"
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
    "\n"
    "Compiles a saved JobProto (text format when JOB_FILE ends in .pbtxt or "
    ".txt, binary\n"
    "otherwise) and prints the plan summary: tasks, bytes sent and received "
    "per rank per\n"
    "iteration, peak memory per rank with and without reuse, pipeline depth.\n"
    "\n"
    "  --text                 also print the whole plan, task by task\n"
    "  --dot FILE             write the plan as Graphviz dot to FILE\n"
    "  --memory-limit BYTES   fail when a rank's peak memory exceeds BYTES\n"
    "  --dump-after PASS|all  dump the logical graph after PASS (repeatable) "
    "or every pass\n"
    "  --dump-dir DIR         where graph dumps go (default: .)\n"
    "  --ranks R,R,...        compile only these ranks' parts (what one node needs)\n";

struct Arguments {
  std::string job_file;
  bool text = false;
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

Arguments parse_arguments(const std::vector<std::string>& args) {
  Arguments parsed;
  bool dump_dir_given = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    auto value = [&]() -> const std::string& {
      if (i + 1 >= args.size()) throw UsageError{arg + " needs a value"};
      return args[++i];
    };
    if (arg == "--text") {
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
  if (parsed.job_file.empty()) throw UsageError{"JOB_FILE is missing"};
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

int run(const Arguments& arguments) {
  const proto::JobProto job = read_job(arguments.job_file);
  Result<proto::PlanProto> plan = compile(job, arguments.options);
  if (!plan.ok()) {
    std::cerr << "oneflowlike-plan: " << plan.status().message() << "\n";
    return 1;
  }
  std::cout << summary_to_text(summarize_plan(plan.value()));
  if (arguments.text) std::cout << "\n" << plan_to_text(plan.value());
  if (!arguments.dot_file.empty()) {
    std::ofstream dot(arguments.dot_file);
    dot << plan_to_dot(plan.value());
    dot.close();
    OFL_CHECK_CODE(dot.good(), ErrorCode::kUnavailable, "[oneflowlike-plan] The dot file '",
                   arguments.dot_file, "' must be writable. However, writing it failed.");
  }
  return 0;
}

}  // namespace
}  // namespace ofl::compiler

int main(int argc, char** argv) {
  ofl::init_logging(argv[0]);  // Note [Logging]
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
