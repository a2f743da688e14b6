// One process, one device (cpu/runtime/devices.h): a host thread that makes a CUDA call without selecting
// the process's device would open a context on device 0 of a GPU, and the CPU build reports it.
// The watchdog (trainer/safety/watchdog.h) is such a thread: it queries the executor's events while a
// step runs. Also what needs no context, and that the CPU build's own threads are not counted.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "cpu/runtime/devices.h"
#include "cpu/runtime/settings.h"
#include "cpu/runtime/streams.h"
#include "kernels/cuda_check.cuh"
#include "model/config.h"
#include "tests/device_buffer.h"
#include "trainer/data/data.h"
#include "trainer/step/trainer.h"
#include "trainer/safety/watchdog.h"

namespace {

// Tests that use several devices raise the limit, and leave the process on device 0 with no
// device recorded, as it started.
class DeviceContexts : public testing::Test {
 protected:
  void SetUp() override {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    cpu::forget_devices_used();
  }
  void TearDown() override {
    cpu::settings() = saved_;
    CUDA_CHECK(cudaSetDevice(0));
    cpu::forget_devices_used();
  }
  cpu::Settings saved_ = cpu::settings();
};

// Holds a stream at a host function until the test opens it.
struct Gate {
  std::promise<void> open;
  std::shared_future<void> opened = open.get_future().share();
  static void wait(void* gate) { static_cast<Gate*>(gate)->opened.wait(); }
};

// A step of a tiny trainer on device 3 whose stream is held for 1.2 s: meanwhile the watchdog
// (polling every 0.5 s) finds the executor walking and queries its step events, from its thread.
TEST_F(DeviceContexts, TheWatchdogThreadUsesOnlyTheRanksDevice) {
  cpu::settings().devices_per_process = 8;  // a stray thread is recorded, not aborted
  CUDA_CHECK(cudaSetDevice(3));
  Trainer<float> trainer = create_trainer<float>(make_gpt_config(2, 2, 16, 16, 64), 2, 16, 2);
  TokenDataset data;
  for (int i = 0; i < 1000; ++i) data.tokens.push_back(uint16_t(i % 64));
  data.vocab_size = 64;
  BatchReader reader = make_batch_reader(data, 2, 16, false, 1);
  RunActivity activity;
  activity.training_step = 2;
  activity.phase = kTrainingStepPhase;
  Watchdog* dog = start_watchdog(5.0, {0, 0, 0}, trainer.executor, activity, [](const std::string&) {});
  Gate gate;
  CUDA_CHECK(cudaLaunchHostFunc(trainer.stream, Gate::wait, &gate));
  std::thread opener([&gate] {
    std::this_thread::sleep_for(std::chrono::milliseconds(1200));
    gate.open.set_value();
  });

  train_step(trainer, reader, AdamWSettings{0.9, 0.95, 1e-8, 0.1, 1.0}, 1e-3, 2);
  opener.join();
  stop_watchdog(dog);
  destroy_trainer(trainer);

  EXPECT_EQ(cpu::devices_used(), std::vector<int>{3});
}

void event_from_a_thread_that_never_selected_a_device() {
  CUDA_CHECK(cudaSetDevice(2));
  DeviceBuffer<float> on_two(4);
  std::thread([] {
    cudaEvent_t event;
    cudaEventCreate(&event);
  }).join();
  std::exit(0);
}

TEST_F(DeviceContexts, AThreadOnAnotherDeviceIsReportedInOneLineAndAborts) {
  EXPECT_DEATH(event_from_a_thread_that_never_selected_a_device(),
               "cpu: cudaEventCreate on device 0 \\(the calling thread's current device\\) in a process that uses "
               "device 2: one process, one device, as on a GPU node \\(every thread calls cudaSetDevice before its "
               "first CUDA call; CUDA_CPU_DEVICES_PER_PROCESS=2 allows more\\)");
}

// As in CUDA, asking about devices and selecting one opens no context.
TEST_F(DeviceContexts, DeviceQueriesSelectionAndErrorsUseNoDevice) {
  int count = 0, device = -1;
  cudaDeviceProp properties;
  CUDA_CHECK(cudaGetDeviceCount(&count));
  CUDA_CHECK(cudaGetDeviceProperties(&properties, 5));
  CUDA_CHECK(cudaSetDevice(5));
  CUDA_CHECK(cudaGetDevice(&device));
  (void)cudaGetLastError();
  (void)cudaGetErrorString(cudaErrorInvalidValue);
  EXPECT_EQ(cpu::devices_used(), std::vector<int>{});
  DeviceBuffer<float> buffer(4);
  EXPECT_EQ(cpu::devices_used(), std::vector<int>{5});
}

// Stream workers and a kernel's block threads run the device's work on threads whose own current
// device is 0; what they do is the device's, not a host thread's call.
TEST_F(DeviceContexts, TheCpuBuildsOwnThreadsAreNotCounted) {
  CUDA_CHECK(cudaSetDevice(4));
  DeviceBuffer<float> buffer(4);
  std::thread([] {
    cpu::RunningOperation as_a_stream_worker("kernel", 4);
    cpu::use_current_context("the kernel's work");
  }).join();
  EXPECT_EQ(cpu::devices_used(), std::vector<int>{4});
}

// CUDA_VISIBLE_DEVICES as CUDA reads it, on a node of 8 devices.
TEST(VisibleDevices, AreReadAsCudaReadsThem) {
  EXPECT_EQ(cpu::parse_visible_devices(std::nullopt, 4), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(cpu::parse_visible_devices("2,0", 8), (std::vector<int>{2, 0}));
  EXPECT_EQ(cpu::parse_visible_devices("3, 1", 8), (std::vector<int>{3, 1}));
  EXPECT_EQ(cpu::parse_visible_devices("0,2,-1,1", 8), (std::vector<int>{0, 2})) << "an invalid entry ends the list";
  EXPECT_EQ(cpu::parse_visible_devices("1,9,2", 8), (std::vector<int>{1})) << "so does a device the node lacks";
  EXPECT_EQ(cpu::parse_visible_devices("1gpu,3", 8), (std::vector<int>{1, 3})) << "an index is its leading digits";
  EXPECT_EQ(cpu::parse_visible_devices("0,1,0", 8), (std::vector<int>{})) << "a repeated index hides every device";
  EXPECT_EQ(cpu::parse_visible_devices("", 8), (std::vector<int>{}));
}

TEST_F(DeviceContexts, CudaVisibleDevicesGivesTheCountTheMappingAndTheUuids) {
  std::vector<std::string> uuids;
  for (int d = 0; d < 8; ++d) {
    cudaDeviceProp properties;
    CUDA_CHECK(cudaGetDeviceProperties(&properties, d));
    uuids.emplace_back(properties.uuid.bytes, 16);
  }
  for (int d = 1; d < 8; ++d)
    for (int e = 0; e < d; ++e) EXPECT_NE(uuids[d], uuids[e]) << "devices " << d << " and " << e;

  cpu::settings().visible_devices = "6,1";
  int count = 0;
  CUDA_CHECK(cudaGetDeviceCount(&count));
  EXPECT_EQ(count, 2);
  EXPECT_EQ(cudaSetDevice(2), cudaErrorInvalidDevice);
  (void)cudaGetLastError();
  for (int d : {0, 1}) {
    cudaDeviceProp properties;
    CUDA_CHECK(cudaGetDeviceProperties(&properties, d));
    EXPECT_EQ(std::string(properties.uuid.bytes, 16), uuids[d == 0 ? 6 : 1]) << "visible device " << d;
  }

  cpu::settings().visible_devices = "";
  EXPECT_EQ(cudaGetDeviceCount(&count), cudaErrorNoDevice);
  EXPECT_EQ(count, 0);
  (void)cudaGetLastError();
}

}  // namespace
