#include "compiler/pass_manager.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

namespace ofl::compiler {

void PassManager::check_order() const {
  std::set<std::string> provided;
  for (const auto& pass : passes_) {
    for (const std::string& need : pass->needs()) {
      OFL_CHECK_CODE(provided.count(need), ErrorCode::kInternal, "[pass manager] pass '",
                     pass->name(), "' needs '", need, "', which no earlier pass provides.");
    }
    for (const std::string& p : pass->provides()) provided.insert(p);
  }
}

std::vector<std::string> PassManager::pass_names() const {
  std::vector<std::string> names;
  for (const auto& pass : passes_) names.push_back(pass->name());
  return names;
}

namespace {

// options.skip_passes and OFL_SKIP_PASSES, each checked against the passes there are.
std::set<std::string> passes_to_skip(const CompileOptions& options,
                                     const std::vector<std::unique_ptr<Pass>>& passes) {
  std::vector<std::string> names = options.skip_passes;
  if (const char* env = std::getenv("OFL_SKIP_PASSES")) {
    std::stringstream list(env);
    for (std::string name; std::getline(list, name, ',');) {
      const size_t first = name.find_first_not_of(" \t");
      if (first == std::string::npos) continue;
      names.push_back(name.substr(first, name.find_last_not_of(" \t") - first + 1));
    }
  }
  std::string known;
  for (const auto& pass : passes) known += (known.empty() ? "" : ", ") + pass->name();
  std::set<std::string> skip;
  for (const std::string& name : names) {
    auto it = std::find_if(passes.begin(), passes.end(),
                           [&](const auto& pass) { return pass->name() == name; });
    OFL_CHECK(it != passes.end(), "[pass manager] cannot skip pass '", name,
              "' (OFL_SKIP_PASSES or CompileOptions::skip_passes): there is no such pass. The "
              "passes are: ",
              known, ".");
    OFL_CHECK((*it)->skippable(), "[pass manager] cannot skip pass '", name,
              "' (OFL_SKIP_PASSES or CompileOptions::skip_passes): later passes need ",
              (*it)->provides().empty()
                  ? std::string("it (they leave dead ops for it)")
                  : str_cat("what it provides ('", (*it)->provides().front(), "')"),
              ".");
    skip.insert(name);
  }
  return skip;
}

}  // namespace

void PassManager::run(Graph& graph, const CompileOptions& options) const {
  check_order();
  const std::set<std::string> skip = passes_to_skip(options, passes_);
  int index = 0;
  for (const auto& pass : passes_) {
    if (!skip.count(pass->name())) pass->run(graph, options);
    ++index;
    const auto& dump = options.dump_after;
    if (std::find(dump.begin(), dump.end(), "all") != dump.end() ||
        std::find(dump.begin(), dump.end(), pass->name()) != dump.end()) {
      const std::string base = str_cat(options.dump_dir, "/", index, "_", pass->name());
      std::ofstream(base + ".txt") << graph_to_text(graph);
      std::ofstream(base + ".dot") << graph_to_dot(graph);
    }
  }
}

}  // namespace ofl::compiler
