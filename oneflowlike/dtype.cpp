#include "oneflowlike/dtype.h"

#include "oneflowlike/common/error.h"

namespace ofl {

const char* dtype_name(DataType dtype) {
  switch (dtype) {
#define OFL_DTYPE_NAME(name, Enum, ctype) \
  case DataType::Enum:                    \
    return #name;
    OFL_FOR_EACH_DTYPE(OFL_DTYPE_NAME)
#undef OFL_DTYPE_NAME
  }
  return "unknown";
}

size_t dtype_size(DataType dtype) {
  switch (dtype) {
#define OFL_DTYPE_SIZE(name, Enum, ctype) \
  case DataType::Enum:                    \
    return sizeof(ctype);
    OFL_FOR_EACH_DTYPE(OFL_DTYPE_SIZE)
#undef OFL_DTYPE_SIZE
  }
  return 0;
}

DataType dtype_from_name(std::string_view name) {
#define OFL_DTYPE_PARSE(n, Enum, ctype) \
  if (name == #n) return DataType::Enum;
  OFL_FOR_EACH_DTYPE(OFL_DTYPE_PARSE)
#undef OFL_DTYPE_PARSE
  if (name == "float") return DataType::kFloat32;
  if (name == "double") return DataType::kFloat64;
  if (name == "half") return DataType::kFloat16;
  if (name == "int") return DataType::kInt32;
  if (name == "long") return DataType::kInt64;
  throw_error(ErrorCode::kTypeError,
              str_cat("[dtype] expected one of float32, float64, float16, bfloat16, int8, int32, "
                      "int64, bool. However, got '",
                      name, "'."));
}

bool is_floating(DataType dtype) {
  return dtype == DataType::kFloat32 || dtype == DataType::kFloat64 ||
         dtype == DataType::kFloat16 || dtype == DataType::kBFloat16;
}

bool is_integral(DataType dtype) {
  return dtype == DataType::kInt8 || dtype == DataType::kInt32 || dtype == DataType::kInt64;
}

DataType promote_types(DataType a, DataType b) {
  // Rows and columns in enum order: f32 f64 f16 bf16 i8 i32 i64 bool.
  constexpr DataType f32 = DataType::kFloat32, f64 = DataType::kFloat64, f16 = DataType::kFloat16,
                     bf16 = DataType::kBFloat16, i8 = DataType::kInt8, i32 = DataType::kInt32,
                     i64 = DataType::kInt64, b1 = DataType::kBool;
  static constexpr DataType kTable[kNumDataTypes][kNumDataTypes] = {
      /* f32  */ {f32, f64, f32, f32, f32, f32, f32, f32},
      /* f64  */ {f64, f64, f64, f64, f64, f64, f64, f64},
      /* f16  */ {f32, f64, f16, f32, f16, f16, f16, f16},
      /* bf16 */ {f32, f64, f32, bf16, bf16, bf16, bf16, bf16},
      /* i8   */ {f32, f64, f16, bf16, i8, i32, i64, i8},
      /* i32  */ {f32, f64, f16, bf16, i32, i32, i64, i32},
      /* i64  */ {f32, f64, f16, bf16, i64, i64, i64, i64},
      /* bool */ {f32, f64, f16, bf16, i8, i32, i64, b1},
  };
  return kTable[static_cast<int>(a)][static_cast<int>(b)];
}

}  // namespace ofl
