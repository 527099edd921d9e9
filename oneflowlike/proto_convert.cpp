#include "oneflowlike/proto_convert.h"

namespace ofl {

void add_ranges(const std::vector<Range>& region,
                google::protobuf::RepeatedPtrField<proto::RangeProto>* out) {
  for (const Range& r : region) {
    proto::RangeProto* p = out->Add();
    p->set_begin(r.begin);
    p->set_end(r.end);
  }
}

std::vector<Range> ranges_from_proto(
    const google::protobuf::RepeatedPtrField<proto::RangeProto>& in, int begin, int count) {
  std::vector<Range> out;
  for (int i = begin; i < begin + count; ++i) out.push_back(Range{in[i].begin(), in[i].end()});
  return out;
}

void to_proto(const Shape& shape, proto::ShapeProto* out) {
  out->clear_dims();
  for (int64_t d : shape.dims()) out->add_dims(d);
}

Shape from_proto(const proto::ShapeProto& in) {
  return Shape(std::vector<int64_t>(in.dims().begin(), in.dims().end()));
}

void to_proto(const Sbp& sbp, proto::SbpProto* out) {
  switch (sbp.kind) {
    case Sbp::Kind::kSplit:
      out->set_kind(proto::SbpProto::SPLIT);
      out->set_axis(sbp.axis);
      break;
    case Sbp::Kind::kBroadcast:
      out->set_kind(proto::SbpProto::BROADCAST);
      break;
    case Sbp::Kind::kPartialSum:
      out->set_kind(proto::SbpProto::PARTIAL_SUM);
      break;
  }
}

Sbp from_proto(const proto::SbpProto& in) {
  switch (in.kind()) {
    case proto::SbpProto::SPLIT:
      return S(in.axis());
    case proto::SbpProto::PARTIAL_SUM:
      return P();
    default:
      return B();
  }
}

void to_proto(const NdSbp& nd_sbp, proto::NdSbpProto* out) {
  out->clear_sbp();
  for (const Sbp& s : nd_sbp) to_proto(s, out->add_sbp());
}

NdSbp from_proto(const proto::NdSbpProto& in) {
  NdSbp out;
  for (const auto& s : in.sbp()) out.push_back(from_proto(s));
  return out;
}

void to_proto(const Placement& placement, proto::PlacementProto* out) {
  out->set_device_type(device_type_name(placement.device_type()));
  out->clear_ranks();
  for (int64_t r : placement.ranks()) out->add_ranks(r);
  to_proto(placement.hierarchy(), out->mutable_hierarchy());
}

Placement from_proto(const proto::PlacementProto& in) {
  std::vector<int64_t> ranks(in.ranks().begin(), in.ranks().end());
  Shape hierarchy = from_proto(in.hierarchy());
  if (hierarchy.ndim() == 0) hierarchy = Shape{static_cast<int64_t>(ranks.size())};
  return Placement(device_type_from_name(in.device_type()), std::move(ranks), hierarchy);
}

namespace {

class ProtoParamsWriter final : public ParamsWriter {
 public:
  explicit ProtoParamsWriter(proto::ParamsProto* out) : out_(out) {}
  void write(std::string_view name, bool v) override { field(name)->set_bool_value(v); }
  void write(std::string_view name, int64_t v) override { field(name)->set_int_value(v); }
  void write(std::string_view name, double v) override { field(name)->set_double_value(v); }
  void write(std::string_view name, const std::string& v) override {
    field(name)->set_string_value(v);
  }
  void write(std::string_view name, DataType v) override {
    field(name)->set_dtype_value(dtype_name(v));
  }
  void write(std::string_view name, const Shape& v) override {
    to_proto(v, field(name)->mutable_shape_value());
  }
  void write(std::string_view name, const std::vector<int64_t>& v) override {
    auto* list = field(name)->mutable_int_list_value();
    for (int64_t x : v) list->add_dims(x);
  }

 private:
  proto::ParamFieldProto* field(std::string_view name) {
    auto* f = out_->add_fields();
    f->set_name(std::string(name));
    return f;
  }
  proto::ParamsProto* out_;
};

class ProtoParamsReader final : public ParamsReader {
 public:
  ProtoParamsReader(const OpSchema& op, const proto::ParamsProto& in) : op_(op), in_(in) {}
  void read(std::string_view name, bool* v) override {
    if (auto* f = find(name, proto::ParamFieldProto::kBoolValue)) *v = f->bool_value();
  }
  void read(std::string_view name, int64_t* v) override {
    if (auto* f = find(name, proto::ParamFieldProto::kIntValue)) *v = f->int_value();
  }
  void read(std::string_view name, double* v) override {
    if (auto* f = find(name, proto::ParamFieldProto::kDoubleValue)) *v = f->double_value();
  }
  void read(std::string_view name, std::string* v) override {
    if (auto* f = find(name, proto::ParamFieldProto::kStringValue)) *v = f->string_value();
  }
  void read(std::string_view name, DataType* v) override {
    if (auto* f = find(name, proto::ParamFieldProto::kDtypeValue))
      *v = dtype_from_name(f->dtype_value());
  }
  void read(std::string_view name, Shape* v) override {
    if (auto* f = find(name, proto::ParamFieldProto::kShapeValue))
      *v = from_proto(f->shape_value());
  }
  void read(std::string_view name, std::vector<int64_t>* v) override {
    if (auto* f = find(name, proto::ParamFieldProto::kIntListValue)) {
      v->assign(f->int_list_value().dims().begin(), f->int_list_value().dims().end());
    }
  }

 private:
  const proto::ParamFieldProto* find(std::string_view name,
                                     proto::ParamFieldProto::ValueCase expected) {
    for (const auto& f : in_.fields()) {
      if (f.name() != name) continue;
      OFL_CHECK_TYPE(f.value_case() == expected, "[", op_.name(), "] parameter '", name,
                     "' has the wrong kind of value in the saved job.");
      return &f;
    }
    return nullptr;
  }
  const OpSchema& op_;
  const proto::ParamsProto& in_;
};

}  // namespace

void params_to_proto(const OpSchema& op, const AnyParams& params, proto::ParamsProto* out) {
  out->Clear();
  out->set_type(std::string(params.type_name()));
  ProtoParamsWriter writer(out);
  op.write_params(params, writer);
}

AnyParams params_from_proto(const OpSchema& op, const proto::ParamsProto& in) {
  OFL_CHECK_TYPE(in.type().empty() || in.type() == op.params_name(), "[", op.name(),
                 "] expects parameters of type ", op.params_name(), ". However, got ", in.type(),
                 ".");
  ProtoParamsReader reader(op, in);
  return op.read_params(reader);
}

}  // namespace ofl
