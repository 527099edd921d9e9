// Every op with a CPU kernel has a CUDA kernel for the same dtypes (issue 15: "from here on, a
// new op gets its CUDA kernel in the same change as its CPU kernel"). Runs without a GPU: it
// reads the registry.

#include <gtest/gtest.h>

#include <sstream>

#include "oneflowlike/cuda/device.h"
#include "oneflowlike/op.h"

namespace ofl {
namespace {

TEST(KernelCoverage, EveryCpuKernelHasACudaKernel) {
  if (!cuda::built_with_cuda()) GTEST_SKIP() << "built without CUDA (-DOFL_BUILD_CUDA=OFF)";
  std::ostringstream missing;
  int ops_with_kernels = 0;
  for (const std::string& name : OpRegistry::global().names()) {
    if (name.rfind("test_", 0) == 0) continue;  // ops the tests register for themselves
    const OpSchema& op = OpRegistry::global().find(name);
    bool has_cpu = false;
    for (int d = 0; d < kNumDataTypes; ++d) {
      const auto dtype = static_cast<DataType>(d);
      if (op.find_kernel(DeviceType::kCPU, dtype) == nullptr) continue;
      has_cpu = true;
      if (op.find_kernel(DeviceType::kCUDA, dtype) == nullptr) {
        missing << " " << name << "/" << dtype_name(dtype);
      }
    }
    ops_with_kernels += has_cpu ? 1 : 0;
  }
  EXPECT_GT(ops_with_kernels, 50);
  EXPECT_EQ(missing.str(), "") << "CPU kernels without a CUDA kernel:" << missing.str();
}

}  // namespace
}  // namespace ofl
