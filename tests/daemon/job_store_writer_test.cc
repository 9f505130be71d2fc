// The coordinator's store writes (daemon/job_store_writer.h): made in order on a thread of their
// own, never waited for by whoever queues them, all made before the writer is gone, their
// failures told to whoever waits for them. And the store's writes on a full disk: a clear error,
// no temporary file left (nor one a crash left, once the store is opened again).
#include "daemon/job_store_writer.h"

#include <sys/resource.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
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
using ::testing::HasSubstr;

// The names of the files in `directory`.
std::vector<std::string> FilesIn(const std::string& directory) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(directory)) {
    names.push_back(entry.path().filename().string());
  }
  return names;
}

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

TEST_F(JobStoreWriterTest, WaitForWritesReturnsTheFirstFailureAmongItsTickets) {
  JobStoreWriter writer(&*store_);
  const uint64_t first =
      writer.Enqueue("write 1", [](const JobStore&) { return absl::OkStatus(); });
  const uint64_t second = writer.Enqueue(
      "the plan of job job-2", [](const JobStore&) { return absl::UnavailableError("disk gone"); });
  const uint64_t third =
      writer.Enqueue("write 3", [](const JobStore&) { return absl::OkStatus(); });
  EXPECT_TRUE(writer.WaitForWrites(first, first).ok());
  absl::Status failed = writer.WaitForWrites(first, third);
  EXPECT_EQ(failed.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(failed.message(), HasSubstr("the plan of job job-2 is not kept on disk: disk gone"));
  EXPECT_FALSE(writer.WaitForWrites(second, second).ok());
  EXPECT_TRUE(writer.WaitForWrites(third, third).ok());
}

TEST_F(JobStoreWriterTest, AWriteOnAFullDiskIsResourceExhaustedAndLeavesNoFile) {
  rlimit saved{};
  getrlimit(RLIMIT_FSIZE, &saved);
  void (*previous)(int) = std::signal(SIGXFSZ, SIG_IGN);
  rlimit limit = saved;
  limit.rlim_cur = 16;  // writes past 16 bytes fail with EFBIG
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &limit), 0) << std::strerror(errno);
  const absl::Status status = store_->SavePlan(3, std::string(1000, 'p'));
  const absl::Status small = store_->SaveLastNumber(3);
  setrlimit(RLIMIT_FSIZE, &saved);
  std::signal(SIGXFSZ, previous);

  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted) << status;
  EXPECT_THAT(status.message(), HasSubstr(store_->jobs_directory()));
  EXPECT_THAT(status.message(), HasSubstr("job-3.plan.binpb"));
  EXPECT_THAT(status.message(), HasSubstr(std::strerror(EFBIG)));
  EXPECT_THAT(status.message(), ::testing::Not(HasSubstr("ppp")));
  EXPECT_TRUE(small.ok()) << small;
  EXPECT_THAT(FilesIn(store_->jobs_directory()), ElementsAre("last-number"));
  EXPECT_EQ(store_->Load().last_number, 3);
}

TEST_F(JobStoreWriterTest, TemporaryFilesACrashLeftAreRemovedWhenTheStoreOpens) {
  const std::string jobs = store_->jobs_directory();
  std::ofstream(jobs + "/job-4.binpb.tmp-a1B2c3") << "half a record";
  std::ofstream(jobs + "/last-number.tmp") << "4";
  ASSERT_TRUE(store_->SaveLastNumber(4).ok());
  absl::StatusOr<JobStore> reopened = JobStore::Open(directory_);
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  EXPECT_THAT(FilesIn(jobs), ElementsAre("last-number"));
  EXPECT_EQ(reopened->Load().last_number, 4);
}

}  // namespace
}  // namespace loom::daemon
