#include "compiler/parallel_for.h"

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom::compiler {
namespace {

TEST(ParallelForTest, CallsTheBodyOnceForEveryIndexWhateverTheThreads) {
  for (int count : {0, 1, 2, 7, 100}) {
    for (int threads : {0, 1, 2, 3, 16}) {
      std::vector<std::atomic<int>> calls(count);
      ParallelFor(count, threads, [&](int i) { calls[i].fetch_add(1); });
      for (int i = 0; i < count; ++i) {
        EXPECT_EQ(calls[i].load(), 1)
            << "index " << i << " of " << count << ", " << threads << " threads";
      }
    }
  }
}

TEST(ParallelForTest, OneThreadRunsOnTheCallersThreadInOrder) {
  const std::thread::id caller = std::this_thread::get_id();
  std::vector<int> order;
  ParallelFor(5, 1, [&](int i) {
    EXPECT_EQ(std::this_thread::get_id(), caller);
    order.push_back(i);
  });
  EXPECT_THAT(order, ::testing::ElementsAre(0, 1, 2, 3, 4));
}

TEST(ParallelForTest, SeveralThreadsShareTheWork) {
  // Each call waits (up to 10 s) until both have entered: one thread alone would take the calls
  // one after the other and wait the whole time.
  std::mutex mutex;
  std::set<std::thread::id> threads;
  std::atomic<int> entered{0};
  ParallelFor(2, 2, [&](int) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      threads.insert(std::this_thread::get_id());
    }
    entered.fetch_add(1);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (entered.load() < 2 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::yield();
    }
  });
  EXPECT_EQ(threads.size(), 2u);
}

TEST(ParallelForTest, DefaultCompileThreadsIsAtLeastOne) { EXPECT_GE(DefaultCompileThreads(), 1); }

}  // namespace
}  // namespace loom::compiler
