// IdIndex (oneflowlike/common/id_index.h): positions of dense and sparse ids alike.

#include "oneflowlike/common/id_index.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

namespace ofl {
namespace {

TEST(IdIndex, FindsDenseAndSparseIdsAndKeepsTheFirstOfATwice) {
  for (const std::vector<int64_t>& ids :
       {std::vector<int64_t>{3, 0, 2, 1, 2}, std::vector<int64_t>{1000000, 7, -5, 123456789, 7}}) {
    const IdIndex index(ids);
    for (size_t i = 0; i < ids.size(); ++i) {
      const int first = static_cast<int>(std::find(ids.begin(), ids.end(), ids[i]) - ids.begin());
      EXPECT_EQ(index.find(ids[i]), first) << ids[i];
    }
    EXPECT_EQ(index.find(4), -1);
    EXPECT_EQ(index.find(-1), -1);
    EXPECT_EQ(index.find(int64_t{1} << 40), -1);
  }
  EXPECT_EQ(IdIndex().find(0), -1);
  EXPECT_EQ(IdIndex(std::vector<int64_t>{}).find(0), -1);
}

}  // namespace
}  // namespace ofl
