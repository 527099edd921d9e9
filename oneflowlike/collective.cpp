#include "oneflowlike/collective.h"

#include <algorithm>

#include "oneflowlike/common/error.h"
#include "oneflowlike/proto_convert.h"

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

int64_t collective_chunk_numel(const Shape& shape, int axis, int64_t n, int64_t chunk) {
  OFL_ASSERT(n >= 1 && axis >= -1 && axis < shape.ndim() && chunk >= 0 && chunk < n);
  if (axis < 0) return balanced_range(shape.numel(), n, chunk).size();
  if (shape[axis] == 0) return 0;
  return balanced_range(shape[axis], n, chunk).size() * (shape.numel() / shape[axis]);
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
    case proto::CollectiveProto::BROADCAST:
      return "broadcast";
    case proto::CollectiveProto::SEND_RECV:
      return "send_recv";
    default:
      return "?";
  }
}

proto::CollectiveProto::Algorithm collective_algorithm(proto::CollectiveProto::Op op,
                                                       int64_t whole_bytes, int64_t n) {
  const bool small = n >= 2 && whole_bytes <= kRecursiveDoublingMaxBytes;
  if (small && op == proto::CollectiveProto::ALL_REDUCE) {
    return proto::CollectiveProto::RECURSIVE_DOUBLING;
  }
  if (small && op == proto::CollectiveProto::BROADCAST) return proto::CollectiveProto::TREE;
  return proto::CollectiveProto::RING;
}

const char* collective_algorithm_name(proto::CollectiveProto::Algorithm algorithm) {
  switch (algorithm) {
    case proto::CollectiveProto::RING:
      return "ring";
    case proto::CollectiveProto::RECURSIVE_DOUBLING:
      return "recursive doubling";
    case proto::CollectiveProto::TREE:
      return "tree";
    default:
      return "an unknown algorithm";
  }
}

int64_t recursive_doubling_core(int64_t n) {
  OFL_ASSERT(n >= 1);
  int64_t p = 1;
  while (p * 2 <= n) p *= 2;
  return p;
}

std::vector<std::pair<int64_t, int64_t>> recursive_doubling_adds(int64_t n) {
  const int64_t p = recursive_doubling_core(n);
  std::vector<std::pair<int64_t, int64_t>> adds;
  for (int64_t m = p; m < n; ++m) adds.emplace_back(m - p, m);
  for (int64_t step = 1; step < p; step *= 2) {
    for (int64_t m = 0; m < p; m += 2 * step) adds.emplace_back(m, m + step);
  }
  return adds;
}

CollectiveBlocks collective_blocks(const proto::CollectiveProto& collective, int64_t member,
                                   const Shape& input, const Shape& output) {
  CollectiveBlocks blocks;
  if (collective.op() == proto::CollectiveProto::SEND_RECV) {
    auto convert = [](const auto& list, std::vector<CollectiveBlock>* out) {
      for (const proto::CollectiveBlockProto& b : list) {
        out->push_back({b.member(), ranges_from_proto(b.region(), 0, b.region_size())});
      }
    };
    convert(collective.sends(), &blocks.sends);
    convert(collective.receives(), &blocks.receives);
    return blocks;
  }
  OFL_ASSERT(collective.op() == proto::CollectiveProto::ALL_TO_ALL);
  // Member m sends q the part of its chunk along axis inside q's chunk along out_axis.
  const int64_t n = collective.members_size();
  const Shape whole = collective_whole(collective, input, output);
  const auto in_chunks = collective_chunks(whole, collective.axis(), n);
  const auto out_chunks = collective_chunks(whole, collective.out_axis(), n);
  for (int64_t q = 0; q < n; ++q) {
    blocks.sends.push_back(
        {q, region_relative_to(region_intersection(in_chunks[member], out_chunks[q]),
                               in_chunks[member])});
    blocks.receives.push_back(
        {q, region_relative_to(region_intersection(in_chunks[q], out_chunks[member]),
                               out_chunks[member])});
  }
  return blocks;
}

