// Two Transports in one process, connected over TCP loopback: threads that drive the worker
// themselves (DriveUntil, WakeDriver) and the operations queued kDeferred for them, on both data
// paths.
#include <algorithm>
#include <atomic>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/transport/transport_test_fixture.h"
#include "tests/transport/transport_test_util.h"
#include "transport/transport.h"

namespace loom::transport {
namespace {

using ::loom::transport::testing::Completion;
using ::loom::transport::testing::DataPathName;
using ::loom::transport::testing::kDeadline;
using ::loom::transport::testing::PatternByte;
using ::loom::transport::testing::TransportTest;

// Transfers queued kDeferred by both ends and driven by both callers: each drive ends with its
// transfer done and the bytes intact.
TEST_P(TransportTest, DriveUntilRunsDeferredTransfers) {
  Connect(2);
  constexpr size_t kSize = 1 << 20;
  std::vector<unsigned char> source(kSize);
  std::vector<unsigned char> destination(kSize);
  for (int round = 0; round < 3; ++round) {
    for (size_t i = 0; i < kSize; ++i) source[i] = PatternByte(i, round);
    std::fill(destination.begin(), destination.end(), 0);
    std::atomic<bool> sent{false};
    std::atomic<bool> received{false};
    absl::Status send_status;
    absl::StatusOr<size_t> receive_result;
    const DataTag tag = 500 + round;
    ASSERT_TRUE(transports_[1]
                    ->ReceiveData(
                        tag, destination.data(), kSize,
                        [&](absl::StatusOr<size_t> bytes) {
                          receive_result = std::move(bytes);
                          received.store(true);
                        },
                        Transport::Queueing::kDeferred)
                    .ok());
    ASSERT_TRUE(transports_[0]
                    ->SendData(
                        1, tag, source.data(), kSize,
                        [&](absl::Status status) {
                          send_status = std::move(status);
                          sent.store(true);
                        },
                        Transport::Queueing::kDeferred)
                    .ok());
    bool send_driven = false;
    std::thread sender([&] {
      send_driven =
          transports_[0]->DriveUntil([&] { return sent.load(); }, absl::Now() + kDeadline);
    });
    const bool receive_driven =
        transports_[1]->DriveUntil([&] { return received.load(); }, absl::Now() + kDeadline);
    sender.join();
    ASSERT_TRUE(send_driven && receive_driven) << "round " << round << " did not complete";
    EXPECT_TRUE(send_status.ok()) << send_status;
    ASSERT_TRUE(receive_result.ok()) << receive_result.status();
    EXPECT_EQ(*receive_result, kSize);
    EXPECT_EQ(source, destination) << "round " << round;
  }
  EXPECT_TRUE(inboxes_[0]->errors().empty());
  EXPECT_TRUE(inboxes_[1]->errors().empty());
}

// While a thread drives, it holds the worker: the callbacks of transfers that start then run on
// it, not on the progress thread. (`done` is called only by a driver holding the worker, so its
// first call shows that the drive is on.)
TEST_P(TransportTest, CallbacksRunOnTheDrivingThread) {
  Connect(2);
  constexpr size_t kSize = 256 * 1024;
  std::vector<unsigned char> source(kSize);
  for (size_t i = 0; i < kSize; ++i) source[i] = PatternByte(i, 3);
  std::vector<unsigned char> destination(kSize);
  std::atomic<bool> sent{false};
  std::atomic<bool> received{false};
  std::atomic<bool> sender_driving{false};
  std::atomic<bool> receiver_driving{false};
  std::thread::id send_thread;
  std::thread::id receive_thread;
  std::thread::id sender_id;
  std::thread::id receiver_id;
  bool send_driven = false;
  bool receive_driven = false;
  std::thread sender([&] {
    sender_id = std::this_thread::get_id();
    send_driven = transports_[0]->DriveUntil(
        [&] {
          sender_driving.store(true);
          return sent.load();
        },
        absl::Now() + kDeadline);
  });
  std::thread receiver([&] {
    receiver_id = std::this_thread::get_id();
    receive_driven = transports_[1]->DriveUntil(
        [&] {
          receiver_driving.store(true);
          return received.load();
        },
        absl::Now() + kDeadline);
  });
  const absl::Time end = absl::Now() + kDeadline;
  while (!(sender_driving.load() && receiver_driving.load()) && absl::Now() < end) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  ASSERT_TRUE(sender_driving.load() && receiver_driving.load());
  // Queued with a wake-up, which reaches a driver sleeping on the worker's events.
  ASSERT_TRUE(transports_[1]
                  ->ReceiveData(7, destination.data(), kSize,
                                [&](absl::StatusOr<size_t> bytes) {
                                  receive_thread = std::this_thread::get_id();
                                  received.store(bytes.ok() && *bytes == kSize);
                                })
                  .ok());
  ASSERT_TRUE(transports_[0]
                  ->SendData(1, 7, source.data(), kSize,
                             [&](absl::Status status) {
                               send_thread = std::this_thread::get_id();
                               sent.store(status.ok());
                             })
                  .ok());
  sender.join();
  receiver.join();
  ASSERT_TRUE(send_driven && receive_driven);
  EXPECT_EQ(send_thread, sender_id);
  EXPECT_EQ(receive_thread, receiver_id);
  EXPECT_EQ(source, destination);
}

// A thread that asks to drive while another drives takes over at once; the first one's wait goes
// on as a plain wait, and its transfer still completes. (A driver that kept the token until its
// own transfer came could hold back a thread whose transfers are done and whose next step that
// transfer needs.)
TEST_P(TransportTest, ASecondDriverTakesOverAndTheFirstTransferStillCompletes) {
  Connect(2);
  std::vector<char> first_buffer(64 * 1024);
  std::vector<char> second_buffer(64 * 1024);
  std::atomic<bool> first_done{false};
  std::atomic<bool> second_done{false};
  Completion<absl::StatusOr<size_t>> first_received;
  ASSERT_TRUE(transports_[1]
                  ->ReceiveData(
                      1, first_buffer.data(), first_buffer.size(),
                      [&](absl::StatusOr<size_t> bytes) {
                        first_done.store(true);
                        first_received.Set(bytes);
                      },
                      Transport::Queueing::kDeferred)
                  .ok());
  ASSERT_TRUE(transports_[1]
                  ->ReceiveData(
                      2, second_buffer.data(), second_buffer.size(),
                      [&](absl::StatusOr<size_t> bytes) { second_done.store(true); },
                      Transport::Queueing::kDeferred)
                  .ok());
  std::atomic<bool> first_returned{false};
  bool first_driven = true;
  std::thread first([&] {
    first_driven =
        transports_[1]->DriveUntil([&] { return first_done.load(); }, absl::Now() + kDeadline);
    first_returned.store(true);
  });
  absl::SleepFor(absl::Milliseconds(50));  // the first thread drives, waiting for tag 1
  EXPECT_FALSE(first_returned.load());
  std::vector<char> source(second_buffer.size(), '2');
  Completion<absl::Status> second_sent;
  ASSERT_TRUE(transports_[0]
                  ->SendData(1, 2, source.data(), source.size(),
                             [&](absl::Status status) { second_sent.Set(status); })
                  .ok());
  const absl::Time start = absl::Now();
  EXPECT_TRUE(
      transports_[1]->DriveUntil([&] { return second_done.load(); }, absl::Now() + kDeadline));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_EQ(second_buffer, source);
  first.join();  // it gave the token up when this thread asked for it
  EXPECT_FALSE(first_driven);
  EXPECT_FALSE(first_done.load());
  // Nobody drives now: the progress thread completes the first transfer.
  Completion<absl::Status> first_sent;
  ASSERT_TRUE(transports_[0]
                  ->SendData(1, 1, source.data(), source.size(),
                             [&](absl::Status status) { first_sent.Set(status); })
                  .ok());
  std::optional<absl::StatusOr<size_t>> result = first_received.Wait(kDeadline);
  ASSERT_TRUE(result.has_value()) << "the first transfer did not complete";
  ASSERT_TRUE(result->ok()) << result->status();
  EXPECT_EQ(first_buffer, source);
  for (Completion<absl::Status>* sent : {&first_sent, &second_sent}) {
    std::optional<absl::Status> status = sent->Wait(kDeadline);
    ASSERT_TRUE(status.has_value());
    EXPECT_TRUE(status->ok()) << *status;
  }
}

// Operations queued kDeferred whose caller never drives still start: the sleeping progress thread
// looks at its queue at least every park timeout.
TEST_P(TransportTest, DeferredOperationsStartWithoutADriver) {
  Connect(2);
  std::vector<char> source(64 * 1024, 's');
  std::vector<char> destination(source.size());
  Completion<absl::StatusOr<size_t>> received;
  Completion<absl::Status> sent;
  ASSERT_TRUE(transports_[1]
                  ->ReceiveData(
                      7, destination.data(), destination.size(),
                      [&](absl::StatusOr<size_t> bytes) { received.Set(bytes); },
                      Transport::Queueing::kDeferred)
                  .ok());
  ASSERT_TRUE(transports_[0]
                  ->SendData(
                      1, 7, source.data(), source.size(),
                      [&](absl::Status status) { sent.Set(status); },
                      Transport::Queueing::kDeferred)
                  .ok());
  std::optional<absl::Status> send_result = sent.Wait(kDeadline);
  ASSERT_TRUE(send_result.has_value()) << "the deferred send never started";
  EXPECT_TRUE(send_result->ok()) << *send_result;
  std::optional<absl::StatusOr<size_t>> receive_result = received.Wait(kDeadline);
  ASSERT_TRUE(receive_result.has_value()) << "the deferred receive never started";
  ASSERT_TRUE(receive_result->ok()) << receive_result->status();
  EXPECT_EQ(source, destination);
}

// A drive whose condition never holds ends at its deadline, and one in progress ends when the
// transport stops; what it waited for is then cancelled, as for any pending operation.
TEST_P(TransportTest, DriveUntilEndsAtItsDeadlineAndAtStop) {
  Connect(2);
  absl::Time start = absl::Now();
  EXPECT_FALSE(transports_[1]->DriveUntil([] { return false; }, start + absl::Milliseconds(100)));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(100));
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));

  std::vector<char> buffer(64);
  Completion<absl::StatusOr<size_t>> received;
  ASSERT_TRUE(transports_[1]
                  ->ReceiveData(
                      8, buffer.data(), buffer.size(),
                      [&](absl::StatusOr<size_t> bytes) { received.Set(bytes); },
                      Transport::Queueing::kDeferred)
                  .ok());
  std::atomic<bool> drive_returned{false};
  bool driven = true;
  std::thread driver([&] {
    driven = transports_[1]->DriveUntil([] { return false; }, absl::Now() + absl::Seconds(30));
    drive_returned.store(true);
  });
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_FALSE(drive_returned.load());
  start = absl::Now();
  transports_[1]->Stop();
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  driver.join();
  EXPECT_FALSE(driven);
  std::optional<absl::StatusOr<size_t>> result = received.Wait(absl::Seconds(1));
  ASSERT_TRUE(result.has_value()) << "the receive was not reported";
  EXPECT_EQ(result->status().code(), absl::StatusCode::kCancelled) << result->status();
  EXPECT_FALSE(transports_[1]->DriveUntil([] { return true; }, absl::Now() + absl::Seconds(1)));
}

