#pragma once

#include <string>
#include <string_view>

namespace ofl {

enum class DeviceType : int8_t { kCPU = 0, kCUDA = 1 };
constexpr int kNumDeviceTypes = 2;

const char* device_type_name(DeviceType type);
/// "cpu" or "cuda"; raises ValueError otherwise.
DeviceType device_type_from_name(std::string_view name);

struct Device {
  DeviceType type = DeviceType::kCPU;
  int index = 0;

  static Device cpu() { return Device{}; }
  /// "cpu", "cpu:0", "cuda", "cuda:1".
  static Device parse(std::string_view spec);
  std::string to_string() const;
  bool operator==(const Device& o) const { return type == o.type && index == o.index; }
  bool operator!=(const Device& o) const { return !(*this == o); }
};

}  // namespace ofl
