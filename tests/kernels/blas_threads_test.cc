#include "kernels/cpu/blas_threads.h"

#include <dirent.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gtest/gtest.h"

namespace loom {
namespace {

// The threads of the calling process.
int CountThreads() {
  DIR* directory = opendir("/proc/self/task");
  if (directory == nullptr) return -1;
  int threads = 0;
  while (const dirent* entry = readdir(directory)) {
    if (entry->d_name[0] != '.') ++threads;
  }
  closedir(directory);
  return threads;
}

TEST(BlasThreadsTest, SetsTheCount) {
  const int threads = BlasThreads();
  SetBlasThreads(0);
  EXPECT_EQ(BlasThreads(), 1);
  SetBlasThreads(threads);
  EXPECT_EQ(BlasThreads(), threads);
}

// A forked node process (the benchmarks' and tests' nodes) sets the count its parent already
// set: OpenBLAS must not rebuild its thread pool for that, whose workers would spin beside the
// node's threads.
TEST(BlasThreadsTest, AForkedChildKeepingTheCountStartsNoThread) {
  const int threads = BlasThreads();
  SetBlasThreads(1);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Counted before and after: a sanitizer's runtime may start a thread of its own in the child.
    const int before = CountThreads();
    SetBlasThreads(1);
    _exit(before > 0 && CountThreads() == before ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  SetBlasThreads(threads);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "SetBlasThreads started threads in the child";
}

}  // namespace
}  // namespace loom
