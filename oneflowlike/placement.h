#pragma once
// Placement: where a global tensor lives. A device type plus an N-d array of ranks, e.g.
// "cpu, [[0, 1], [2, 3]]" is 4 cpu ranks arranged as a 2x2 hierarchy. The position of a rank
// in the array (row-major) is its parallel id; its N-d index is its coordinate.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "oneflowlike/device.h"
#include "oneflowlike/shape.h"

namespace ofl {

class Placement {
 public:
  Placement() = default;
  /// 1-d placement over `ranks`.
  Placement(DeviceType type, std::vector<int64_t> ranks);
  /// N-d placement: ranks in row-major order, hierarchy.numel() == ranks.size().
  Placement(DeviceType type, std::vector<int64_t> ranks, Shape hierarchy);
  /// "cpu, [0, 1, 2]" or "cuda, [[0, 1], [2, 3]]".
  static Placement parse(std::string_view text);

  DeviceType device_type() const { return type_; }
  const Shape& hierarchy() const { return hierarchy_; }
  const std::vector<int64_t>& ranks() const { return ranks_; }
  int64_t num_ranks() const { return static_cast<int64_t>(ranks_.size()); }
  int64_t rank(int64_t parallel_id) const { return ranks_[parallel_id]; }
  std::optional<int64_t> parallel_id_of(int64_t rank) const;
  bool contains(int64_t rank) const { return parallel_id_of(rank).has_value(); }
  /// N-d index of parallel_id in the hierarchy.
  std::vector<int64_t> coordinate(int64_t parallel_id) const;

  bool operator==(const Placement& o) const {
    return type_ == o.type_ && hierarchy_ == o.hierarchy_ && ranks_ == o.ranks_;
  }
  bool operator!=(const Placement& o) const { return !(*this == o); }
  /// "cpu, [[0, 1], [2, 3]]", the form parse() reads.
  std::string to_string() const;
  /// to_string() up to 16 ranks; above, runs of consecutive ranks and the hierarchy ("cpu, ranks
  /// 0..1023 as (128, 8)"): what a plan stores per collective task, where 1,024 listed ranks
  /// would cost kilobytes each (Note [Collective tasks]).
  std::string brief() const;

 private:
  DeviceType type_ = DeviceType::kCPU;
  std::vector<int64_t> ranks_;
  Shape hierarchy_;
};

}  // namespace ofl
