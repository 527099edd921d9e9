#include "oneflowlike/device.h"

#include <atomic>
#include <charconv>
#include <cstdlib>
#include <string>

#include "oneflowlike/common/error.h"
#include "oneflowlike/cuda/device.h"

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
  if (colon == std::string_view::npos && d.type == DeviceType::kCUDA) {
    d.index = current_cuda_device();
  } else if (colon != std::string_view::npos) {
    std::string_view digits = spec.substr(colon + 1);
    auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), d.index);
    OFL_CHECK(ec == std::errc() && ptr == digits.data() + digits.size() && d.index >= 0,
              "[device] expected 'type' or 'type:index' with a non-negative index. However, got '",
              spec, "'.");
  }
  return d;
}

int simulated_cuda_devices() {
  static const int count = [] {
    const char* env = std::getenv("OFL_SIMULATE_CUDA_DEVICES");
    if (env == nullptr || *env == '\0') return 0;
    const std::string_view text(env);
    int n = -1;
    auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
    OFL_CHECK(ec == std::errc() && ptr == text.data() + text.size() && n >= 0 && n <= 64,
              "[cuda] OFL_SIMULATE_CUDA_DEVICES must be a count of simulated devices from 0 to "
              "64. However, got '",
              text, "'.");
    return n;
  }();
  return count;
}

int cuda_devices() {
  const int simulated = simulated_cuda_devices();
  return simulated > 0 ? simulated : cuda::device_count();
}

LauncherGpu launcher_gpu() {
  LauncherGpu out;
  for (const char* name : {"OFL_CUDA_DEVICE", "LOCAL_RANK"}) {
    const char* env = std::getenv(name);
    if (env == nullptr) continue;
    out.variable = name;
    out.text = env;
    char* end = nullptr;
    const long value = std::strtol(env, &end, 10);
    if (*env != '\0' && *end == '\0' && value >= 0 && value < 1 << 20) {
      out.index = static_cast<int>(value);
    }
    break;
  }
  return out;
}

namespace {

// The launcher's GPU where this process sees it; else 0 (as before: a process that sees one GPU,
// CUDA_VISIBLE_DEVICES per rank, or a value that is not a GPU index, which the runtime refuses
// naming the variable when a plan needs the GPU).
int default_cuda_device() {
  const int index = launcher_gpu().index;
  return index > 0 && index < cuda_devices() ? index : 0;
}

constexpr int kUnset = -1;
std::atomic<int> current_cuda{kUnset};

}  // namespace

int current_cuda_device() {
  int index = current_cuda.load(std::memory_order_relaxed);
  if (index != kUnset) return index;
  // First asked: counting devices starts the CUDA runtime, so not at load. Two threads asking
  // at once compute the same value.
  index = default_cuda_device();
  int unset = kUnset;
  current_cuda.compare_exchange_strong(unset, index, std::memory_order_relaxed);
  return current_cuda.load(std::memory_order_relaxed);
}

void set_current_cuda_device(int index) {
  const int count = cuda_devices();
  OFL_CHECK_CODE(index >= 0 && index < count, ErrorCode::kUnavailable, "[cuda] no CUDA device ",
                 index, ": this process sees ", count, " CUDA device(s)",
                 count == 0 ? std::string(" (") + cuda::why_no_device() + ")" : std::string(), ".");
  if (simulated_cuda_devices() == 0) cuda::set_device(index);  // contexts go there from now
  current_cuda.store(index, std::memory_order_relaxed);
}

std::string Device::to_string() const { return str_cat(device_type_name(type), ":", index); }

}  // namespace ofl