// A deferred transfer's same-host messages wake only a driving thread of the receiver, not its
// idle progress thread (Mailbox::Reader). A receiver whose drive ended before its transfer was over
// (here its deadline) waits without driving: its progress thread then stands in, so the transfer
// completes at once rather than after the progress thread's park timeout.
TEST_P(TransportTest, ADeferredTransferCompletesAfterItsReceiversDriveEndedEarly) {
  park_timeout_ = absl::Seconds(30);
  Connect(2);
  DataTag tag = 40;
  for (size_t size : {size_t{16}, size_t{64} * 1024}) {  // inline, and announced
    SCOPED_TRACE(absl::StrCat(size, " bytes"));
    std::vector<char> source(size, 'd');
    std::vector<char> destination(size);
    Completion<absl::StatusOr<size_t>> received;
    ASSERT_TRUE(transports_[1]
                    ->ReceiveData(
                        ++tag, destination.data(), destination.size(),
                        [&](absl::StatusOr<size_t> bytes) { received.Set(bytes); },
                        Transport::Queueing::kDeferred)
                    .ok());
    EXPECT_FALSE(
        transports_[1]->DriveUntil([] { return false; }, absl::Now() + absl::Milliseconds(50)));
    absl::SleepFor(absl::Milliseconds(50));  // the receiver's progress thread is asleep again
    std::atomic<bool> sent{false};
    ASSERT_TRUE(transports_[0]
                    ->SendData(
                        1, tag, source.data(), source.size(),
                        [&](absl::Status status) {
                          EXPECT_TRUE(status.ok()) << status;
                          sent.store(true);
                        },
                        Transport::Queueing::kDeferred)
                    .ok());
    const absl::Time start = absl::Now();
    EXPECT_TRUE(transports_[0]->DriveUntil([&] { return sent.load(); }, start + absl::Seconds(20)));
    std::optional<absl::StatusOr<size_t>> result = received.Wait(absl::Seconds(20));
    ASSERT_TRUE(result.has_value()) << "the receive never completed";
    EXPECT_LT(absl::Now() - start, absl::Seconds(10)) << "it waited for the park timeout (30 s)";
    ASSERT_TRUE(result->ok()) << result->status();
    EXPECT_EQ(source, destination);
  }
}

