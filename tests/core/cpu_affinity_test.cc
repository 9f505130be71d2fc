#include "core/cpu_affinity.h"

#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(AllowedCpusTest, ListsThisProcesssCpus) {
  absl::StatusOr<std::vector<int>> cpus = AllowedCpus(0);
  ASSERT_TRUE(cpus.ok()) << cpus.status();
  EXPECT_FALSE(cpus->empty());
  EXPECT_TRUE(std::is_sorted(cpus->begin(), cpus->end()));
  EXPECT_EQ(std::adjacent_find(cpus->begin(), cpus->end()), cpus->end());
  EXPECT_EQ(static_cast<int>(cpus->size()), [] {
    cpu_set_t set;
    CPU_ZERO(&set);
    return sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : -1;
  }());
}

// What a Transport reads of its same-host peers: another process's binding.
TEST(AllowedCpusTest, ReadsAnotherProcesssCpus) {
  absl::StatusOr<std::vector<int>> mine = AllowedCpus(0);
  ASSERT_TRUE(mine.ok()) << mine.status();
  const int last = mine->back();
  int bound[2];
  int release[2];
  ASSERT_EQ(pipe(bound), 0);
  ASSERT_EQ(pipe(release), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Binds itself to this process's last CPU, says so, and waits to be let go (the end of the
    // parent's release pipe closing).
    close(release[1]);
    const char ok = BindToCpu(last).ok() ? 1 : 0;
    char done;
    _exit(write(bound[1], &ok, 1) == 1 && read(release[0], &done, 1) >= 0 && ok ? 0 : 1);
  }
  char ok = 0;
  ASSERT_EQ(read(bound[0], &ok, 1), 1);
  ASSERT_EQ(ok, 1) << "the child could not bind itself to CPU " << last;
  absl::StatusOr<std::vector<int>> theirs = AllowedCpus(child);
  close(release[1]);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(theirs.ok()) << theirs.status();
  EXPECT_THAT(*theirs, ElementsAre(last));

  // Reaped: the process is gone.
  absl::StatusOr<std::vector<int>> gone = AllowedCpus(child);
  EXPECT_EQ(gone.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(gone.status().message(), HasSubstr(absl::StrCat("process ", child)));
  for (int descriptor : {bound[0], bound[1], release[0]}) close(descriptor);
}

TEST(BindToCpuTest, ANegativeCpuLeavesTheBindingAlone) {
  absl::StatusOr<std::vector<int>> before = AllowedCpus(0);
  ASSERT_TRUE(before.ok()) << before.status();
  EXPECT_TRUE(BindToCpu(-1).ok());
  EXPECT_EQ(AllowedCpus(0).value(), *before);
}

TEST(BindToCpuTest, ACpuThisProcessMayNotUseIsRefusedNamingIt) {
  // The last CPU of the widest set the kernel takes: no machine this runs on has it.
  const absl::Status status = BindToCpu(CPU_SETSIZE - 1);
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal) << status;
  EXPECT_THAT(status.message(), HasSubstr(absl::StrCat("CPU ", CPU_SETSIZE - 1)));
}

}  // namespace
}  // namespace loom
