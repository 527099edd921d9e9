#include "oneflowlike/placement.h"

#include <gtest/gtest.h>

#include "oneflowlike/common/error.h"

namespace ofl {
namespace {

TEST(Placement, ParsesOneAndTwoDimensionalRankArrays) {
  const Placement p = Placement::parse("cpu, [0, 1, 2]");
  EXPECT_EQ(p.hierarchy(), (Shape{3}));
  EXPECT_EQ(p.ranks(), (std::vector<int64_t>{0, 1, 2}));
  const Placement q = Placement::parse("cuda, [[4, 5], [6, 7]]");
  EXPECT_EQ(q.device_type(), DeviceType::kCUDA);
  EXPECT_EQ(q.hierarchy(), (Shape{2, 2}));
  EXPECT_EQ(q.rank(3), 7);
  EXPECT_EQ(q.parallel_id_of(6), 2);
  EXPECT_FALSE(q.contains(0));
  EXPECT_EQ(q.coordinate(2), (std::vector<int64_t>{1, 0}));
}

TEST(Placement, PrintsWhatItParses) {
  for (const char* text :
       {"cpu, [0, 1, 2]", "cpu, [[0, 1], [2, 3]]", "cuda, [[[0, 1]], [[2, 3]]]", "cpu, [7]"}) {
    EXPECT_EQ(Placement::parse(text).to_string(), text);
  }
}

TEST(Placement, RejectsRaggedDuplicateAndNegativeRanks) {
  for (const char* text : {"cpu, [[0, 1], [2]]", "cpu, [0, 0]", "cpu, [-1]", "cpu, []", "cpu [0]",
                           "npu, [0]", "cpu, [0, 1"}) {
    try {
      Placement::parse(text);
      ADD_FAILURE() << "accepted " << text;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << text;
      EXPECT_NE(std::string(e.what()).find("["), std::string::npos);
    }
  }
}

TEST(Placement, BriefListsSmallPlacementsAndRunsOfLargeOnes) {
  const Placement small = Placement::parse("cpu, [[0, 1], [2, 3]]");
  EXPECT_EQ(small.brief(), small.to_string());
  std::vector<int64_t> ranks;
  for (int64_t r = 0; r < 1024; ++r) ranks.push_back(r);
  EXPECT_EQ(Placement(DeviceType::kCPU, ranks, Shape{128, 8}).brief(),
            "cpu, ranks 0..1023 as (128, 8)");
  std::vector<int64_t> gappy;
  for (int64_t r = 0; r < 16; ++r) gappy.push_back(r);
  gappy.push_back(20);
  gappy.push_back(32);
  gappy.push_back(33);
  EXPECT_EQ(Placement(DeviceType::kCUDA, gappy, Shape{19}).brief(),
            "cuda, ranks 0..15, 20, 32..33 as (19,)");
}

}  // namespace
}  // namespace ofl
