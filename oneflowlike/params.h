#pragma once
// Typed op parameters. Each op has a plain struct of parameters that names its fields once
// with OFL_PARAMS; printing, equality and hashing are derived from that one list, and later a
// protobuf encoding can be too. AnyParams holds any such struct behind one type.
//
//   struct MatmulParams {
//     bool transpose_a = false;
//     bool transpose_b = false;
//     OFL_PARAMS(MatmulParams, transpose_a, transpose_b)
//   };

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <tuple>
#include <typeindex>
#include <vector>

#include "oneflowlike/common/error.h"
#include "oneflowlike/dtype.h"
#include "oneflowlike/shape.h"

#define OFL_PARAMS(Type, ...)                                   \
  static constexpr std::string_view kParamsName = #Type;        \
  static constexpr std::string_view kFieldNames = #__VA_ARGS__; \
  auto fields() const { return std::tie(__VA_ARGS__); }         \
  auto fields() { return std::tie(__VA_ARGS__); }               \
  bool operator==(const Type& o) const { return fields() == o.fields(); }

namespace ofl {

namespace detail {

inline void print_value(std::string* s, bool v) { *s += v ? "true" : "false"; }
inline void print_value(std::string* s, int64_t v) { *s += std::to_string(v); }
inline void print_value(std::string* s, int v) { *s += std::to_string(v); }
inline void print_value(std::string* s, double v) { *s += str_cat(v); }
inline void print_value(std::string* s, DataType v) { *s += dtype_name(v); }
inline void print_value(std::string* s, const std::string& v) { *s += "'" + v + "'"; }
inline void print_value(std::string* s, const Shape& v) { *s += v.to_string(); }
inline void print_value(std::string* s, const std::vector<int64_t>& v) {
  *s += "[";
  for (size_t i = 0; i < v.size(); ++i) *s += (i ? ", " : "") + std::to_string(v[i]);
  *s += "]";
}

inline void hash_value(size_t* h, size_t v) {
  *h ^= v + 0x9e3779b97f4a7c15ull + (*h << 6) + (*h >> 2);
}
template <class T>
void hash_field(size_t* h, const T& v) {
  if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
    for (int64_t x : v) hash_value(h, std::hash<int64_t>()(x));
  } else if constexpr (std::is_same_v<T, Shape>) {
    for (int64_t x : v.dims()) hash_value(h, std::hash<int64_t>()(x));
  } else if constexpr (std::is_same_v<T, DataType>) {
    hash_value(h, static_cast<size_t>(v));
  } else {
    hash_value(h, std::hash<T>()(v));
  }
}

/// Calls fn(name, value) for every field of a params struct, in declaration order.
template <class P, class F>
void for_each_field(P& p, F&& fn) {
  std::string_view names = std::remove_const_t<P>::kFieldNames;
  std::apply(
      [&](auto&... field) {
        [[maybe_unused]] auto one = [&](auto& v) {
          const size_t comma = names.find(',');
          std::string_view name = names.substr(0, comma);
          while (!name.empty() && name.front() == ' ') name.remove_prefix(1);
          while (!name.empty() && name.back() == ' ') name.remove_suffix(1);
          names = comma == std::string_view::npos ? std::string_view() : names.substr(comma + 1);
          fn(name, v);
        };
        (one(field), ...);
      },
      p.fields());
}

template <class P>
std::string params_to_string(const P& p) {
  std::string s;
  for_each_field(p, [&](std::string_view name, const auto& v) {
    if (!s.empty()) s += ", ";
    s += std::string(name) + "=";
    print_value(&s, v);
  });
  return s;
}

class ParamsHolder {
 public:
  virtual ~ParamsHolder() = default;
  virtual std::type_index type() const = 0;
  virtual std::string_view type_name() const = 0;
  virtual std::string to_string() const = 0;
  virtual bool equals(const ParamsHolder& other) const = 0;
  virtual size_t hash() const = 0;
};

template <class P>
class TypedParamsHolder final : public ParamsHolder {
 public:
  explicit TypedParamsHolder(P value) : value_(std::move(value)) {}
  std::type_index type() const override { return typeid(P); }
  std::string_view type_name() const override { return P::kParamsName; }
  std::string to_string() const override { return params_to_string(value_); }
  bool equals(const ParamsHolder& other) const override {
    return other.type() == type() && static_cast<const TypedParamsHolder&>(other).value_ == value_;
  }
  size_t hash() const override {
    size_t h = std::hash<std::string_view>()(P::kParamsName);
    std::apply([&](const auto&... f) { (hash_field(&h, f), ...); }, value_.fields());
    return h;
  }
  const P& value() const { return value_; }

 private:
  P value_;
};

}  // namespace detail

/// Reads and writes params fields by name; the protobuf implementation lives in
/// proto_convert.cpp, so this header stays free of generated code.
class ParamsWriter {
 public:
  virtual ~ParamsWriter() = default;
  virtual void write(std::string_view name, bool v) = 0;
  virtual void write(std::string_view name, int64_t v) = 0;
  virtual void write(std::string_view name, double v) = 0;
  virtual void write(std::string_view name, const std::string& v) = 0;
  virtual void write(std::string_view name, DataType v) = 0;
  virtual void write(std::string_view name, const Shape& v) = 0;
  virtual void write(std::string_view name, const std::vector<int64_t>& v) = 0;
  void write(std::string_view name, int v) { write(name, static_cast<int64_t>(v)); }
};

class ParamsReader {
 public:
  virtual ~ParamsReader() = default;
  // Each leaves the value unchanged when the field is absent (the struct's default stays).
  virtual void read(std::string_view name, bool* v) = 0;
  virtual void read(std::string_view name, int64_t* v) = 0;
  virtual void read(std::string_view name, double* v) = 0;
  virtual void read(std::string_view name, std::string* v) = 0;
  virtual void read(std::string_view name, DataType* v) = 0;
  virtual void read(std::string_view name, Shape* v) = 0;
  virtual void read(std::string_view name, std::vector<int64_t>* v) = 0;
  void read(std::string_view name, int* v) {
    int64_t x = *v;
    read(name, &x);
    *v = static_cast<int>(x);
  }
};

/// Parameters with no fields.
struct NoParams {
  OFL_PARAMS(NoParams)
};

/// Any op's parameter struct; immutable and cheap to copy.
class AnyParams {
 public:
  AnyParams() : AnyParams(NoParams{}) {}
  template <class P, class = std::enable_if_t<!std::is_same_v<std::decay_t<P>, AnyParams>>>
  AnyParams(P params)  // NOLINT: implicit so that ops are called with a plain struct
      : holder_(std::make_shared<detail::TypedParamsHolder<P>>(std::move(params))) {}

  template <class P>
  bool is() const {
    return holder_->type() == typeid(P);
  }
  /// The struct; asserts that it is a P (the registry checks types before kernels run).
  template <class P>
  const P& as() const {
    OFL_ASSERT(is<P>()) << "params are " << holder_->type_name() << ", not " << P::kParamsName;
    return static_cast<const detail::TypedParamsHolder<P>&>(*holder_).value();
  }
  std::type_index type() const { return holder_->type(); }
  std::string_view type_name() const { return holder_->type_name(); }
  /// "transpose_a=false, transpose_b=true"
  std::string to_string() const { return holder_->to_string(); }
  size_t hash() const { return holder_->hash(); }
  bool operator==(const AnyParams& o) const { return holder_->equals(*o.holder_); }

 private:
  std::shared_ptr<const detail::ParamsHolder> holder_;
};

}  // namespace ofl
