#include "compiler/pass_manager.h"

#include <algorithm>
#include <fstream>
#include <set>

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

void PassManager::run(Graph& graph, const CompileOptions& options) const {
  check_order();
  int index = 0;
  for (const auto& pass : passes_) {
    pass->run(graph, options);
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