Shape collective_whole(const proto::CollectiveProto& collective, const Shape& input,
                       const Shape& output) {
  switch (collective.op()) {
    case proto::CollectiveProto::ALL_GATHER:
    case proto::CollectiveProto::BROADCAST:
    case proto::CollectiveProto::SEND_RECV:
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

int64_t align_collective_scratch(int64_t bytes) {
  constexpr int64_t a = CollectiveScratchLayout::kAlignment;
  return (bytes + a - 1) / a * a;
}

int64_t CollectiveScratchLayout::packed_whole_offset() const {
  return align_collective_scratch(packed_input);
}

int64_t CollectiveScratchLayout::received_offset() const {
  return packed_whole_offset() + align_collective_scratch(packed_whole);
}

int64_t CollectiveScratchLayout::bytes() const { return received_offset() + received; }

int64_t collective_piece_limit(int64_t chunk_bytes, int64_t configured, int64_t largest) {
  if (configured > 0) return configured;
  return std::clamp<int64_t>(chunk_bytes / 4, int64_t{64} << 10, largest);
}

CollectiveScratchLayout collective_scratch(const proto::CollectiveProto& collective, int64_t member,
                                           const Shape& input, const Shape& output, DataType dtype,
                                           int64_t configured_piece_bytes) {
  using Op = proto::CollectiveProto;
  CollectiveScratchLayout layout;
  const int64_t elem = static_cast<int64_t>(dtype_size(dtype));
  const int64_t n = collective.members_size();
  if (collective.op() == Op::BROADCAST) return layout;  // straight into the output
  if (collective.op() == Op::ALL_TO_ALL || collective.op() == Op::SEND_RECV) {
    const CollectiveBlocks blocks = collective_blocks(collective, member, input, output);
    auto packed = [&](const std::vector<CollectiveBlock>& list, const Shape& shape) {
      int64_t bytes = 0;
      for (const CollectiveBlock& b : list) {
        if (b.member == member || region_is_empty(b.region) ||
            contiguous_offset(shape, b.region).has_value()) {
          continue;
        }
        bytes += align_collective_scratch(region_shape(b.region).numel() * elem);
      }
      return bytes;
    };
    layout.packed_input = packed(blocks.sends, input);
    layout.packed_whole = packed(blocks.receives, output);
    return layout;
  }
  if (collective.algorithm() == Op::RECURSIVE_DOUBLING) {
    layout.received = output.numel() * elem;
    return layout;
  }
  const Shape whole = collective_whole(collective, input, output);
  const int axis = collective.axis();
  const bool contiguous = axis < 0 || std::all_of(whole.dims().begin(), whole.dims().begin() + axis,
                                                  [](int64_t d) { return d == 1; });
  const bool reduces = collective.op() != Op::ALL_GATHER;
  if (reduces && !contiguous) layout.packed_input = whole.numel() * elem;
  if (collective.op() == Op::REDUCE_SCATTER || (collective.op() == Op::ALL_GATHER && !contiguous)) {
    layout.packed_whole = whole.numel() * elem;
  }
  int64_t largest = 0;
  for (int64_t c = 0; c < n; ++c) {
    largest = std::max(largest, collective_chunk_numel(whole, axis, n, c));
  }
  const int64_t limit = collective_piece_limit(largest * elem, configured_piece_bytes);
  layout.ring_pieces = std::max<int64_t>(1, (largest * elem + limit - 1) / limit);
  layout.piece_capacity = (largest + layout.ring_pieces - 1) / layout.ring_pieces;
  // Receives are posted up to two reduce-scatter steps ahead, into slots by step parity
  // (Note [Ring collectives]); with n - 1 = 1 step there is one.
  const int64_t steps_in_flight = std::min<int64_t>(2, std::max<int64_t>(n - 1, 1));
  if (reduces) {
    layout.received = steps_in_flight * layout.ring_pieces * layout.piece_capacity * elem;
  }
  return layout;
}

int64_t collective_ids(proto::CollectiveProto::Op op, int64_t n,
                       proto::CollectiveProto::Algorithm algorithm) {
  if (op == proto::CollectiveProto::ALL_TO_ALL || op == proto::CollectiveProto::SEND_RECV) return n;
  if (algorithm != proto::CollectiveProto::RECURSIVE_DOUBLING) return 1;
  int64_t stages = 2;  // the fold and the unfold
  for (int64_t step = 1; step < recursive_doubling_core(n); step *= 2) ++stages;
  return stages;
}

uint64_t collective_tag(int64_t collective_id, int64_t receiving_member) {
  OFL_ASSERT(collective_id >= 0 && collective_id < kMaxCollectiveId && receiving_member >= 0 &&
             receiving_member < kMaxCollectiveMembers);
  return (uint64_t{1} << 31) | (static_cast<uint64_t>(collective_id) << 12) |
         static_cast<uint64_t>(receiving_member);
}

}  // namespace ofl
