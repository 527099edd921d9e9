#include "oneflowlike/collective.h"

#include "oneflowlike/common/error.h"

namespace ofl {

std::vector<std::vector<Range>> collective_chunks(const Shape& shape, int axis, int64_t n) {
  OFL_ASSERT(n >= 1 && axis >= -1 && axis < shape.ndim());
  std::vector<std::vector<Range>> chunks;
  for (int64_t j = 0; j < n; ++j) {
    if (axis < 0) {
      chunks.push_back({balanced_range(shape.numel(), n, j)});
      continue;
    }
    std::vector<Range> region(shape.ndim());
    for (int i = 0; i < shape.ndim(); ++i) region[i] = Range{0, shape[i]};
    region[axis] = balanced_range(shape[axis], n, j);
    chunks.push_back(std::move(region));
  }
  return chunks;
}

std::vector<int64_t> ring_sum_order(int64_t chunk, int64_t n) {
  std::vector<int64_t> order;
  for (int64_t k = 1; k <= n; ++k) order.push_back((chunk + k) % n);
  return order;
}

const char* collective_op_name(proto::CollectiveProto::Op op) {
  switch (op) {
    case proto::CollectiveProto::ALL_REDUCE:
      return "all_reduce";
    case proto::CollectiveProto::REDUCE_SCATTER:
      return "reduce_scatter";
    case proto::CollectiveProto::ALL_GATHER:
      return "all_gather";
    case proto::CollectiveProto::ALL_TO_ALL:
      return "all_to_all";
    default:
      return "?";
  }
}

Shape collective_whole(const proto::CollectiveProto& collective, const Shape& input,
                       const Shape& output) {
  switch (collective.op()) {
    case proto::CollectiveProto::ALL_GATHER:
      return output;
    case proto::CollectiveProto::ALL_TO_ALL: {
      Shape whole = input;
      if (collective.axis() >= 0 && collective.axis() < whole.ndim() &&
          collective.axis() < output.ndim()) {
        whole[collective.axis()] = output[collective.axis()];
      }
      return whole;
    }
    default:
      return input;
  }
}

int64_t collective_ids(proto::CollectiveProto::Op op, int64_t n) {
  return op == proto::CollectiveProto::ALL_TO_ALL ? n : 1;
}

uint64_t collective_tag(int64_t collective_id, int64_t receiving_member) {
  OFL_ASSERT(collective_id >= 0 && collective_id < kMaxCollectiveId && receiving_member >= 0 &&
             receiving_member < kMaxCollectiveMembers);
  return (uint64_t{1} << 31) | (static_cast<uint64_t>(collective_id) << 12) |
         static_cast<uint64_t>(receiving_member);
}

}  // namespace ofl
