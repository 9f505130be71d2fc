// ReadHostMemory over directories that mimic /proc and /sys/fs/cgroup, and on this machine.
#include "device/host_memory.h"

#include <filesystem>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_directory.h"

namespace loom {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kGiB = int64_t{1} << 30;

class FakeRootTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = loom::testing::FreshTestDirectory("host-memory");
    Write("proc/meminfo", "MemTotal:       16777216 kB\nMemFree:         1000 kB\n");  // 16 GiB
  }

  void Write(const std::string& path, const std::string& contents) {
    const std::filesystem::path file = root_ / path;
    std::filesystem::create_directories(file.parent_path());
    std::ofstream(file) << contents;
  }

  absl::StatusOr<HostMemory> Read() { return ReadHostMemory(root_.string()); }

  std::filesystem::path root_;
};

TEST_F(FakeRootTest, WithoutACgroupLimitItIsMemTotal) {
  Write("proc/self/cgroup", "0::/user.slice/session-1.scope\n");
  Write("sys/fs/cgroup/user.slice/session-1.scope/memory.max", "max\n");
  absl::StatusOr<HostMemory> memory = Read();
  ASSERT_TRUE(memory.ok()) << memory.status();
  EXPECT_EQ(memory->bytes, 16 * kGiB);
  EXPECT_EQ(memory->source, "MemTotal of /proc/meminfo");
}

TEST_F(FakeRootTest, TheLowestLimitOfTheCgroupAndItsAncestorsCountsInVersion2) {
  Write("proc/self/cgroup", "0::/system.slice/loomd.service\n");
  Write("sys/fs/cgroup/system.slice/loomd.service/memory.max", "max\n");
  Write("sys/fs/cgroup/system.slice/memory.max", "8589934592\n");  // 8 GiB
  Write("sys/fs/cgroup/memory.max", "12884901888\n");              // 12 GiB
  absl::StatusOr<HostMemory> memory = Read();
  ASSERT_TRUE(memory.ok()) << memory.status();
  EXPECT_EQ(memory->bytes, 8 * kGiB);
  EXPECT_EQ(memory->source, "/sys/fs/cgroup/system.slice/memory.max");
}

TEST_F(FakeRootTest, AVersion1MemoryControllerLimitCounts) {
  Write("proc/self/cgroup", "5:cpu,cpuacct:/docker/abc\n4:memory:/docker/abc\n0::/\n");
  Write("sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes", "2147483648\n");  // 2 GiB
  Write("sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n");    // none
  absl::StatusOr<HostMemory> memory = Read();
  ASSERT_TRUE(memory.ok()) << memory.status();
  EXPECT_EQ(memory->bytes, 2 * kGiB);
  EXPECT_EQ(memory->source, "/sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes");
}

TEST_F(FakeRootTest, ALimitAboveTheHostsMemoryAndUnreadableFilesAreIgnored) {
  Write("proc/self/cgroup", "0::/a\n");
  Write("sys/fs/cgroup/a/memory.max", "68719476736\n");  // 64 GiB
  Write("sys/fs/cgroup/memory.max", "garbage\n");
  absl::StatusOr<HostMemory> memory = Read();
  ASSERT_TRUE(memory.ok()) << memory.status();
  EXPECT_EQ(memory->bytes, 16 * kGiB);
}

TEST_F(FakeRootTest, NoMeminfoIsAnErrorNamingTheFile) {
  std::filesystem::remove(root_ / "proc/meminfo");
  absl::StatusOr<HostMemory> memory = Read();
  ASSERT_FALSE(memory.ok());
  EXPECT_THAT(memory.status().message(), HasSubstr("proc/meminfo"));

  Write("proc/meminfo", "MemFree: 12 kB\n");
  memory = Read();
  ASSERT_FALSE(memory.ok());
  EXPECT_THAT(memory.status().message(), HasSubstr("MemTotal"));
}

TEST(HostMemoryTest, ThisMachineHasSome) {
  absl::StatusOr<HostMemory> memory = ReadHostMemory();
  ASSERT_TRUE(memory.ok()) << memory.status();
  EXPECT_GT(memory->bytes, 64 << 20);
  EXPECT_FALSE(memory->source.empty());
}

TEST(HostMemoryTest, TheDefaultBudgetSplitsThreeQuartersOverTheDevices) {
  EXPECT_EQ(DefaultCpuMemoryBudget(16 * kGiB, 1), 12 * kGiB);
  EXPECT_EQ(DefaultCpuMemoryBudget(16 * kGiB, 4), 3 * kGiB);
  EXPECT_EQ(DefaultCpuMemoryBudget(16 * kGiB, 0), 12 * kGiB);
  EXPECT_EQ(DefaultCpuMemoryBudget(2, 4), 1);
}

}  // namespace
}  // namespace loom
