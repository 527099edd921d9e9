// Runs the oneflowlike-plan command line tool on saved jobs, as a user would.

#include <google/protobuf/text_format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "compiler/builder.h"
#include "compiler/physical/memory_report.h"
#include "oneflowlike/kernels/cpu/onednn_matmul.h"
#include "oneflowlike/ops/matmul.h"
#include "oneflowlike/ops/reduce.h"
#include "oneflowlike/proto/job.pb.h"

namespace ofl::compiler {
namespace {

struct Result {
  int exit_code;
  std::string output;
};

Result run(const std::string& args) {
  const std::string command = std::string(OFL_PLAN_CLI) + " " + args + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  std::string output;
  char buffer[4096];
  while (size_t n = fread(buffer, 1, sizeof(buffer), pipe)) output.append(buffer, n);
  const int status = pclose(pipe);
  return {WEXITSTATUS(status), output};
}

std::string save_job(const std::string& name, bool bad_shape) {
  GraphBuilder b("cli_job");
  b.set_placement(Placement::parse("cpu, [0, 1]"));
  const int x = b.input("x", Shape{8, 4}, DataType::kFloat32, {S(0)});
  const int w = b.variable("w", Shape{4, 3}, Initializer{Initializer::Kind::kNormal, 0, 0.1, 1});
  const int y = b.op1("matmul", MatmulParams{}, {x, w}, "fc");
  b.set_loss(b.op1("reduce_sum", ReduceParams{}, {y}, "loss"));
  b.train().optimizer.kind = OptimizerConfig::Kind::kSgd;
  proto::JobProto job;
  b.to_job(&job);
  if (bad_shape) job.mutable_ops(1)->mutable_outputs(0)->mutable_shape()->set_dims(0, 5);
  std::string text;
  google::protobuf::TextFormat::PrintToString(job, &text);
  const std::string path = ::testing::TempDir() + "/" + name + ".pbtxt";
  std::ofstream(path) << text;
  return path;
}

TEST(PlanCli, PrintsTheSummaryOfASavedJob) {
  const Result r = run(save_job("good", false) + " --dot " + ::testing::TempDir() + "/plan.dot");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("rank 0:"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("rank 1:"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("per iteration: sent"), std::string::npos) << r.output;
  std::ifstream dot(::testing::TempDir() + "/plan.dot");
  std::stringstream all;
  all << dot.rdbuf();
  EXPECT_EQ(all.str().rfind("digraph", 0), 0u);
}

// Note [Memory report]: the saved job's w (4, 3) float32 is 48 bytes on each rank (B), and SGD's
// momentum as much again. The kernel workspace is oneDNN's scratchpad for the larger of the
// rank's two matmuls, x (4, 4) @ w and x^T @ dy (Note [oneDNN matmul scratchpad]).
TEST(PlanCli, MemoryReportCountsEachKindOnEveryRank) {
  const Result r = run(save_job("memory", false) + " --memory");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  int64_t scratchpad = 0;
  for (const bool transpose_a : {false, true}) {
    const cpu::MatmulProduct product = cpu::matmul_product(
        /*batched=*/false, Shape{4, 4}, Shape{4, 3}, Shape{4, 3}, MatmulParams{transpose_a});
    scratchpad =
        std::max(scratchpad, cpu::onednn_matmul_scratchpad_bytes(DataType::kFloat32, product));
  }
  physical::RankMemoryReport expected;
  expected.workspace = scratchpad;
  const std::string text = physical::memory_report_to_text({expected});
  const std::string workspace = text.substr(text.find("kernel workspace "));
  for (const char* rank : {"rank 0: planned peak", "rank 1: planned peak"}) {
    const size_t at = r.output.find(rank);
    ASSERT_NE(at, std::string::npos) << r.output;
    const std::string line = r.output.substr(at, r.output.find('\n', at) - at);
    EXPECT_NE(line.find("parameters 48 B,"), std::string::npos) << line;
    EXPECT_NE(line.find("optimizer state 48 B,"), std::string::npos) << line;
    EXPECT_NE(line.find(workspace.substr(0, workspace.size() - 1)), std::string::npos)
        << line << " (expected " << workspace << ")";
  }
}

TEST(PlanCli, CompilesOnlyTheRanksOfOneNodeOnRequest) {
  const Result r = run(save_job("node", false) + " --ranks 1");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("rank 1:"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("rank 0:"), std::string::npos) << r.output;
  const Result bad = run(save_job("node2", false) + " --ranks 7");
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.output.find("rank 7 is not in the job"), std::string::npos) << bad.output;
  EXPECT_EQ(run(save_job("node3", false) + " --ranks x").exit_code, 2);
}

TEST(PlanCli, UserErrorsExitWithOneAndAMessage) {
  const Result r = run(save_job("bad", true));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("[matmul]"), std::string::npos) << r.output;
  const Result limit = run(save_job("good2", false) + " --memory-limit 16");
  EXPECT_EQ(limit.exit_code, 1);
  EXPECT_NE(limit.output.find("memory limit"), std::string::npos) << limit.output;
  const Result missing = run("/nonexistent/job.pbtxt");
  EXPECT_EQ(missing.exit_code, 1) << missing.output;
}

TEST(PlanCli, BadFlagsPrintUsageAndExitWithTwo) {
  const Result r = run("--no-such-flag");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("usage"), std::string::npos) << r.output;
}

