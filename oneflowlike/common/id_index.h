#pragma once
// The position of each id in a list of ids (a plan's tasks or registers, rank by rank).

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

namespace ofl {

/// Plans number their tasks and registers densely from 0, and a 1,024-rank plan holds millions
/// of each: a vector indexed by id then replaces a hash map of as many nodes (one allocation
/// each). Sparse ids (one rank's share of a plan's) are kept sorted and found by bisection, still
/// without an allocation per id.
class IdIndex {
 public:
  IdIndex() = default;
  /// ids[i] is at position i; an id listed twice keeps its first position.
  explicit IdIndex(const std::vector<int64_t>& ids) {
    int64_t largest = -1;
    bool negative = false;
    for (int64_t id : ids) {
      largest = std::max(largest, id);
      negative = negative || id < 0;
    }
    const int64_t n = static_cast<int64_t>(ids.size());
    dense_ = !negative && largest < 4 * n + 1024;
    if (dense_) {
      positions_.assign(static_cast<size_t>(largest + 1), -1);
      for (int64_t i = n - 1; i >= 0; --i) positions_[ids[i]] = static_cast<int>(i);
    } else {
      sparse_.reserve(ids.size());
      for (int64_t i = 0; i < n; ++i) sparse_.emplace_back(ids[i], static_cast<int>(i));
      std::stable_sort(sparse_.begin(), sparse_.end(),
                       [](const auto& a, const auto& b) { return a.first < b.first; });
      sparse_.erase(std::unique(sparse_.begin(), sparse_.end(),
                                [](const auto& a, const auto& b) { return a.first == b.first; }),
                    sparse_.end());
    }
  }

  /// The position of `id`, or -1.
  int find(int64_t id) const {
    if (dense_) {
      return id >= 0 && id < static_cast<int64_t>(positions_.size()) ? positions_[id] : -1;
    }
    auto it = std::lower_bound(sparse_.begin(), sparse_.end(), id,
                               [](const auto& entry, int64_t key) { return entry.first < key; });
    return it != sparse_.end() && it->first == id ? it->second : -1;
  }

 private:
  bool dense_ = false;
  std::vector<int> positions_;
  std::vector<std::pair<int64_t, int>> sparse_;  // (id, position), by id
};

}  // namespace ofl
