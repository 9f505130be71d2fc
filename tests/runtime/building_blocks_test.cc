// Actor ids, the message queue, device memory and host memory on their own.
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "core/host_buffer_layout.h"
#include "device/memory_resource.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/actor_id.h"
#include "runtime/device_memory.h"
#include "runtime/message_queue.h"

namespace loom {
namespace {

using ::testing::HasSubstr;

TEST(ActorIdTest, PacksAndUnpacksEveryField) {
  plan::Stream stream;
  stream.mutable_device()->set_node(513);
  stream.mutable_device()->set_type(plan::CUDA);
  stream.mutable_device()->set_index(4095);
  stream.set_kind(plan::STREAM_COMMUNICATION);
  stream.set_index(15);
  ActorId id = ActorId::Make(stream, ActorId::kMaxTaskIndex);
  EXPECT_EQ(id.node(), 513);
  EXPECT_EQ(id.device_type(), plan::CUDA);
  EXPECT_EQ(id.device_index(), 4095);
  EXPECT_EQ(id.stream_kind(), plan::STREAM_COMMUNICATION);
  EXPECT_EQ(id.stream_index(), 15);
  EXPECT_EQ(id.task_index(), ActorId::kMaxTaskIndex);
  EXPECT_EQ(id.ToString(), "node513/cuda:4095/communication.15#16777215");
}

TEST(ActorIdTest, ActorsOfOneStreamShareTheStreamKey) {
  plan::Stream stream;
  stream.mutable_device()->set_type(plan::CPU);
  stream.mutable_device()->set_index(2);
  EXPECT_EQ(ActorId::Make(stream, 1).stream_key(), ActorId::Make(stream, 900).stream_key());
  plan::Stream other = stream;
  other.set_kind(plan::STREAM_COPY_IN);
  EXPECT_NE(ActorId::Make(stream, 1).stream_key(), ActorId::Make(other, 1).stream_key());
  // An unspecified stream kind is the compute stream.
  plan::Stream compute = stream;
  compute.set_kind(plan::STREAM_COMPUTE);
  EXPECT_EQ(ActorId::Make(stream, 3), ActorId::Make(compute, 3));
}

TEST(MessageQueueTest, ManyProducersOneConsumerLoseNothingAndKeepPerProducerOrder) {
  MessageQueue queue;
  const int producers = 4;
  const int per_producer = 20000;
  std::vector<std::thread> threads;
  for (int p = 0; p < producers; ++p) {
    threads.emplace_back([&queue, p] {
      for (int i = 0; i < per_producer; ++i) {
        ActorMessage message;
        message.slot = p;
        message.piece = i;
        queue.Push(message);
      }
    });
  }
  std::vector<int64_t> next(producers, 0);
  int received = 0;
  std::vector<ActorMessage> batch;
  while (received < producers * per_producer) {
    queue.WaitForMessages(absl::Microseconds(10), absl::Milliseconds(10));
    batch.clear();
    if (!queue.TakeAll(&batch)) continue;
    for (const ActorMessage& message : batch) {
      ASSERT_EQ(message.piece, next[message.slot]) << "producer " << message.slot;
      ++next[message.slot];
      ++received;
    }
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_FALSE(queue.HasMessages());
}

TEST(MessageQueueTest, ParkedConsumerIsWokenByAPush) {
  MessageQueue queue;
  std::thread producer([&queue] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    queue.Push(ActorMessage{});
  });
  auto start = std::chrono::steady_clock::now();
  queue.WaitForMessages(absl::ZeroDuration(), absl::Seconds(10));
  auto waited = std::chrono::steady_clock::now() - start;
  producer.join();
  EXPECT_TRUE(queue.HasMessages());
  EXPECT_LT(waited, std::chrono::seconds(5));
}

TEST(DeviceMemoryTest, AccountsForEveryByteAndRefusesBeyondTheBudget) {
  DeviceMemory memory("node0/cpu:0", 1000);
  auto first = memory.Allocate(600, "register 'a' slot 0");
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(memory.used_bytes(), 600);
  auto second = memory.Allocate(500, "register 'b' slot 0");
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(second.status().message(), HasSubstr("node0/cpu:0"));
  EXPECT_THAT(second.status().message(), HasSubstr("register 'b' slot 0"));
  EXPECT_THAT(second.status().message(), HasSubstr("largest: register 'a' slot 0 (600 B)"));
  EXPECT_EQ(memory.used_bytes(), 600);
  ASSERT_TRUE(memory.Charge(300, "sink 's'").ok());
  EXPECT_EQ(memory.used_bytes(), 900);
  memory.Release(300, "sink 's'");
  memory.Free(*first);
  EXPECT_EQ(memory.used_bytes(), 0);
  EXPECT_EQ(memory.peak_bytes(), 900);
}

TEST(DeviceMemoryTest, AllocationsAreAlignedAndZeroed) {
  DeviceMemory memory("node0/cpu:0", 0);
  auto pointer = memory.Allocate(100, "test");
  ASSERT_TRUE(pointer.ok());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(*pointer) % 64, 0u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(static_cast<char*>(*pointer)[i], 0);
  memory.Free(*pointer);
}

// The VmFlags line of the mapping of this process that holds `address` (/proc/self/smaps), or ""
// when none does.
std::string MappingFlags(const void* address) {
  const auto target = reinterpret_cast<uintptr_t>(address);
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    // A mapping's first line: "start-end perms offset dev inode [path]", addresses in hex.
    const std::vector<absl::string_view> fields = absl::StrSplit(line, ' ');
    const std::vector<absl::string_view> range = absl::StrSplit(fields[0], '-');
    uint64_t start = 0;
    uint64_t end = 0;
    if (range.size() == 2 && absl::SimpleHexAtoi(range[0], &start) &&
        absl::SimpleHexAtoi(range[1], &end)) {
      inside = start <= target && target < end;
      continue;
    }
    if (inside && absl::StartsWith(line, "VmFlags:")) return line;
  }
  return "";
}

TEST(HostBufferLayoutTest, HugePagesFromHalfAHugePageWithTailsRoundedUpFromHalfAHugePage) {
  constexpr int64_t kHuge = HostBufferLayout::kHugePageBytes;
  constexpr int64_t kMiB = int64_t{1} << 20;
  struct Case {
    int64_t bytes, alignment, footprint, huge;
  };
  for (const Case& expected : std::vector<Case>{
           {0, 64, 0, 0},
           {100, 64, 100, 0},
           {kMiB - 1, 64, kMiB - 1, 0},  // under half a huge page
           {kMiB, kHuge, kHuge, kHuge},  // at most twice its bytes
           {kMiB + kMiB / 2, kHuge, kHuge, kHuge},
           {kHuge, kHuge, kHuge, kHuge},
           {kHuge + 100, kHuge, kHuge + 100, kHuge},  // a small tail keeps small pages
           {2 * kHuge + kMiB - 64, kHuge, 2 * kHuge + kMiB - 64, 2 * kHuge},
           {2 * kHuge + kMiB, kHuge, 3 * kHuge, 3 * kHuge},  // a large tail is rounded up
       }) {
    SCOPED_TRACE(expected.bytes);
    const HostBufferLayout layout = LayOutHostBuffer(expected.bytes);
    EXPECT_EQ(layout.alignment, expected.alignment);
    EXPECT_EQ(layout.footprint_bytes, expected.footprint);
    EXPECT_EQ(layout.huge_page_bytes, expected.huge);
    EXPECT_LE(layout.footprint_bytes - expected.bytes, kMiB);
  }
}

TEST(HostMemoryResourceTest, LargeBuffersStartOnAHugePageAndAskForTransparentHugePages) {
  constexpr int64_t kHuge = HostBufferLayout::kHugePageBytes;
  HostMemoryResource resource;
  for (const int64_t bytes : {kHuge / 2, kHuge, kHuge * 2 + 100}) {
    SCOPED_TRACE(bytes);
    EXPECT_EQ(resource.Footprint(bytes), LayOutHostBuffer(bytes).footprint_bytes);
    absl::StatusOr<void*> pointer = resource.Allocate(bytes);
    ASSERT_TRUE(pointer.ok()) << pointer.status();
    EXPECT_EQ(reinterpret_cast<uintptr_t>(*pointer) % kHuge, 0u);
    const auto* bytes_of = static_cast<const unsigned char*>(*pointer);
    for (int64_t i = 0; i < bytes; i += 4093) ASSERT_EQ(bytes_of[i], 0) << i;
    EXPECT_EQ(bytes_of[bytes - 1], 0);
    // Where the kernel has transparent huge pages, the buffer's mapping carries the advice ("hg");
    // whether the pages are huge depends on the kernel's setting and its free memory.
    if (std::filesystem::exists("/sys/kernel/mm/transparent_hugepage/enabled")) {
      EXPECT_THAT(MappingFlags(*pointer), HasSubstr(" hg"));
    }
    resource.Free(*pointer, bytes);
  }
  // Smaller buffers keep the 64-byte alignment and no advice of their own.
  absl::StatusOr<void*> small = resource.Allocate(100);
  ASSERT_TRUE(small.ok()) << small.status();
  EXPECT_EQ(reinterpret_cast<uintptr_t>(*small) % 64, 0u);
  EXPECT_EQ(resource.Footprint(100), 100);
  resource.Free(*small, 100);
}

TEST(DeviceMemoryTest, ChargesTheHugePagesAHostBufferTakes) {
  constexpr int64_t kMiB = int64_t{1} << 20;
  DeviceMemory memory("node0/cpu:0", 5 * kMiB);
  auto first = memory.Allocate(kMiB, "register 'a' slot 0");  // takes a 2 MiB huge page
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(memory.used_bytes(), 2 * kMiB);
  auto second = memory.Allocate(kMiB + 1, "register 'a' slot 1");
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(memory.used_bytes(), 4 * kMiB);
  auto third = memory.Allocate(kMiB, "register 'b' slot 0");  // 1 MiB would fit, 2 MiB does not
  ASSERT_FALSE(third.ok());
  EXPECT_EQ(third.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(third.status().message(),
              HasSubstr("exceeded while allocating 2.0 MiB for register 'b' slot 0 "
                        "(1.0 MiB rounded up by the allocator; 4.0 MiB already in use"));
  EXPECT_THAT(third.status().message(), HasSubstr("register 'a' slot 0 (2.0 MiB)"));
  memory.Free(*first);
  memory.Free(*second);
  EXPECT_EQ(memory.used_bytes(), 0);
  EXPECT_EQ(memory.peak_bytes(), 4 * kMiB);
}

}  // namespace
}  // namespace loom
