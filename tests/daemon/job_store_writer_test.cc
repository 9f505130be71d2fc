// The coordinator's store writes (daemon/job_store_writer.h): made in order on a thread of their
// own, never waited for by whoever queues them, all made before the writer is gone.
#include "daemon/job_store_writer.h"

#include <atomic>
#include <chrono>
#include <filesystem>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_directory.h"

namespace loom::daemon {
namespace {

using ::testing::ElementsAre;

class JobStoreWriterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    directory_ = loom::testing::FreshTestDirectory("job-store-writer");
    absl::StatusOr<JobStore> store = JobStore::Open(directory_);
    ASSERT_TRUE(store.ok()) << store.status();
    store_.emplace(*std::move(store));
  }
  void TearDown() override { std::filesystem::remove_all(directory_); }

  std::string directory_;
  std::optional<JobStore> store_;
};

TEST_F(JobStoreWriterTest, WritesAreMadeInTheirOrderOffTheCallersThread) {
  JobStoreWriter writer(&*store_);
  std::mutex mutex;
  std::vector<int> order;
  std::vector<std::thread::id> threads;
  uint64_t last = 0;
  for (int i = 1; i <= 3; ++i) {
    last = writer.Enqueue(absl::StrCat("write ", i), [&, i](const JobStore&) {
      std::lock_guard<std::mutex> lock(mutex);
      order.push_back(i);
      threads.push_back(std::this_thread::get_id());
      return absl::OkStatus();
    });
  }
  writer.WaitFor(last);
  std::lock_guard<std::mutex> lock(mutex);
  EXPECT_THAT(order, ElementsAre(1, 2, 3));
  for (std::thread::id thread : threads) EXPECT_NE(thread, std::this_thread::get_id());
}

// What the JobManager relies on to queue writes under its mutex: a slow disk (here, a write that
// waits for the test) holds up no Enqueue.
TEST_F(JobStoreWriterTest, QueueingNeverWaitsForASlowWrite) {
  JobStoreWriter writer(&*store_);
  absl::Notification release;
  writer.Enqueue("a slow write", [&](const JobStore&) {
    release.WaitForNotification();
    return absl::OkStatus();
  });
  std::atomic<bool> second_made{false};
  std::future<uint64_t> queued = std::async(std::launch::async, [&] {
    return writer.Enqueue("the next write", [&](const JobStore&) {
      second_made = true;
      return absl::OkStatus();
    });
  });
  ASSERT_EQ(queued.wait_for(std::chrono::seconds(10)), std::future_status::ready)
      << "Enqueue waited for the write before it";
  EXPECT_FALSE(second_made.load());
  release.Notify();
  writer.WaitFor(queued.get());
  EXPECT_TRUE(second_made.load());
}

TEST_F(JobStoreWriterTest, AFailedWriteDoesNotStopTheNextOnes) {
  JobStoreWriter writer(&*store_);
  writer.Enqueue("a failing write",
                 [](const JobStore&) { return absl::InternalError("the disk is full"); });
  StoredJob job;
  job.set_number(7);
  job.mutable_info()->set_job_id("job-7");
  writer.WaitFor(writer.Enqueue("job-7", [job](const JobStore& store) { return store.Save(job); }));
  JobStore::Contents contents = store_->Load();
  ASSERT_EQ(contents.jobs.size(), 1u);
  EXPECT_EQ(contents.jobs[0].info().job_id(), "job-7");
}

TEST_F(JobStoreWriterTest, EveryQueuedWriteIsMadeBeforeTheWriterIsGone) {
  std::atomic<int> made{0};
  {
    JobStoreWriter writer(&*store_);
    absl::Notification release;
    writer.Enqueue("a slow write", [&](const JobStore&) {
      release.WaitForNotification();
      return absl::OkStatus();
    });
    for (int i = 0; i < 50; ++i) {
      writer.Enqueue(absl::StrCat("write ", i), [&](const JobStore&) {
        made.fetch_add(1);
        return absl::OkStatus();
      });
    }
    EXPECT_LT(made.load(), 50);
    release.Notify();
  }
  EXPECT_EQ(made.load(), 50);
}

}  // namespace
}  // namespace loom::daemon