// A thread that asks to drive while another driver sleeps on the worker's events (two ranks of
// one collective on a node, the first waiting for a peer) takes over at once, not at the
// sleeper's park timeout: its ask wakes the sleeper, which sees it waiting and lets go.
TEST_P(TransportTest, ASecondDriverTakesOverFromASleepingOneAtOnce) {
  park_timeout_ = absl::Seconds(30);
  Connect(2);
  std::atomic<bool> stop_first{false};
  std::atomic<bool> first_returned{false};
  std::thread first([&] {
    transports_[1]->DriveUntil([&] { return stop_first.load(); }, absl::Now() + absl::Seconds(60));
    first_returned.store(true);
  });
  absl::SleepFor(absl::Milliseconds(100));  // the first driver has nothing to do: it sleeps
  const absl::Time start = absl::Now();
  EXPECT_TRUE(transports_[1]->DriveUntil([] { return true; }, absl::Now() + absl::Seconds(60)));
  EXPECT_LT(absl::Now() - start, absl::Seconds(10)) << "it waited for the park timeout (30 s)";
  first.join();  // it gave the token up when this thread asked for it
  EXPECT_TRUE(first_returned.load());
  stop_first.store(true);
}

TEST_P(TransportTest, WakeDriverMakesASleepingDriverLookAgain) {
  // A driver with nothing to do sleeps on the worker's events up to the park timeout; a condition
  // another thread makes true (an abort) is seen at once after WakeDriver, not at that timeout.
  park_timeout_ = absl::Seconds(30);
  Connect(2);
  std::atomic<bool> aborted{false};
  std::atomic<bool> drive_returned{false};
  bool driven = false;
  std::thread driver([&] {
    driven =
        transports_[1]->DriveUntil([&] { return aborted.load(); }, absl::Now() + absl::Seconds(60));
    drive_returned.store(true);
  });
  absl::SleepFor(absl::Milliseconds(100));  // long enough to be asleep in poll
  EXPECT_FALSE(drive_returned.load());
  const absl::Time start = absl::Now();
  aborted.store(true);
  transports_[1]->WakeDriver();
  driver.join();
  EXPECT_TRUE(driven);
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));  // the park timeout is 30 s
}

INSTANTIATE_TEST_SUITE_P(DataPaths, TransportTest, ::testing::Bool(), DataPathName);

}  // namespace
}  // namespace loom::transport
