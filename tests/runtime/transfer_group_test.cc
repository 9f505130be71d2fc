// TransferGroup: how a rank's wait for its transfers ends (completion, failure, interrupt,
// deadline), with the completions arriving on another thread while the waiter is parked or
// polling, and that no wait is left parked by a completion that should have ended it.
#include "runtime/transfer_group.h"

#include <chrono>
#include <future>
#include <memory>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace loom::testing {
namespace {

using Clock = TransferGroup::Clock;
using Direction = TransferGroup::Direction;
using Outcome = TransferGroup::Outcome;

// Never reached in a passing test. A wait that no completion woke would still see its
// transfers done when the deadline ends its sleep, and report kDone: the fixture's TearDown
// fails every test whose waits did not all end well before it.
constexpr auto kDeadline = std::chrono::seconds(10);
Clock::time_point Deadline() { return Clock::now() + kDeadline; }

// Gives a waiter started just before the time to park (not required for correctness: the tests
// hold whichever way the race goes, this only makes the parked path the common one).
void LetTheWaiterPark() { std::this_thread::sleep_for(std::chrono::milliseconds(20)); }

struct Group {
  std::shared_ptr<TransferGroup> group = std::make_shared<TransferGroup>();
  std::vector<Network::Completion> completions;

  explicit Group(int transfers) {
    for (int index = 0; index < transfers; ++index) {
      const int added =
          group->Add(/*peer=*/index, index % 2 == 0 ? Direction::kSend : Direction::kReceive);
      EXPECT_EQ(added, index);
      completions.push_back(group->Completion(added));
    }
  }
  void Complete(int index, absl::Status status = absl::OkStatus()) {
    completions[index](std::move(status));
  }
};

class TransferGroupTest : public ::testing::TestWithParam<absl::Duration> {
 protected:
  absl::Duration spin() const { return GetParam(); }

  void TearDown() override {
    EXPECT_LT(Clock::now() - start_, kDeadline / 2)
        << "a wait ended by its deadline, not by the completion, failure or interrupt that "
           "should have woken it";
  }

 private:
  const Clock::time_point start_ = Clock::now();
};

TEST_P(TransferGroupTest, WaitAllEndsWithTheLastCompletionNotBefore) {
  Group transfers(6);
  std::promise<void> last_may_complete;
  std::thread network([&] {
    LetTheWaiterPark();
    for (int index = 0; index < 5; ++index) transfers.Complete(index);
    last_may_complete.get_future().wait();
    transfers.Complete(5);
  });
  // Five of six completed: the wait is not over.
  LetTheWaiterPark();
  EXPECT_EQ(transfers.group->WaitAll(Clock::now() + std::chrono::milliseconds(100), spin()),
            Outcome::kTimedOut);
  EXPECT_EQ(transfers.group->PendingPeers(Direction::kReceive), std::vector<int>{5});
  last_may_complete.set_value();
  EXPECT_EQ(transfers.group->WaitAll(Deadline(), spin()), Outcome::kDone);
  network.join();
  EXPECT_TRUE(transfers.group->PendingPeers(Direction::kSend).empty());
}

TEST_P(TransferGroupTest, WaitForOneTransferIgnoresTheOthersAndEndsWithIt) {
  Group transfers(4);
  std::thread network([&] {
    LetTheWaiterPark();
    transfers.Complete(0);
    transfers.Complete(3);
    transfers.Complete(2);
  });
  EXPECT_EQ(transfers.group->Wait(2, Deadline(), spin()), Outcome::kDone);
  network.join();
  // Transfer 1 never completes: a wait for it, or for all, runs into its deadline.
  EXPECT_EQ(transfers.group->Wait(1, Clock::now() + std::chrono::milliseconds(50), spin()),
            Outcome::kTimedOut);
  EXPECT_EQ(transfers.group->WaitAll(Clock::now() + std::chrono::milliseconds(50), spin()),
            Outcome::kTimedOut);
  EXPECT_EQ(transfers.group->Wait(0, Deadline(), spin()), Outcome::kDone);
}

TEST_P(TransferGroupTest, AFailureOfAnotherTransferEndsTheWait) {
  Group transfers(3);
  std::thread network([&] {
    LetTheWaiterPark();
    transfers.Complete(0);
    transfers.Complete(1, absl::UnavailableError("peer 1 lost"));
  });
  EXPECT_EQ(transfers.group->Wait(2, Deadline(), spin()), Outcome::kFailed);
  network.join();
  EXPECT_EQ(transfers.group->failed_transfer(), 1);
  EXPECT_EQ(transfers.group->error(), absl::UnavailableError("peer 1 lost"));
  // Every later wait ends the same way at once, even for a transfer that completed.
  EXPECT_EQ(transfers.group->Wait(0, Deadline(), spin()), Outcome::kFailed);
  EXPECT_EQ(transfers.group->WaitAll(Deadline(), spin()), Outcome::kFailed);
  transfers.Complete(2);  // late completions are still accepted
}

TEST_P(TransferGroupTest, InterruptEndsAParkedWaitAndEveryLaterOne) {
  Group transfers(2);
  std::thread aborter([&] {
    LetTheWaiterPark();
    transfers.group->Interrupt(absl::AbortedError("job cancelled"));
    transfers.group->Interrupt(absl::InternalError("a second reason is ignored"));
  });
  EXPECT_EQ(transfers.group->WaitAll(Deadline(), spin()), Outcome::kInterrupted);
  aborter.join();
  EXPECT_EQ(transfers.group->interrupt_reason(), absl::AbortedError("job cancelled"));
  EXPECT_EQ(transfers.group->Wait(1, Deadline(), spin()), Outcome::kInterrupted);
  transfers.Complete(0);
  transfers.Complete(1);
}

TEST_P(TransferGroupTest, TransfersThatCouldNotBePostedFailTheGroup) {
  Group transfers(2);
  transfers.Complete(0);
  transfers.group->Fail(1, absl::InvalidArgumentError("buffer too small"));
  EXPECT_EQ(transfers.group->WaitAll(Deadline(), spin()), Outcome::kFailed);
  EXPECT_EQ(transfers.group->failed_transfer(), 1);
}

TEST_P(TransferGroupTest, ManyCollectivesOfCompletionsRacingTheWaiter) {
  // The pattern of a rank running collectives back to back: a new group per collective, its
  // transfers completed by another thread in any order while the rank waits for one, then all.
  for (int collective = 0; collective < 200; ++collective) {
    Group transfers(6);
    std::thread network([&] {
      for (int index : {3, 1, 5, 0, 4, 2}) transfers.Complete(index);
    });
    EXPECT_EQ(transfers.group->Wait(4, Deadline(), spin()), Outcome::kDone) << collective;
    EXPECT_EQ(transfers.group->WaitAll(Deadline(), spin()), Outcome::kDone) << collective;
    network.join();
  }
}

INSTANTIATE_TEST_SUITE_P(ParkAtOnceOrPollFirst, TransferGroupTest,
                         ::testing::Values(absl::ZeroDuration(), absl::Microseconds(200)),
                         [](const ::testing::TestParamInfo<absl::Duration>& info) {
                           return info.param == absl::ZeroDuration() ? "ParkAtOnce" : "PollFirst";
                         });

}  // namespace
}  // namespace loom::testing
