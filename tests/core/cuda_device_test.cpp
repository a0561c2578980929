// Tensors on a GPU: placement, the device allocator's accounting, host-access and mixed-device
// errors. Compiled always; each test skips with a one-line reason when no GPU is visible.
#include <gtest/gtest.h>

#include "core/backend.h"
#include "core/build_config.h"
#include "tests/support/errors.h"
#include "tests/support/gpu.h"

namespace packrat {
namespace {

using testing::gpu_visible;
#define PACKRAT_REQUIRE_GPU() PACKRAT_SKIP_WITHOUT_GPU()

TEST(CudaDevice, WithoutAGpuAskingForOneIsAClearError) {
  if (gpu_visible()) GTEST_SKIP() << "a GPU is visible";
  const std::string m = testing::message_of([] { backend(Device::cuda(0)); });
  EXPECT_TRUE(m.starts_with("device cuda:0: ")) << m;
  EXPECT_NE(m.find(PACKRAT_HAVE_CUDA ? "no GPU is visible" : "built without CUDA"), std::string::npos) << m;
}

TEST(CudaDevice, TensorsLiveInTheGpuAllocatorUnderTheirTags) {
  PACKRAT_REQUIRE_GPU();
  Allocator& gpu = Allocator::of(Device::cuda(0));
  EXPECT_EQ(gpu.device(), Device::cuda(0));
  const int64_t before = gpu.current(MemTag::Activation), cpu_before = Allocator::cpu().current(MemTag::Activation);
  {
    DeviceScope on(Device::cuda(0));
    Tensor t = Tensor::zeros({1000});
    EXPECT_EQ(t.device(), Device::cuda(0));
    EXPECT_EQ(gpu.current(MemTag::Activation), before + 4000);
    EXPECT_EQ(Allocator::cpu().current(MemTag::Activation), cpu_before);
    Tensor s = Tensor::empty({10}, DType::f32, Layout::Plain, MemTag::Saved);
    EXPECT_EQ(gpu.current(MemTag::Saved), 40);
  }
  EXPECT_EQ(gpu.current(MemTag::Activation), before);
  EXPECT_EQ(gpu.current(MemTag::Saved), 0);
}

TEST(CudaDevice, TheByteLimitRaisesOutOfMemoryNamingTheDeviceAndLayer) {
  PACKRAT_REQUIRE_GPU();
  Allocator& gpu = Allocator::of(Device::cuda(0));
  gpu.set_limit(gpu.total_current() + 1000);
  LayerScope layer("layer1.0.conv1");
  const std::string m = testing::message_of([] { Tensor::empty({1000}, DType::f32, Layout::Plain, MemTag::Activation, Device::cuda(0)); });
  gpu.set_limit(0);
  EXPECT_TRUE(m.starts_with("out of memory on cuda:0: allocating 4000 bytes of Activation for layer 'layer1.0.conv1'")) << m;
}

TEST(CudaDevice, HostAccessOnAGpuTensorNamesTheCall) {
  PACKRAT_REQUIRE_GPU();
  Tensor t = Tensor::zeros({4}).to(Device::cuda(0));
  EXPECT_EQ(testing::message_of([&] { t.data<float>(); }),
            "data<T>(): the tensor is on cuda:0; host access needs a CPU tensor (.to(Device::cpu()) first)");
  EXPECT_EQ(testing::message_of([&] { t.item(); }),
            "item(): the tensor is on cuda:0; host access needs a CPU tensor (.to(Device::cpu()) first)");
  EXPECT_EQ(t.to(Device::cpu()).to_vector(), std::vector<float>(4, 0.0f));
}

TEST(CudaDevice, OpsNameInputsOnDifferentDevices) {
  PACKRAT_REQUIRE_GPU();
  Tensor a = Tensor::zeros({2}).to(Device::cuda(0)), b = Tensor::zeros({2});
  LayerScope layer("layer1.0");
  EXPECT_EQ(testing::message_of([&] { check_same_device("add", {&a, &b}); }),
            "add layer1.0: input 0 is on cuda:0, input 1 on cpu");
}

TEST(CudaDevice, AskingForAGpuThatIsNotThereNamesIt) {
  PACKRAT_REQUIRE_GPU();
  const std::string m = testing::message_of([] { backend(Device::cuda(999)); });
  EXPECT_TRUE(m.starts_with("device cuda:999: only ")) << m;
}

}  // namespace
}  // namespace packrat
