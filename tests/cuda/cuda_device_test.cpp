#include <gtest/gtest.h>

#include "backend/cuda/cuda_device.h"
#include "core/error.h"
#include "cuda/gpu_test_util.h"

namespace latentserve {
namespace {

TEST(CudaDevice, NoGpuGivesANamedErrorOrAWorkingDevice) {
  if (cuda::device_count() == 0) {
    try {
      cuda::CudaDevice device;
      FAIL() << "constructing a CudaDevice without a GPU must throw";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("no CUDA GPU"), std::string::npos) << e.what();
    }
    GTEST_SKIP() << cuda::no_device_reason() << " (checked that --device cuda fails with a clear error)";
  }
  cuda::CudaDevice device;
  EXPECT_GT(device.n_sm(), 0);
  auto [free_bytes, total_bytes] = device.memory_info();
  EXPECT_GT(total_bytes, size_t(0));
  EXPECT_LE(free_bytes, total_bytes);
}

TEST(CudaDevice, OversizedAllocationNamesTheSize) {
  LS_REQUIRE_GPU();
  cuda::CudaDevice device;
  try {
    cuda::DeviceBuffer huge(size_t(1) << 50);  // 1 PiB
    FAIL() << "a 1 PiB allocation must fail";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cudaMalloc of"), std::string::npos) << e.what();
  }
  cuda::DeviceBuffer ok(1024);  // the device still works afterwards
  EXPECT_NE(ok.data(), nullptr);
}

}  // namespace
}  // namespace latentserve
