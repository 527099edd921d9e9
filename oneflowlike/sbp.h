#pragma once
// SBP: how one dimension of a placement's hierarchy holds a logical (global) tensor.
//
//   S(i)  split:       rank k holds the k-th piece of the tensor cut along axis i.
//   B     broadcast:   every rank holds the whole tensor.
//   P     partial-sum: every rank holds a tensor of the full shape; the logical value is the
//                      elementwise sum of all of them.
//
// An nd_sbp has one SBP per hierarchy dimension: on "cpu, [[0, 1], [2, 3]]" the nd_sbp
// (S(0), S(1)) cuts rows across the first dimension and columns across the second.
//
// Worked example: y = matmul(a, b) with a (4, 6), b (6, 8) on "cpu, [0, 1]".
//
//   signature S(0) x B -> S(0)     (data parallel)
//     rank 0: a[0:2, :] (2, 6) @ b (6, 8) = y[0:2, :] (2, 8)
//     rank 1: a[2:4, :] (2, 6) @ b (6, 8) = y[2:4, :] (2, 8)
//   signature B x S(1) -> S(1)     (column parallel)
//     rank 0: a (4, 6) @ b[:, 0:4] = y[:, 0:4]
//     rank 1: a (4, 6) @ b[:, 4:8] = y[:, 4:8]
//   signature S(1) x S(0) -> P     (row parallel: each rank sums over half of k)
//     rank 0: a[:, 0:3] @ b[0:3, :] = y0 (4, 8)
//     rank 1: a[:, 3:6] @ b[3:6, :] = y1 (4, 8)      and y = y0 + y1
//
// An uneven split gives the first (n % k) pieces one extra row, as OneFlow and PyTorch do:
// 5 rows over 2 ranks are rows [0, 3) and [3, 5).

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "oneflowlike/placement.h"
#include "oneflowlike/shape.h"

namespace ofl {

struct Sbp {
  enum class Kind : int8_t { kSplit, kBroadcast, kPartialSum };
  Kind kind = Kind::kBroadcast;
  int axis = -1;  // split axis; -1 unless kind == kSplit

  bool is_split() const { return kind == Kind::kSplit; }
  bool is_broadcast() const { return kind == Kind::kBroadcast; }
  bool is_partial_sum() const { return kind == Kind::kPartialSum; }
  bool operator==(const Sbp& o) const { return kind == o.kind && axis == o.axis; }
  bool operator!=(const Sbp& o) const { return !(*this == o); }
  /// "S(0)", "B", "P".
  std::string to_string() const;
  /// Reads "S(i)", "B", "P" (also "split(i)", "broadcast", "partial_sum").
  static Sbp parse(std::string_view text);
};

inline Sbp S(int axis) { return Sbp{Sbp::Kind::kSplit, axis}; }
inline Sbp B() { return Sbp{Sbp::Kind::kBroadcast, -1}; }
inline Sbp P() { return Sbp{Sbp::Kind::kPartialSum, -1}; }

using NdSbp = std::vector<Sbp>;

/// "S(0)" for one dimension, "(S(0), B)" for more.
std::string nd_sbp_to_string(const NdSbp& nd_sbp);
/// Reads "S(0)", "(S(0), B)" or "S(0), B".
NdSbp parse_nd_sbp(std::string_view text);

/// One way an op can run on one hierarchy dimension: the SBP of each input and output.
struct SbpSignature {
  std::vector<Sbp> inputs;
  std::vector<Sbp> outputs;
  bool operator==(const SbpSignature& o) const {
    return inputs == o.inputs && outputs == o.outputs;
  }
  /// "S(0) x B -> S(0)"
  std::string to_string() const;
};

/// Half-open interval [begin, end).
struct Range {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
  bool operator==(const Range& o) const { return begin == o.begin && end == o.end; }
};

/// Where `region` of a row-major tensor of `shape` starts (in elements) when it is one
/// contiguous run of the tensor's memory, else nullopt: when every axis after the first one
/// that spans more than one index is whole. An empty region is the run of nothing at 0.
std::optional<int64_t> contiguous_offset(const Shape& shape, const std::vector<Range>& region);

/// The piece `index` of `n` items cut into `parts`: the first n % parts pieces get one more.
Range balanced_range(int64_t n, int64_t parts, int64_t index);

/// Note [Region overlap]: where two pieces of one logical tensor meet, written once for the
/// compiler's boxing, the runtime's concat checks and the checkpoint loader (through Python).
/// The part of region `a` inside region `b` (same number of axes): per axis the overlap, an
/// empty range [x, x) where there is none.
std::vector<Range> region_intersection(const std::vector<Range>& a, const std::vector<Range>& b);
/// The region covering all of `shape`: [0, d) on every axis.
std::vector<Range> whole_region(const Shape& shape);
/// The extent of `region`, one size per axis.
Shape region_shape(const std::vector<Range>& region);
/// Whether `region` holds no element (some axis is empty).
bool region_is_empty(const std::vector<Range>& region);
/// `region` in the local coordinates of a piece holding `frame` (region lies inside frame).
std::vector<Range> region_relative_to(const std::vector<Range>& region,
                                      const std::vector<Range>& frame);

/// Raises ValueError naming `tensor` when nd_sbp does not fit the placement (one SBP per
/// hierarchy dimension) or splits an axis the logical shape does not have.
void check_nd_sbp(const Shape& logical_shape, const NdSbp& nd_sbp, const Placement& placement,
                  std::string_view tensor);

/// The region of the logical tensor that `parallel_id` holds: one range per logical axis.
/// Splits nest in hierarchy order, so (S(0), S(0)) on 2x2 cuts rows into 4 pieces.
std::vector<Range> logical_region(const Shape& logical_shape, const NdSbp& nd_sbp,
                                  const Placement& placement, int64_t parallel_id);

/// The shape of the local piece held by `parallel_id` (the sizes of logical_region).
Shape physical_shape(const Shape& logical_shape, const NdSbp& nd_sbp, const Placement& placement,
                     int64_t parallel_id);

}  // namespace ofl
