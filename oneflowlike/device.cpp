#include "oneflowlike/device.h"

#include <charconv>

#include "oneflowlike/common/error.h"

namespace ofl {

const char* device_type_name(DeviceType type) { return type == DeviceType::kCPU ? "cpu" : "cuda"; }

DeviceType device_type_from_name(std::string_view name) {
  if (name == "cpu") return DeviceType::kCPU;
  if (name == "cuda" || name == "gpu") return DeviceType::kCUDA;
  throw_error(ErrorCode::kInvalidArgument,
              str_cat("[device] device type must be 'cpu' or 'cuda'. However, got '", name, "'."));
}

Device Device::parse(std::string_view spec) {
  Device d;
  const size_t colon = spec.find(':');
  d.type = device_type_from_name(spec.substr(0, colon));
  if (colon != std::string_view::npos) {
    std::string_view digits = spec.substr(colon + 1);
    auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), d.index);
    OFL_CHECK(ec == std::errc() && ptr == digits.data() + digits.size() && d.index >= 0,
              "[device] expected 'type' or 'type:index' with a non-negative index. However, got '",
              spec, "'.");
  }
  return d;
}

std::string Device::to_string() const { return str_cat(device_type_name(type), ":", index); }

}  // namespace ofl
