#pragma once
// Conversions between core types and their protobuf messages (job.proto, plan.proto).

#include "oneflowlike/op.h"
#include "oneflowlike/placement.h"
#include "oneflowlike/proto/job.pb.h"
#include "oneflowlike/proto/plan.pb.h"
#include "oneflowlike/sbp.h"

namespace ofl {

void to_proto(const Shape& shape, proto::ShapeProto* out);
Shape from_proto(const proto::ShapeProto& in);

void to_proto(const Sbp& sbp, proto::SbpProto* out);
Sbp from_proto(const proto::SbpProto& in);

void to_proto(const NdSbp& nd_sbp, proto::NdSbpProto* out);
NdSbp from_proto(const proto::NdSbpProto& in);

void to_proto(const Placement& placement, proto::PlacementProto* out);
/// Raises ValueError (from the Placement constructor) when the message is inconsistent.
Placement from_proto(const proto::PlacementProto& in);

/// Appends one RangeProto per axis of `region` (a plan's slice, concat or output regions).
void add_ranges(const std::vector<Range>& region,
                google::protobuf::RepeatedPtrField<proto::RangeProto>* out);
/// The `count` ranges of `in` from index `begin` on (one region of a flattened list).
std::vector<Range> ranges_from_proto(
    const google::protobuf::RepeatedPtrField<proto::RangeProto>& in, int begin, int count);

/// Writes `params` of `op` field by field.
void params_to_proto(const OpSchema& op, const AnyParams& params, proto::ParamsProto* out);
/// Builds `op`'s params struct; raises TypeError naming the op when the message holds another
/// struct or a field of the wrong kind.
AnyParams params_from_proto(const OpSchema& op, const proto::ParamsProto& in);

}  // namespace ofl
