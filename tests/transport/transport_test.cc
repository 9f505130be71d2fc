// Two or three Transports in one process, connected over TCP loopback: messages, data transfers
// on both data paths, errors and Stop. (Threads that drive the worker: transport_drive_test.cc.)
#include "transport/transport.h"

#include <cstring>
#include <future>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/transport/transport_test_fixture.h"
#include "tests/transport/transport_test_util.h"

namespace loom::transport {
namespace {

using ::loom::transport::testing::Completion;
using ::loom::transport::testing::DataPathName;
using ::loom::transport::testing::kDeadline;
using ::loom::transport::testing::PatternByte;
using ::loom::transport::testing::TransportTest;
using ::testing::HasSubstr;

TEST_P(TransportTest, MessagesGoBothWays) {
  Connect(2);
  ASSERT_TRUE(transports_[0]->Send(1, "hello from 0").ok());
  ASSERT_TRUE(transports_[1]->Send(0, "hello from 1").ok());
  ASSERT_TRUE(inboxes_[1]->WaitForMessages(1, kDeadline));
  ASSERT_TRUE(inboxes_[0]->WaitForMessages(1, kDeadline));
  EXPECT_EQ(inboxes_[1]->messages()[0], std::make_pair(PeerId{0}, std::string("hello from 0")));
  EXPECT_EQ(inboxes_[0]->messages()[0], std::make_pair(PeerId{1}, std::string("hello from 1")));
  // An empty message and one of the largest size also arrive.
  std::string largest(Transport::kMaxMessageBytes, 'x');
  ASSERT_TRUE(transports_[0]->Send(1, "").ok());
  ASSERT_TRUE(transports_[0]->Send(1, largest).ok());
  ASSERT_TRUE(inboxes_[1]->WaitForMessages(3, kDeadline));
  EXPECT_EQ(inboxes_[1]->messages()[1].second, "");
  EXPECT_EQ(inboxes_[1]->messages()[2].second, largest);
  EXPECT_TRUE(inboxes_[0]->errors().empty());
  EXPECT_TRUE(inboxes_[1]->errors().empty());
}

TEST_P(TransportTest, TransfersA64MebibyteBufferByteForByte) {
  Connect(2);
  constexpr size_t kSize = 64 << 20;
  std::vector<unsigned char> source(kSize);
  for (size_t i = 0; i < kSize; ++i) source[i] = PatternByte(i, 7);
  std::vector<unsigned char> destination(kSize, 0);

  Completion<absl::StatusOr<size_t>> received;
  Completion<absl::Status> sent;
  ASSERT_TRUE(transports_[1]
                  ->ReceiveData(/*tag=*/42, destination.data(), destination.size(),
                                [&](absl::StatusOr<size_t> bytes) { received.Set(bytes); })
                  .ok());
  ASSERT_TRUE(transports_[0]
                  ->SendData(1, /*tag=*/42, source.data(), source.size(),
                             [&](absl::Status status) { sent.Set(status); })
                  .ok());
  std::optional<absl::Status> send_result = sent.Wait(kDeadline);
  ASSERT_TRUE(send_result.has_value()) << "did not complete in time";
  EXPECT_TRUE(send_result->ok()) << *send_result;
  std::optional<absl::StatusOr<size_t>> receive_result = received.Wait(kDeadline);
  ASSERT_TRUE(receive_result.has_value()) << "did not complete in time";
  ASSERT_TRUE(receive_result->ok()) << receive_result->status();
  EXPECT_EQ(**receive_result, kSize);
  EXPECT_EQ(std::memcmp(source.data(), destination.data(), kSize), 0);

  // And back, into a receive posted after the send (UCX keeps the unexpected message).
  std::vector<unsigned char> reply(4096);
  for (size_t i = 0; i < reply.size(); ++i) reply[i] = PatternByte(i, 11);
  std::vector<unsigned char> reply_destination(reply.size());
  Completion<absl::Status> reply_sent;
  Completion<absl::StatusOr<size_t>> reply_received;
  ASSERT_TRUE(transports_[1]
                  ->SendData(0, /*tag=*/43, reply.data(), reply.size(),
                             [&](absl::Status status) { reply_sent.Set(status); })
                  .ok());
  ASSERT_TRUE(transports_[0]
                  ->ReceiveData(/*tag=*/43, reply_destination.data(), reply_destination.size(),
                                [&](absl::StatusOr<size_t> bytes) { reply_received.Set(bytes); })
                  .ok());
  ASSERT_TRUE(reply_sent.Wait(kDeadline).has_value());
  std::optional<absl::StatusOr<size_t>> reply_result = reply_received.Wait(kDeadline);
  ASSERT_TRUE(reply_result.has_value() && reply_result->ok());
  EXPECT_EQ(**reply_result, reply.size());
  EXPECT_EQ(reply, reply_destination);
}

TEST_P(TransportTest, SmallAndLargeTransfersInterleaveWithTheDefaultThreshold) {
  // With copies on, transfers under the threshold go through UCX and larger ones by copy: both
  // paths at once, receives posted before and after their sends.
  copy_min_bytes_ = TransportOptions().same_host_copy_min_bytes;
  Connect(2);
  constexpr int kTransfers = 12;
  auto size_of = [](int i) -> size_t { return i % 2 == 0 ? 1000 : (1 << 20) + i; };
  std::vector<std::vector<unsigned char>> sources(kTransfers), destinations(kTransfers);
  std::vector<Completion<absl::Status>> sent(kTransfers);
  std::vector<Completion<absl::StatusOr<size_t>>> received(kTransfers);
  auto post_receive = [&](int i) {
    destinations[i].assign(size_of(i), 0);
    ASSERT_TRUE(transports_[1]
                    ->ReceiveData(200 + i, destinations[i].data(), destinations[i].size(),
                                  [&, i](absl::StatusOr<size_t> bytes) { received[i].Set(bytes); })
                    .ok());
  };
  for (int i = 0; i < kTransfers; ++i) {
    sources[i].resize(size_of(i));
    for (size_t j = 0; j < sources[i].size(); ++j) sources[i][j] = PatternByte(j, i);
    if (i % 3 != 0) post_receive(i);  // every third receive comes after its send
    ASSERT_TRUE(transports_[0]
                    ->SendData(1, 200 + i, sources[i].data(), sources[i].size(),
                               [&, i](absl::Status status) { sent[i].Set(status); })
                    .ok());
  }
  for (int i = 0; i < kTransfers; i += 3) post_receive(i);
  for (int i = 0; i < kTransfers; ++i) {
    std::optional<absl::StatusOr<size_t>> result = received[i].Wait(kDeadline);
    ASSERT_TRUE(result.has_value() && result->ok()) << "transfer " << i;
    EXPECT_EQ(**result, size_of(i));
    EXPECT_EQ(sources[i], destinations[i]) << "transfer " << i;
    std::optional<absl::Status> send_result = sent[i].Wait(kDeadline);
    ASSERT_TRUE(send_result.has_value()) << "transfer " << i;
    EXPECT_TRUE(send_result->ok()) << *send_result;
  }
}

TEST_P(TransportTest, SmallTransfersAroundTheInlineLimitArriveWhole) {
  // With copies on (and a mailbox), transfers up to kMaxInlineBytes go inline through the peer's
  // mailbox and larger ones through UCX under the default threshold; receives posted before and
  // after their sends, and receives too small for what comes fail naming the tag.
  copy_min_bytes_ = TransportOptions().same_host_copy_min_bytes;
  Connect(2);
  const std::vector<size_t> sizes = {
      0, 1, 512, Transport::kMaxInlineBytes, Transport::kMaxInlineBytes + 1, 4096};
  const int count = static_cast<int>(sizes.size());
  std::vector<std::vector<unsigned char>> sources(2 * count), destinations(2 * count);
  std::vector<Completion<absl::Status>> sent(2 * count);
  std::vector<Completion<absl::StatusOr<size_t>>> received(2 * count);
  auto post_receive = [&](int i) {
    ASSERT_TRUE(transports_[1]
                    ->ReceiveData(300 + i, destinations[i].data(), destinations[i].size(),
                                  [&, i](absl::StatusOr<size_t> bytes) { received[i].Set(bytes); })
                    .ok());
  };
  // Transfer i and count + i have one size; the second half's receives come after their sends.
  for (int i = 0; i < 2 * count; ++i) {
    sources[i].resize(sizes[i % count]);
    for (size_t j = 0; j < sources[i].size(); ++j) sources[i][j] = PatternByte(j, i);
    destinations[i].assign(sources[i].size(), 0);
    if (i < count) post_receive(i);
    ASSERT_TRUE(transports_[0]
                    ->SendData(1, 300 + i, sources[i].data(), sources[i].size(),
                               [&, i](absl::Status status) { sent[i].Set(status); })
                    .ok());
  }
  for (int i = count; i < 2 * count; ++i) post_receive(i);
  for (int i = 0; i < 2 * count; ++i) {
    std::optional<absl::StatusOr<size_t>> result = received[i].Wait(kDeadline);
    ASSERT_TRUE(result.has_value() && result->ok()) << "transfer " << i;
    EXPECT_EQ(**result, sources[i].size()) << "transfer " << i;
    EXPECT_EQ(sources[i], destinations[i]) << "transfer " << i;
    std::optional<absl::Status> send_result = sent[i].Wait(kDeadline);
    ASSERT_TRUE(send_result.has_value()) << "transfer " << i;
    EXPECT_TRUE(send_result->ok()) << *send_result;
  }

  std::vector<char> source(600, 's');
  std::vector<char> small_before(10), small_after(10);
  Completion<absl::StatusOr<size_t>> before, after;
  Completion<absl::Status> sent_before, sent_after;
  ASSERT_TRUE(transports_[1]
                  ->ReceiveData(400, small_before.data(), small_before.size(),
                                [&](absl::StatusOr<size_t> bytes) { before.Set(bytes); })
                  .ok());
  ASSERT_TRUE(transports_[0]
                  ->SendData(1, 400, source.data(), source.size(),
                             [&](absl::Status status) { sent_before.Set(status); })
                  .ok());
  ASSERT_TRUE(transports_[0]
                  ->SendData(1, 401, source.data(), source.size(),
                             [&](absl::Status status) { sent_after.Set(status); })
                  .ok());
  ASSERT_TRUE(sent_after.Wait(kDeadline).has_value());
  ASSERT_TRUE(transports_[1]
                  ->ReceiveData(401, small_after.data(), small_after.size(),
                                [&](absl::StatusOr<size_t> bytes) { after.Set(bytes); })
                  .ok());
  for (const auto& [result, tag] : {std::pair{&before, "tag 400"}, std::pair{&after, "tag 401"}}) {
    std::optional<absl::StatusOr<size_t>> outcome = result->Wait(kDeadline);
    ASSERT_TRUE(outcome.has_value()) << tag;
    EXPECT_FALSE(outcome->ok()) << tag;
    EXPECT_THAT(outcome->status().message(), HasSubstr(tag));
  }
  ASSERT_TRUE(sent_before.Wait(kDeadline).has_value());
}

TEST_P(TransportTest, ASecondAnnouncementOfAWaitingTagIsRefused) {
  if (!same_host_copies()) GTEST_SKIP() << "over UCX both wait as unexpected messages";
  Connect(3);
  // Peers 0 and 2 send with the same tag before node 1 posts its receive: a bug of the caller
  // (tags are unique per receiving node), which must fail one sender, not leave it waiting.
  std::vector<char> from0(64 << 10, 'a'), from2(64 << 10, 'c');
  Completion<absl::Status> sent0, sent2;
  ASSERT_TRUE(transports_[0]
                  ->SendData(1, 77, from0.data(), from0.size(),
                             [&](absl::Status status) { sent0.Set(status); })
                  .ok());
  ASSERT_TRUE(transports_[2]
                  ->SendData(1, 77, from2.data(), from2.size(),
                             [&](absl::Status status) { sent2.Set(status); })
                  .ok());
  // One of the two is refused; which one depends on which announcement came first.
  absl::Time deadline = absl::Now() + kDeadline;
  while (!sent0.done() && !sent2.done() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  ASSERT_TRUE(sent0.done() != sent2.done()) << "exactly one send should have been answered";
  const bool refused_first = sent0.done();
  std::optional<absl::Status> refused = (refused_first ? sent0 : sent2).Wait(kDeadline);
  ASSERT_TRUE(refused.has_value());
  EXPECT_EQ(refused->code(), absl::StatusCode::kAlreadyExists) << *refused;
  EXPECT_THAT(refused->message(), HasSubstr("tag 77"));

  std::vector<char> destination(64 << 10);
  Completion<absl::StatusOr<size_t>> received;
  ASSERT_TRUE(transports_[1]
                  ->ReceiveData(77, destination.data(), destination.size(),
                                [&](absl::StatusOr<size_t> bytes) { received.Set(bytes); })
                  .ok());
  std::optional<absl::StatusOr<size_t>> received_result = received.Wait(kDeadline);
  ASSERT_TRUE(received_result.has_value() && received_result->ok());
  EXPECT_EQ(destination, refused_first ? from2 : from0);
  std::optional<absl::Status> accepted = (refused_first ? sent2 : sent0).Wait(kDeadline);
  ASSERT_TRUE(accepted.has_value());
  EXPECT_TRUE(accepted->ok()) << *accepted;
}

TEST_P(TransportTest, ASecondInlineTransferOfAWaitingTagFailsTheReceive) {
  if (!same_host_copies() || !testing::MailboxUnavailableReason().empty()) {
    GTEST_SKIP() << "inline transfers go through a peer's mailbox";
  }
  Connect(3);
  // Peers 0 and 2 send small data (inline: done at once) with the same tag before node 1 posts its
  // receive. One of them is dropped; the receive must not take the other as if nothing happened.
  const std::vector<char> from0(64, 'a'), from2(64, 'c'), later(64, 'l');
  for (int sender : {0, 2}) {
    Completion<absl::Status> sent;
    ASSERT_TRUE(transports_[sender]
                    ->SendData(1, 78, (sender == 0 ? from0 : from2).data(), 64,
                               [&](absl::Status status) { sent.Set(status); })
                    .ok());
    std::optional<absl::Status> result = sent.Wait(kDeadline);
    ASSERT_TRUE(result.has_value() && result->ok()) << "peer " << sender;
  }
  // Each peer's mailbox messages are handled in order: once a later transfer of each has arrived,
  // node 1 has seen both with tag 78.
  for (int sender : {0, 2}) {
    const DataTag tag = 100 + sender;
    std::vector<char> destination(64);
    Completion<absl::StatusOr<size_t>> received;
    ASSERT_TRUE(transports_[1]
                    ->ReceiveData(tag, destination.data(), destination.size(),
                                  [&](absl::StatusOr<size_t> bytes) { received.Set(bytes); })
                    .ok());
    Completion<absl::Status> sent;
    ASSERT_TRUE(transports_[sender]
                    ->SendData(1, tag, later.data(), later.size(),
                               [&](absl::Status status) { sent.Set(status); })
                    .ok());
    std::optional<absl::StatusOr<size_t>> result = received.Wait(kDeadline);
    ASSERT_TRUE(result.has_value() && result->ok()) << "tag " << tag;
    ASSERT_TRUE(sent.Wait(kDeadline).has_value());
  }
  std::vector<char> destination(64);
  Completion<absl::StatusOr<size_t>> received;
  ASSERT_TRUE(transports_[1]
                  ->ReceiveData(78, destination.data(), destination.size(),
                                [&](absl::StatusOr<size_t> bytes) { received.Set(bytes); })
                  .ok());
  std::optional<absl::StatusOr<size_t>> result = received.Wait(kDeadline);
  ASSERT_TRUE(result.has_value());
  EXPECT_EQ(result->status().code(), absl::StatusCode::kAlreadyExists) << result->status();
  EXPECT_THAT(result->status().message(), HasSubstr("tag 78"));
  EXPECT_THAT(result->status().message(), HasSubstr("dropped"));
}

TEST_P(TransportTest, ManyMessagesArriveInOrderPerPeer) {
  Connect(3);
  constexpr int kCount = 5000;
  // Peers 0 and 2 both stream numbered messages to peer 1, interleaved at the receiver.
  for (int i = 0; i < kCount; ++i) {
    ASSERT_TRUE(transports_[0]->Send(1, absl::StrCat("0:", i)).ok());
    ASSERT_TRUE(transports_[2]->Send(1, absl::StrCat("2:", i)).ok());
  }
  ASSERT_TRUE(inboxes_[1]->WaitForMessages(2 * kCount, kDeadline))
      << inboxes_[1]->messages().size() << " arrived";
  int next[3] = {0, 0, 0};
  for (const auto& [from, bytes] : inboxes_[1]->messages()) {
    ASSERT_TRUE(from == 0 || from == 2) << from;
    ASSERT_EQ(bytes, absl::StrCat(from, ":", next[from])) << "out of order from peer " << from;
    ++next[from];
  }
  EXPECT_EQ(next[0], kCount);
  EXPECT_EQ(next[2], kCount);
}

TEST_P(TransportTest, ReportsErrorsNamingPeerAndOperation) {
  Connect(2);
  // Too large for a message.
  absl::Status too_large =
      transports_[0]->Send(1, std::string(Transport::kMaxMessageBytes + 1, 'x'));
  EXPECT_EQ(too_large.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(too_large.message(), HasSubstr("peer 1"));

  // No such peer.
  char byte = 0;
  Completion<absl::Status> unknown;
  ASSERT_TRUE(
      transports_[0]->SendData(5, 1, &byte, 1, [&](absl::Status s) { unknown.Set(s); }).ok());
  std::optional<absl::Status> unknown_result = unknown.Wait(kDeadline);
  ASSERT_TRUE(unknown_result.has_value());
  EXPECT_EQ(unknown_result->code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(unknown_result->message(), HasSubstr("peer 5"));

  // A transfer larger than the posted buffer.
  std::vector<char> source(1000, 'a');
  std::vector<char> destination(10);
  Completion<absl::StatusOr<size_t>> truncated;
  Completion<absl::Status> sent;
  ASSERT_TRUE(transports_[1]
                  ->ReceiveData(9, destination.data(), destination.size(),
                                [&](absl::StatusOr<size_t> bytes) { truncated.Set(bytes); })
                  .ok());
  ASSERT_TRUE(
      transports_[0]
          ->SendData(1, 9, source.data(), source.size(), [&](absl::Status s) { sent.Set(s); })
          .ok());
  std::optional<absl::StatusOr<size_t>> truncated_result = truncated.Wait(kDeadline);
  ASSERT_TRUE(truncated_result.has_value());
  EXPECT_FALSE(truncated_result->ok());
  EXPECT_THAT(truncated_result->status().message(), HasSubstr("tag 9"));
  ASSERT_TRUE(sent.Wait(kDeadline).has_value());

  // Adding a peer twice.
  EXPECT_EQ(transports_[0]->AddPeer(1, transports_[1]->address()).code(),
            absl::StatusCode::kAlreadyExists);
}

TEST_P(TransportTest, StopCancelsPendingReceivesAndSends) {
  Connect(2);
  constexpr int kReceives = 3;
  std::vector<char> buffers(kReceives * 64);
  std::vector<Completion<absl::StatusOr<size_t>>> completions(kReceives);
  for (int i = 0; i < kReceives; ++i) {
    ASSERT_TRUE(
        transports_[1]
            ->ReceiveData(100 + i, &buffers[i * 64], 64,
                          [&, i](absl::StatusOr<size_t> bytes) { completions[i].Set(bytes); })
            .ok());
  }
  // A large transfer to a peer that never posts its receive: rendezvous waits for the receiver.
  std::vector<char> unwanted(4 << 20, 'u');
  Completion<absl::Status> unwanted_sent;
  ASSERT_TRUE(transports_[1]
                  ->SendData(0, /*tag=*/999, unwanted.data(), unwanted.size(),
                             [&](absl::Status status) { unwanted_sent.Set(status); })
                  .ok());
  // A message round trip makes sure the operations were started before Stop.
  ASSERT_TRUE(transports_[1]->Send(0, "ping").ok());
  ASSERT_TRUE(inboxes_[0]->WaitForMessages(1, kDeadline));

  absl::Time start = absl::Now();
  transports_[1]->Stop();
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  for (int i = 0; i < kReceives; ++i) {
    std::optional<absl::StatusOr<size_t>> result = completions[i].Wait(absl::Seconds(1));
    ASSERT_TRUE(result.has_value()) << "receive " << i << " was not reported";
    EXPECT_EQ(result->status().code(), absl::StatusCode::kCancelled) << result->status();
    EXPECT_THAT(result->status().message(), HasSubstr(absl::StrCat("tag ", 100 + i)));
  }
  std::optional<absl::Status> unwanted_result = unwanted_sent.Wait(absl::Seconds(1));
  ASSERT_TRUE(unwanted_result.has_value()) << "the pending send was not reported";
  EXPECT_EQ(unwanted_result->code(), absl::StatusCode::kCancelled) << *unwanted_result;
  EXPECT_THAT(unwanted_result->message(), HasSubstr("tag 999 to peer 0"));
  EXPECT_EQ(transports_[1]->Send(0, "late").code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(transports_[1]->ReceiveData(1, buffers.data(), 1, nullptr).code(),
            absl::StatusCode::kFailedPrecondition);
  transports_[1]->Stop();  // idempotent

  // The survivor learns that its peer went away.
  EXPECT_TRUE(inboxes_[0]->WaitForErrors(1, absl::Seconds(5)));
}

// A Stop made while the progress thread takes queued commands ends the progress thread. It was
// lost when it came between the progress thread's look at the stop request and its taking of the
// commands (which cleared the flag Stop had raised): the thread parked on, and Stop never returned.
// A flood of messages keeps the progress thread taking commands; the stops land 0 to 0.9 ms in.
TEST_P(TransportTest, AStopMadeWhileCommandsAreTakenEndsTheProgressThread) {
  for (int round = 0; round < 100; ++round) {
    SCOPED_TRACE(round);
    transports_.clear();
    inboxes_.clear();
    ASSERT_NO_FATAL_FAILURE(Connect(2));
    std::thread sender([&] {
      while (transports_[1]->Send(0, "flood").ok()) {
      }
    });
    absl::SleepFor(absl::Microseconds(100 * (round % 10)));
    std::future<void> stopped = std::async(std::launch::async, [&] { transports_[1]->Stop(); });
    // A lost stop never returns: end the process rather than the test's wait.
    CHECK(stopped.wait_for(std::chrono::seconds(10)) == std::future_status::ready)
        << "round " << round << ": Transport::Stop did not return within 10 seconds";
    sender.join();
  }
}

INSTANTIATE_TEST_SUITE_P(DataPaths, TransportTest, ::testing::Bool(), DataPathName);

TEST(UcxContextTest, AppliesConfigurationAndRejectsBadValues) {
  UcxContextOptions options;
  options.configuration = {{"TLS", "tcp,self"}};
  absl::StatusOr<std::unique_ptr<UcxContext>> applied = UcxContext::Create(options);
  ASSERT_TRUE(applied.ok()) << applied.status();
  EXPECT_EQ((*applied)->transports(), "tcp,self");
  options.configuration = {{"RNDV_THRESH", "not-a-size"}};
  absl::StatusOr<std::unique_ptr<UcxContext>> context = UcxContext::Create(options);
  ASSERT_FALSE(context.ok());
  EXPECT_THAT(context.status().message(), HasSubstr("RNDV_THRESH=not-a-size"));
}

}  // namespace
}  // namespace loom::transport
