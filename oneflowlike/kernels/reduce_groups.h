#pragma once
// How the reduce kernels of every device see a reduction: the input's axes coalesced into
// alternating kept and reduced groups, so that the common patterns (reduce the trailing axes,
// the leading axes, a middle block) become (outer, middle, inner) and the rest a general walk.

#include <vector>

#include "oneflowlike/ops/reduce.h"
#include "oneflowlike/shape.h"

namespace ofl {

/// Groups of adjacent axes, each either all reduced or all kept (size-1 axes dropped).
struct ReduceGroups {
  std::vector<int64_t> extent;
  std::vector<bool> reduced;

  int reduced_groups() const {
    int n = 0;
    for (bool r : reduced) n += r ? 1 : 0;
    return n;
  }
};

inline ReduceGroups reduce_groups(const Shape& x, const ReduceParams& p) {
  std::vector<bool> is_reduced(x.ndim(), p.axes.empty());
  if (x.ndim() > 0) {  // a scalar's axis 0 or -1 is the scalar itself (infer_reduce)
    for (int64_t a : p.axes) is_reduced[a < 0 ? a + x.ndim() : a] = true;
  }
  ReduceGroups g;
  for (int i = 0; i < x.ndim(); ++i) {
    if (x[i] == 1) continue;
    if (!g.extent.empty() && g.reduced.back() == is_reduced[i]) {
      g.extent.back() *= x[i];
    } else {
      g.extent.push_back(x[i]);
      g.reduced.push_back(is_reduced[i]);
    }
  }
  return g;
}

/// [outer kept] [middle reduced] [inner kept], each part possibly absent (extent 1); only for
/// groups with at most one reduced group.
struct ReduceView {
  int64_t outer = 1, middle = 1, inner = 1;
};

inline ReduceView reduce_view(const ReduceGroups& g) {
  ReduceView v;
  bool seen = false;
  for (size_t i = 0; i < g.extent.size(); ++i) {
    if (g.reduced[i]) {
      v.middle = g.extent[i];
      seen = true;
    } else {
      (seen ? v.inner : v.outer) *= g.extent[i];
    }
  }
  return v;
}

}  // namespace ofl