// The first group of every match of `line` in `output`, as numbers.
std::vector<long long> matched_numbers(const std::string& output, const std::regex& line) {
  std::vector<long long> numbers;
  for (std::sregex_iterator it(output.begin(), output.end(), line), end; it != end; ++it) {
    numbers.push_back(std::stoll((*it)[1].str()));
  }
  return numbers;
}

TEST(PlanCli, CompilesTheWholeGptJobAndCountsItsTasks) {
  const Result r = run("--gpt 2 --dp 2 --tp 2 --pp 2 --micro-batches 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("plan 'gpt': world size 8, pipeline depth 2"), std::string::npos)
      << r.output;
  // One summary line per rank, "rank R: N tasks (...)", and the total over them.
  const std::vector<long long> per_rank =
      matched_numbers(r.output, std::regex(R"(\nrank \d+: (\d+) tasks)"));
  ASSERT_EQ(per_rank.size(), 8u) << r.output;
  long long sum = 0;
  for (long long n : per_rank) sum += n;
  // The last line is the whole-job line, and its count is the summary's.
  const std::regex whole(R"(\nwhole job: (\d+) tasks, (\d+\.\d+) s\n$)");
  std::smatch match;
  ASSERT_TRUE(std::regex_search(r.output, match, whole)) << r.output;
  EXPECT_GT(std::stoll(match[1].str()), 0);
  EXPECT_EQ(std::stoll(match[1].str()), sum) << r.output;
  EXPECT_NE(r.output.find("total: " + std::to_string(sum) + " tasks over 8 ranks"),
            std::string::npos)
      << r.output;
  EXPECT_GE(std::stod(match[2].str()), 0.0);
}

TEST(PlanCli, GptJobKeepsTheOtherOptions) {
  const std::string dot = ::testing::TempDir() + "/gpt.dot";
  const Result r = run("--gpt 2 --dp 2 --tp 2 --pp 2 --micro-batches 2 --ranks 5 --dot " + dot);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("rank 5:"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("rank 0:"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("whole job: "), std::string::npos) << r.output;
  std::ifstream in(dot);
  std::stringstream all;
  all << in.rdbuf();
  EXPECT_EQ(all.str().rfind("digraph", 0), 0u);
  const Result limit = run("--gpt 2 --dp 2 --memory-limit 16");
  EXPECT_EQ(limit.exit_code, 1);
  EXPECT_NE(limit.output.find("memory limit"), std::string::npos) << limit.output;
}

TEST(PlanCli, GptJobOnCudaCompilesWithoutAGpu) {
  const Result r = run("--gpt 2 --dp 2 --tp 2 --device cuda");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("on the GPU"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("whole job: "), std::string::npos) << r.output;
}

TEST(PlanCli, GptLayoutThatDoesNotFitExitsWithOne) {
  const Result r = run("--gpt 1 --pp 2");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("n_layer must be at least pp"), std::string::npos) << r.output;
}

TEST(PlanCli, BadGptFlagsExitWithTwoNamingTheFlag) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--gpt 0", "--gpt needs a positive layer count"},
      {"--gpt x", "--gpt needs a positive layer count"},
      {"--gpt", "--gpt needs a value"},
      {"--gpt 2 --dp 0", "--dp needs a positive integer"},
      {"--gpt 2 --tp -2", "--tp needs a positive integer"},
      {"--gpt 2 --pp 2x", "--pp needs a positive integer"},
      {"--gpt 2 --micro-batches 1.5", "--micro-batches needs a positive integer"},
      {"--gpt 2 --device tpu", "--device needs cpu or cuda"},
      {"--dp 2", "--dp is only used with --gpt"},
      {"--device cuda", "--device is only used with --gpt"},
      {"--gpt 2 job.pbtxt", "--gpt builds its own job; it cannot be used with JOB_FILE"},
  };
  for (const auto& [args, message] : cases) {
    const Result r = run(args);
    EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.output;
    EXPECT_NE(r.output.find(message), std::string::npos) << args << "\n" << r.output;
    EXPECT_NE(r.output.find("usage"), std::string::npos) << args << "\n" << r.output;
  }
}

}  // namespace
}  // namespace ofl::compiler
