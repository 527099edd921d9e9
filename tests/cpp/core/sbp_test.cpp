#include "oneflowlike/sbp.h"

#include <gtest/gtest.h>

#include "oneflowlike/common/error.h"

namespace ofl {
namespace {

TEST(Sbp, ParsesAndPrints) {
  EXPECT_EQ(Sbp::parse("S(1)"), S(1));
  EXPECT_EQ(Sbp::parse(" B "), B());
  EXPECT_EQ(Sbp::parse("partial_sum"), P());
  EXPECT_EQ(Sbp::parse("split(2)"), S(2));
  EXPECT_EQ(nd_sbp_to_string({S(0), B()}), "(S(0), B)");
  EXPECT_EQ(parse_nd_sbp("(S(0), P)"), (NdSbp{S(0), P()}));
  EXPECT_EQ(parse_nd_sbp("S(3)"), (NdSbp{S(3)}));
  EXPECT_THROW(Sbp::parse("S(x)"), Error);
  EXPECT_THROW(Sbp::parse("Q"), Error);
  EXPECT_EQ((SbpSignature{{S(0), B()}, {S(0)}}).to_string(), "S(0) x B -> S(0)");
}

TEST(Sbp, BalancedRangesGiveTheFirstPiecesOneMore) {
  EXPECT_EQ(balanced_range(5, 2, 0), (Range{0, 3}));
  EXPECT_EQ(balanced_range(5, 2, 1), (Range{3, 5}));
  EXPECT_EQ(balanced_range(2, 4, 3), (Range{2, 2}));
}

TEST(Sbp, ContiguousOffsetFindsRegionsThatAreOneRunOfMemory) {
  const Shape shape{4, 3, 2};
  auto offset = [&](std::vector<Range> region) { return contiguous_offset(shape, region); };
  EXPECT_EQ(offset({{0, 4}, {0, 3}, {0, 2}}), 0);             // all of it
  EXPECT_EQ(offset({{1, 3}, {0, 3}, {0, 2}}), 6);             // rows 1 and 2
  EXPECT_EQ(offset({{2, 3}, {1, 3}, {0, 2}}), 14);            // part of one row
  EXPECT_EQ(offset({{3, 4}, {2, 3}, {1, 2}}), 23);            // one element
  EXPECT_EQ(offset({{1, 3}, {0, 2}, {0, 2}}), std::nullopt);  // two rows, part of each
  EXPECT_EQ(offset({{0, 4}, {0, 3}, {0, 1}}), std::nullopt);  // a column
  EXPECT_EQ(offset({{1, 2}, {0, 2}, {1, 2}}), std::nullopt);  // strided inside one row
  EXPECT_EQ(offset({{2, 2}, {1, 3}, {0, 2}}), 0);             // nothing: at the start
  // An empty piece (an axis of 1 split in 2) sliced past its end: still nothing at the start.
  EXPECT_EQ(contiguous_offset(Shape{0, 8, 6}, {{0, 0}, {7, 8}, {0, 6}}), 0);
}

// Exhaustive over small cases: the pieces of every split tile the logical tensor exactly once,
// sizes differ by at most one with larger pieces first, and B/P pieces are whole.
TEST(Sbp, PhysicalRegionsTileTheLogicalTensorForAllSmallCases) {
  const std::vector<Placement> placements = {Placement::parse("cpu, [0]"),
                                             Placement::parse("cpu, [0, 1]"),
                                             Placement::parse("cpu, [0, 1, 2]"),
                                             Placement::parse("cpu, [0, 1, 2, 3]"),
                                             Placement::parse("cpu, [[0, 1], [2, 3]]"),
                                             Placement::parse("cpu, [[0, 1, 2], [3, 4, 5]]")};
  const std::vector<Sbp> one_d = {S(0), S(1), B(), P()};
  for (const Placement& placement : placements) {
    std::vector<NdSbp> all = {{}};
    for (int d = 0; d < placement.hierarchy().ndim(); ++d) {
      std::vector<NdSbp> next;
      for (const NdSbp& prefix : all) {
        for (const Sbp& s : one_d) {
          NdSbp n = prefix;
          n.push_back(s);
          next.push_back(n);
        }
      }
      all = next;
    }
    for (int64_t rows = 0; rows <= 7; ++rows) {
      for (int64_t cols = 1; cols <= 5; cols += 2) {
        const Shape logical{rows, cols};
        for (const NdSbp& nd : all) {
          check_nd_sbp(logical, nd, placement, "t");
          // Count how many ranks hold each element; every hierarchy dim that is not a split
          // replicates, so each element is held prod(non-split extents) times.
          int64_t replicas = 1;
          for (int d = 0; d < placement.hierarchy().ndim(); ++d) {
            if (!nd[d].is_split()) replicas *= placement.hierarchy()[d];
          }
          std::vector<int> held(rows * cols, 0);
          for (int64_t id = 0; id < placement.num_ranks(); ++id) {
            const auto region = logical_region(logical, nd, placement, id);
            const Shape phys = physical_shape(logical, nd, placement, id);
            ASSERT_EQ(phys[0], region[0].size());
            for (int64_t r = region[0].begin; r < region[0].end; ++r) {
              for (int64_t c = region[1].begin; c < region[1].end; ++c) ++held[r * cols + c];
            }
          }
          for (int h : held) {
            ASSERT_EQ(h, replicas) << placement.to_string() << " " << nd_sbp_to_string(nd) << " "
                                   << logical.to_string();
          }
        }
      }
    }
  }
}

TEST(Sbp, TwoDimensionalSplitsOfOneAxisNest) {
  const Placement p = Placement::parse("cpu, [[0, 1], [2, 3]]");
  // 7 rows: S(0) on dim 0 gives [0,4) and [4,7); then S(0) on dim 1 cuts each again.
  EXPECT_EQ(logical_region(Shape{7}, {S(0), S(0)}, p, 0)[0], (Range{0, 2}));
  EXPECT_EQ(logical_region(Shape{7}, {S(0), S(0)}, p, 1)[0], (Range{2, 4}));
  EXPECT_EQ(logical_region(Shape{7}, {S(0), S(0)}, p, 2)[0], (Range{4, 6}));
  EXPECT_EQ(logical_region(Shape{7}, {S(0), S(0)}, p, 3)[0], (Range{6, 7}));
  EXPECT_EQ(physical_shape(Shape{4, 6}, {S(0), S(1)}, p, 3), (Shape{2, 3}));
}

TEST(Sbp, CheckRejectsWrongArityAndBadAxisNamingTheTensor) {
  const Placement p = Placement::parse("cpu, [[0, 1], [2, 3]]");
  try {
    check_nd_sbp(Shape{4, 4}, {S(0)}, p, "weight");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("'weight'"), std::string::npos);
  }
  try {
    check_nd_sbp(Shape{4, 4}, {S(2), B()}, p, "weight");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kOutOfRange);
    EXPECT_NE(std::string(e.what()).find("axis 2"), std::string::npos);
  }
}

}  // namespace
}  // namespace ofl
