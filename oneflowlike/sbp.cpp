#include "oneflowlike/sbp.h"

#include <algorithm>
#include <cctype>

#include "oneflowlike/common/error.h"

namespace ofl {

std::string Sbp::to_string() const {
  switch (kind) {
    case Kind::kSplit:
      return str_cat("S(", axis, ")");
    case Kind::kBroadcast:
      return "B";
    case Kind::kPartialSum:
      return "P";
  }
  return "?";
}

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

}  // namespace

Sbp Sbp::parse(std::string_view text) {
  const std::string_view t = trim(text);
  if (t == "B" || t == "broadcast") return B();
  if (t == "P" || t == "partial_sum") return P();
  for (std::string_view prefix : {"S(", "split("}) {
    if (t.substr(0, prefix.size()) == prefix && t.size() > prefix.size() + 1 && t.back() == ')') {
      const std::string_view digits = t.substr(prefix.size(), t.size() - prefix.size() - 1);
      bool all_digits = !digits.empty();
      for (char c : digits) all_digits = all_digits && std::isdigit(static_cast<unsigned char>(c));
      if (all_digits) return S(std::stoi(std::string(digits)));
    }
  }
  throw_error(ErrorCode::kInvalidArgument,
              str_cat("[sbp] expected S(axis), B or P. However, got '", text, "'."));
}

std::string nd_sbp_to_string(const NdSbp& nd_sbp) {
  if (nd_sbp.size() == 1) return nd_sbp[0].to_string();
  std::string s = "(";
  for (size_t i = 0; i < nd_sbp.size(); ++i) {
    if (i > 0) s += ", ";
    s += nd_sbp[i].to_string();
  }
  return s + ")";
}

NdSbp parse_nd_sbp(std::string_view text) {
  std::string_view t = trim(text);
  if (!t.empty() && t.front() == '(' && t.back() == ')') t = t.substr(1, t.size() - 2);
  NdSbp out;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i <= t.size(); ++i) {
    if (i < t.size() && t[i] == '(') ++depth;
    if (i < t.size() && t[i] == ')') --depth;
    if (i == t.size() || (t[i] == ',' && depth == 0)) {
      out.push_back(Sbp::parse(t.substr(start, i - start)));
      start = i + 1;
    }
  }
  return out;
}

std::string SbpSignature::to_string() const {
  std::string s;
  for (size_t i = 0; i < inputs.size(); ++i) s += (i ? " x " : "") + inputs[i].to_string();
  s += " -> ";
  for (size_t i = 0; i < outputs.size(); ++i) s += (i ? ", " : "") + outputs[i].to_string();
  return s;
}

std::optional<int64_t> contiguous_offset(const Shape& shape, const std::vector<Range>& region) {
  OFL_ASSERT(static_cast<int>(region.size()) == shape.ndim());
  // An empty region (a rank's piece of an axis split into more parts than it has indexes) is a
  // run of nothing, at the start: its begins may lie past the piece's end.
  for (const Range& r : region) {
    if (r.size() == 0) return 0;
  }
  int64_t offset = 0;
  bool wide = false;  // an earlier axis spans more than one index
  for (int d = 0; d < shape.ndim(); ++d) {
    const Range& r = region[d];
    if (wide && !(r.begin == 0 && r.end == shape[d])) return std::nullopt;
    if (r.size() > 1) wide = true;
    offset = offset * shape[d] + r.begin;
  }
  return offset;
}

std::vector<Range> region_intersection(const std::vector<Range>& a, const std::vector<Range>& b) {
  OFL_ASSERT(a.size() == b.size());
  std::vector<Range> out(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    const int64_t begin = std::max(a[i].begin, b[i].begin);
    out[i] = Range{begin, std::max(begin, std::min(a[i].end, b[i].end))};
  }
  return out;
}

std::vector<Range> whole_region(const Shape& shape) {
  std::vector<Range> region;
  for (int64_t d : shape.dims()) region.push_back(Range{0, d});
  return region;
}

Shape region_shape(const std::vector<Range>& region) {
  std::vector<int64_t> dims;
  for (const Range& r : region) dims.push_back(r.size());
  return Shape(std::move(dims));
}

bool region_is_empty(const std::vector<Range>& region) {
  return std::any_of(region.begin(), region.end(), [](const Range& r) { return r.size() <= 0; });
}

std::vector<Range> region_relative_to(const std::vector<Range>& region,
                                      const std::vector<Range>& frame) {
  OFL_ASSERT(region.size() == frame.size());
  std::vector<Range> out(region.size());
  for (size_t i = 0; i < region.size(); ++i) {
    out[i] = Range{region[i].begin - frame[i].begin, region[i].end - frame[i].begin};
  }
  return out;
}

Range balanced_range(int64_t n, int64_t parts, int64_t index) {
  OFL_ASSERT(parts > 0 && index >= 0 && index < parts);
  const int64_t base = n / parts, extra = n % parts;
  const int64_t begin = index * base + std::min(index, extra);
  return Range{begin, begin + base + (index < extra ? 1 : 0)};
}

void check_nd_sbp(const Shape& logical_shape, const NdSbp& nd_sbp, const Placement& placement,
                  std::string_view tensor) {
  OFL_CHECK(static_cast<int>(nd_sbp.size()) == placement.hierarchy().ndim(), "[sbp] tensor '",
            tensor, "' needs one SBP per placement dimension (", placement.hierarchy().ndim(),
            " for placement ", placement.to_string(), "). However, got ", nd_sbp_to_string(nd_sbp),
            ".");
  for (const Sbp& sbp : nd_sbp) {
    OFL_CHECK_INDEX(!sbp.is_split() || (sbp.axis >= 0 && sbp.axis < logical_shape.ndim()),
                    "[sbp] tensor '", tensor, "' of shape ", logical_shape.to_string(),
                    " cannot be split on axis ", sbp.axis, ": the axis must be in [0, ",
                    logical_shape.ndim(), "). However, got ", nd_sbp_to_string(nd_sbp), ".");
  }
}

std::vector<Range> logical_region(const Shape& logical_shape, const NdSbp& nd_sbp,
                                  const Placement& placement, int64_t parallel_id) {
  OFL_ASSERT(static_cast<int>(nd_sbp.size()) == placement.hierarchy().ndim());
  std::vector<Range> region(logical_shape.ndim());
  for (int i = 0; i < logical_shape.ndim(); ++i) region[i] = Range{0, logical_shape[i]};
  const std::vector<int64_t> coord = placement.coordinate(parallel_id);
  for (size_t d = 0; d < nd_sbp.size(); ++d) {
    if (!nd_sbp[d].is_split()) continue;
    Range& r = region[nd_sbp[d].axis];
    const Range piece = balanced_range(r.size(), placement.hierarchy()[d], coord[d]);
    r = Range{r.begin + piece.begin, r.begin + piece.end};
  }
  return region;
}

Shape physical_shape(const Shape& logical_shape, const NdSbp& nd_sbp, const Placement& placement,
                     int64_t parallel_id) {
  const std::vector<Range> region = logical_region(logical_shape, nd_sbp, placement, parallel_id);
  std::vector<int64_t> dims(region.size());
  for (size_t i = 0; i < region.size(); ++i) dims[i] = region[i].size();
  return Shape(std::move(dims));
}

}  // namespace ofl
