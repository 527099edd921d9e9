#pragma once
// Data types. One X-macro list makes the enum, the names, the C++ types and the sizes.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "oneflowlike/half.h"

namespace ofl {

// _(name, Enum, ctype)
#define OFL_FOR_EACH_DTYPE(_)      \
  _(float32, kFloat32, float)      \
  _(float64, kFloat64, double)     \
  _(float16, kFloat16, float16)    \
  _(bfloat16, kBFloat16, bfloat16) \
  _(int8, kInt8, int8_t)           \
  _(int32, kInt32, int32_t)        \
  _(int64, kInt64, int64_t)        \
  _(bool, kBool, bool)

enum class DataType : int8_t {
#define OFL_DTYPE_ENUM(name, Enum, ctype) Enum,
  OFL_FOR_EACH_DTYPE(OFL_DTYPE_ENUM)
#undef OFL_DTYPE_ENUM
};

constexpr int kNumDataTypes = 8;

/// "float32", "int64", ...
const char* dtype_name(DataType dtype);
/// Parses a name from dtype_name (also "float", "double", "half", "long", "int").
DataType dtype_from_name(std::string_view name);
size_t dtype_size(DataType dtype);
bool is_floating(DataType dtype);
bool is_integral(DataType dtype);  // int8, int32, int64 (not bool)
/// The result type of a binary op on a and b (an explicit table, as in c10).
DataType promote_types(DataType a, DataType b);

template <class T>
struct DataTypeOf;
#define OFL_DTYPE_OF(name, Enum, ctype)               \
  template <>                                         \
  struct DataTypeOf<ctype> {                          \
    static constexpr DataType value = DataType::Enum; \
  };
OFL_FOR_EACH_DTYPE(OFL_DTYPE_OF)
#undef OFL_DTYPE_OF

template <class T>
constexpr DataType dtype_of() {
  return DataTypeOf<T>::value;
}

}  // namespace ofl

namespace ofl {

/// Calls fn.template operator()<T>() with T the C++ type of `dtype`.
template <class F>
decltype(auto) visit_dtype(DataType dtype, F&& fn) {
  switch (dtype) {
#define OFL_DTYPE_VISIT(name, Enum, ctype) \
  case DataType::Enum:                     \
    return fn.template operator()<ctype>();
    OFL_FOR_EACH_DTYPE(OFL_DTYPE_VISIT)
#undef OFL_DTYPE_VISIT
  }
  return fn.template operator()<float>();
}

}  // namespace ofl
