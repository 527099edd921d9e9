#include "oneflowlike/placement.h"

#include <algorithm>
#include <cctype>
#include <set>

#include "oneflowlike/common/error.h"

namespace ofl {

Placement::Placement(DeviceType type, std::vector<int64_t> ranks)
    : Placement(type, ranks, Shape{static_cast<int64_t>(ranks.size())}) {}

Placement::Placement(DeviceType type, std::vector<int64_t> ranks, Shape hierarchy)
    : type_(type), ranks_(std::move(ranks)), hierarchy_(std::move(hierarchy)) {
  OFL_CHECK(!ranks_.empty(), "[placement] needs at least one rank. However, got none.");
  OFL_CHECK(hierarchy_.ndim() >= 1 && hierarchy_.numel() == num_ranks(),
            "[placement] the rank array must be rectangular with hierarchy product equal to the "
            "number of ranks. However, got ",
            num_ranks(), " ranks for hierarchy ", hierarchy_.to_string(), ".");
  std::set<int64_t> seen;
  for (int64_t r : ranks_) {
    OFL_CHECK(r >= 0, "[placement] ranks must be non-negative. However, got rank ", r, ".");
    OFL_CHECK(seen.insert(r).second, "[placement] each rank may appear once. However, rank ", r,
              " appears twice in ", to_string(), ".");
  }
}

std::optional<int64_t> Placement::parallel_id_of(int64_t rank) const {
  auto it = std::find(ranks_.begin(), ranks_.end(), rank);
  if (it == ranks_.end()) return std::nullopt;
  return it - ranks_.begin();
}

std::vector<int64_t> Placement::coordinate(int64_t parallel_id) const {
  std::vector<int64_t> coord(hierarchy_.ndim());
  for (int i = hierarchy_.ndim() - 1; i >= 0; --i) {
    coord[i] = parallel_id % hierarchy_[i];
    parallel_id /= hierarchy_[i];
  }
  return coord;
}

std::string Placement::to_string() const {
  std::string s = str_cat(device_type_name(type_), ", ");
  const std::vector<int64_t> strides = hierarchy_.strides();
  for (size_t i = 0; i < ranks_.size(); ++i) {
    for (int d = 0; d < hierarchy_.ndim(); ++d) {
      if (i % strides[d] == 0 && (i / strides[d]) % hierarchy_[d] == 0) s += "[";
    }
    s += std::to_string(ranks_[i]);
    for (int d = hierarchy_.ndim() - 1; d >= 0; --d) {
      if ((i + 1) % (strides[d] * hierarchy_[d]) == 0) {
        s += "]";
      }
    }
    if (i + 1 < ranks_.size()) s += ", ";
  }
  return s;
}

std::string Placement::brief() const {
  constexpr size_t kListed = 16;
  if (ranks_.size() <= kListed) return to_string();
  std::string s = str_cat(device_type_name(type_), ", ranks ");
  for (size_t i = 0; i < ranks_.size();) {
    size_t j = i;
    while (j + 1 < ranks_.size() && ranks_[j + 1] == ranks_[j] + 1) ++j;
    s += str_cat(i > 0 ? ", " : "", ranks_[i]);
    if (j > i) s += str_cat("..", ranks_[j]);
    i = j + 1;
  }
  return str_cat(s, " as ", hierarchy_.to_string());
}

namespace {

// Parses a nested list of integers such as "[[0, 1], [2, 3]]" into ranks and a hierarchy.
class RankArrayParser {
 public:
  explicit RankArrayParser(std::string_view text) : text_(text) {}

  void parse(std::vector<int64_t>* ranks, Shape* hierarchy) {
    std::vector<int64_t> extents;
    parse_list(0, &extents, ranks);
    skip_space();
    expect(pos_ == text_.size(), "unexpected text after the rank list");
    *hierarchy = Shape(extents);
  }

 private:
  void parse_list(size_t depth, std::vector<int64_t>* extents, std::vector<int64_t>* ranks) {
    skip_space();
    expect(pos_ < text_.size() && text_[pos_] == '[', "expected '['");
    ++pos_;
    int64_t count = 0;
    for (;;) {
      skip_space();
      expect(pos_ < text_.size(), "unterminated list");
      if (text_[pos_] == '[') {
        parse_list(depth + 1, extents, ranks);
      } else {
        expect(depth + 1 >= extents->size(), "rank array is not rectangular");
        size_t start = pos_;
        while (pos_ < text_.size() && (std::isdigit(text_[pos_]) || text_[pos_] == '-')) ++pos_;
        expect(pos_ > start, "expected a rank number");
        ranks->push_back(std::stoll(std::string(text_.substr(start, pos_ - start))));
        if (extents->size() < depth + 1) extents->resize(depth + 1, -1);
      }
      ++count;
      skip_space();
      expect(pos_ < text_.size(), "unterminated list");
      if (text_[pos_] == ',') {
        ++pos_;
        continue;
      }
      expect(text_[pos_] == ']', "expected ',' or ']'");
      ++pos_;
      break;
    }
    if (extents->size() < depth + 1) extents->resize(depth + 1, -1);
    expect((*extents)[depth] == -1 || (*extents)[depth] == count, "rank array is not rectangular");
    (*extents)[depth] = count;
  }

  void skip_space() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }
  void expect(bool ok, const char* what) {
    OFL_CHECK(ok, "[placement] could not parse the rank array: ", what, " at position ", pos_,
              ". However, got '", text_, "'.");
  }

  std::string_view text_;
  size_t pos_ = 0;
};

}  // namespace

Placement Placement::parse(std::string_view text) {
  const size_t comma = text.find(',');
  OFL_CHECK(comma != std::string_view::npos,
            "[placement] expected 'device_type, [ranks]' such as 'cpu, [[0, 1], [2, 3]]'. "
            "However, got '",
            text, "'.");
  std::string_view type = text.substr(0, comma);
  while (!type.empty() && std::isspace(static_cast<unsigned char>(type.back())))
    type.remove_suffix(1);
  while (!type.empty() && std::isspace(static_cast<unsigned char>(type.front())))
    type.remove_prefix(1);
  std::vector<int64_t> ranks;
  Shape hierarchy;
  RankArrayParser(text.substr(comma + 1)).parse(&ranks, &hierarchy);
  return Placement(device_type_from_name(type), std::move(ranks), std::move(hierarchy));
}

}  // namespace ofl
