// A Transport in this process and one in a forked child, exchanging addresses through pipes the
// way the coordinator will in a cluster. Each test forks before creating any UCX context (ctest
// runs every test in a fresh process), and the child ends with _exit, never returning into
// GoogleTest.
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/cpu_affinity.h"
#include "glog/logging.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/transport/transport_test_util.h"
#include "transport/transport.h"

namespace loom::transport {
namespace {

using ::loom::transport::testing::Completion;
using ::loom::transport::testing::Inbox;
using ::loom::transport::testing::MakeTransport;
using ::loom::transport::testing::PatternByte;

constexpr absl::Duration kDeadline = absl::Seconds(10);
constexpr size_t kDataSize = 64 << 20;
constexpr DataTag kDataTag = 77;
constexpr int kMessages = 200;

bool WriteAll(int fd, const void* data, size_t size) {
  const char* bytes = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t written = write(fd, bytes, size);
    if (written <= 0) return false;
    bytes += written;
    size -= written;
  }
  return true;
}

bool ReadAll(int fd, void* data, size_t size, absl::Time deadline) {
  char* bytes = static_cast<char*>(data);
  while (size > 0) {
    pollfd descriptor{fd, POLLIN, 0};
    int remaining_ms = static_cast<int>(absl::ToInt64Milliseconds(deadline - absl::Now()));
    if (remaining_ms <= 0 || poll(&descriptor, 1, remaining_ms) <= 0) return false;
    ssize_t got = read(fd, bytes, size);
    if (got <= 0) return false;
    bytes += got;
    size -= got;
  }
  return true;
}

// Length-prefixed address exchange over pipes.
bool WriteAddress(int fd, const std::string& address) {
  uint32_t size = address.size();
  return WriteAll(fd, &size, sizeof(size)) && WriteAll(fd, address.data(), address.size());
}

bool ReadAddress(int fd, std::string* address) {
  absl::Time deadline = absl::Now() + kDeadline;
  uint32_t size = 0;
  if (!ReadAll(fd, &size, sizeof(size), deadline) || size > (1u << 20)) return false;
  address->resize(size);
  return ReadAll(fd, address->data(), size, deadline);
}

// A forked child with pipes both ways; the child runs `body` and exits with its return value.
struct Child {
  pid_t pid = -1;
  int to_child = -1;
  int from_child = -1;
};

template <typename Body>
Child Fork(Body body) {
  int down[2], up[2];
  CHECK_EQ(pipe(down), 0);
  CHECK_EQ(pipe(up), 0);
  pid_t pid = fork();
  CHECK_GE(pid, 0);
  if (pid == 0) {
    close(down[1]);
    close(up[0]);
    alarm(30);  // a child that hangs dies
    int code = body(down[0], up[1]);
    _exit(code);
  }
  close(down[0]);
  close(up[1]);
  return Child{pid, down[1], up[0]};
}

// Waits for the child to exit; kills it after `deadline`. Returns its exit status as waitpid's.
int WaitForChild(pid_t pid, absl::Duration deadline) {
  absl::Time end = absl::Now() + deadline;
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (absl::Now() > end) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -1;
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
  return status;
}

// The child of the exchange test: echoes messages, receives the buffer, checks it, says "ok",
// and waits for "bye". Exit codes name the step that failed.
int EchoChild(int from_parent, int to_parent, const char* transports) {
  testing::UseTcpTransports();
  Inbox inbox;
  absl::StatusOr<std::unique_ptr<Transport>> transport = MakeTransport(1, &inbox, transports);
  if (!transport.ok()) return 10;
  std::string parent_address;
  if (!WriteAddress(to_parent, (*transport)->address())) return 11;
  if (!ReadAddress(from_parent, &parent_address)) return 12;
  if (!(*transport)->AddPeer(0, parent_address).ok()) return 13;

  std::vector<unsigned char> buffer(kDataSize);
  Completion<absl::StatusOr<size_t>> received;
  if (!(*transport)
           ->ReceiveData(kDataTag, buffer.data(), buffer.size(),
                         [&](absl::StatusOr<size_t> bytes) { received.Set(bytes); })
           .ok()) {
    return 14;
  }
  if (!inbox.WaitForMessages(kMessages, kDeadline)) return 15;
  std::vector<std::pair<PeerId, std::string>> messages = inbox.messages();
  for (int i = 0; i < kMessages; ++i) {
    if (messages[i].first != 0 || messages[i].second != absl::StrCat("message ", i)) return 16;
    if (!(*transport)->Send(0, absl::StrCat("echo ", i)).ok()) return 17;
  }
  std::optional<absl::StatusOr<size_t>> result = received.Wait(kDeadline);
  if (!result.has_value() || !result->ok() || **result != kDataSize) return 18;
  for (size_t i = 0; i < kDataSize; ++i) {
    if (buffer[i] != PatternByte(i, 3)) return 19;
  }
  if (!(*transport)->Send(0, "ok").ok()) return 20;
  if (!inbox.WaitForMessages(kMessages + 1, kDeadline)) return 21;
  if (inbox.messages().back().second != "bye") return 22;
  (*transport)->Stop();
  return 0;
}

// Both data paths between two processes: UCX over TCP, and same-host copies.
class TransportProcessTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    if (GetParam()) {
      const std::string unavailable = testing::SameHostCopiesUnavailableReason();
      if (!unavailable.empty()) GTEST_SKIP() << unavailable;
    }
  }

  const char* transports() const {
    return GetParam() ? testing::kTcpAndSameHostCopies : testing::kTcpOnly;
  }
  // Checks that data to the child take the path of the parameter.
  void ExpectDataPath(const Transport& transport) {
    if (GetParam()) {
      EXPECT_TRUE(testing::WaitForSameHostCopies(transport, 1, kDeadline));
      if (testing::MailboxUnavailableReason().empty()) {
        EXPECT_TRUE(transport.PostsToMailboxOf(1));
      }
    } else {
      EXPECT_FALSE(transport.CopiesDirectlyTo(1));
      EXPECT_FALSE(transport.PostsToMailboxOf(1));
    }
  }
};

TEST_P(TransportProcessTest, TwoProcessesExchangeMessagesAndData) {
  const char* child_transports = transports();
  Child child = Fork([child_transports](int from_parent, int to_parent) {
    return EchoChild(from_parent, to_parent, child_transports);
  });
  testing::UseTcpTransports();
  Inbox inbox;
  absl::StatusOr<std::unique_ptr<Transport>> transport = MakeTransport(0, &inbox, transports());
  ASSERT_TRUE(transport.ok()) << transport.status();
  std::string child_address;
  ASSERT_TRUE(WriteAddress(child.to_child, (*transport)->address()));
  ASSERT_TRUE(ReadAddress(child.from_child, &child_address));
  ASSERT_TRUE((*transport)->AddPeer(1, child_address).ok());
  ExpectDataPath(**transport);

  for (int i = 0; i < kMessages; ++i) {
    ASSERT_TRUE((*transport)->Send(1, absl::StrCat("message ", i)).ok());
  }
  std::vector<unsigned char> data(kDataSize);
  for (size_t i = 0; i < kDataSize; ++i) data[i] = PatternByte(i, 3);
  Completion<absl::Status> sent;
  ASSERT_TRUE((*transport)
                  ->SendData(1, kDataTag, data.data(), data.size(),
                             [&](absl::Status status) { sent.Set(status); })
                  .ok());
  std::optional<absl::Status> send_result = sent.Wait(kDeadline);
  ASSERT_TRUE(send_result.has_value()) << "did not complete in time";
  EXPECT_TRUE(send_result->ok()) << *send_result;

  ASSERT_TRUE(inbox.WaitForMessages(kMessages + 1, kDeadline))
      << inbox.messages().size() << " messages arrived";
  std::vector<std::pair<PeerId, std::string>> messages = inbox.messages();
  for (int i = 0; i < kMessages; ++i) {
    EXPECT_EQ(messages[i], std::make_pair(PeerId{1}, absl::StrCat("echo ", i)));
  }
  EXPECT_EQ(messages[kMessages].second, "ok") << "the child found the data wrong";
  ASSERT_TRUE((*transport)->Send(1, "bye").ok());
  int status = WaitForChild(child.pid, kDeadline);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "child status " << status << " (exit code " << WEXITSTATUS(status) << ")";
  (*transport)->Stop();
}

// The child of the failure test: connects, says "ready", and waits to be killed.
int WaitingChild(int from_parent, int to_parent, const char* transports) {
  testing::UseTcpTransports();
  Inbox inbox;
  absl::StatusOr<std::unique_ptr<Transport>> transport = MakeTransport(1, &inbox, transports);
  if (!transport.ok()) return 10;
  std::string parent_address;
  if (!WriteAddress(to_parent, (*transport)->address())) return 11;
  if (!ReadAddress(from_parent, &parent_address)) return 12;
  if (!(*transport)->AddPeer(0, parent_address).ok()) return 13;
  if (!(*transport)->Send(0, "ready").ok()) return 14;
  absl::SleepFor(absl::Seconds(20));
  return 15;
}

TEST_P(TransportProcessTest, KilledPeerIsReportedToTheSurvivor) {
  const char* child_transports = transports();
  Child child = Fork([child_transports](int from_parent, int to_parent) {
    return WaitingChild(from_parent, to_parent, child_transports);
  });
  testing::UseTcpTransports();
  Inbox inbox;
  absl::StatusOr<std::unique_ptr<Transport>> transport = MakeTransport(0, &inbox, transports());
  ASSERT_TRUE(transport.ok()) << transport.status();
  std::string child_address;
  ASSERT_TRUE(WriteAddress(child.to_child, (*transport)->address()));
  ASSERT_TRUE(ReadAddress(child.from_child, &child_address));
  ASSERT_TRUE((*transport)->AddPeer(1, child_address).ok());
  ASSERT_TRUE(inbox.WaitForMessages(1, kDeadline));
  ASSERT_EQ(inbox.messages()[0].second, "ready");
  ExpectDataPath(**transport);
  // A transfer the child never receives: over UCX a rendezvous waiting for its receive, by
  // same-host copy an announcement waiting for its answer. The peer's death must fail it.
  std::vector<char> unreceived(4 << 20, 'u');
  Completion<absl::Status> unreceived_sent;
  ASSERT_TRUE((*transport)
                  ->SendData(1, 4, unreceived.data(), unreceived.size(),
                             [&](absl::Status status) { unreceived_sent.Set(status); })
                  .ok());
  // A receive that the dead peer will never satisfy stays pending until Stop.
  char buffer[16];
  Completion<absl::StatusOr<size_t>> pending_receive;
  ASSERT_TRUE((*transport)
                  ->ReceiveData(5, buffer, sizeof(buffer),
                                [&](absl::StatusOr<size_t> bytes) { pending_receive.Set(bytes); })
                  .ok());

  absl::Time killed_at = absl::Now();
  ASSERT_EQ(kill(child.pid, SIGKILL), 0);
  ASSERT_TRUE(inbox.WaitForErrors(1, absl::Seconds(5))) << "the dead peer was not reported";
  absl::Duration detection = absl::Now() - killed_at;
  std::vector<std::pair<PeerId, absl::Status>> errors = inbox.errors();
  EXPECT_EQ(errors[0].first, 1u);
  EXPECT_THAT(errors[0].second.message(), ::testing::HasSubstr("peer 1"));
  LOG(INFO) << "peer failure detected after " << detection << ": " << errors[0].second;
  WaitForChild(child.pid, kDeadline);
  std::optional<absl::Status> unreceived_result = unreceived_sent.Wait(absl::Seconds(5));
  ASSERT_TRUE(unreceived_result.has_value()) << "the send to the dead peer never completed";
  EXPECT_EQ(unreceived_result->code(), absl::StatusCode::kUnavailable) << *unreceived_result;
  EXPECT_THAT(unreceived_result->message(), ::testing::HasSubstr("tag 4 to peer 1"));

  // Operations towards the dead peer fail at once, naming it.
  char byte = 1;
  Completion<absl::Status> sent;
  ASSERT_TRUE((*transport)->SendData(1, 6, &byte, 1, [&](absl::Status s) { sent.Set(s); }).ok());
  std::optional<absl::Status> send_result = sent.Wait(kDeadline);
  ASSERT_TRUE(send_result.has_value());
  EXPECT_EQ(send_result->code(), absl::StatusCode::kUnavailable) << *send_result;
  EXPECT_THAT(send_result->message(), ::testing::HasSubstr("peer 1"));

  (*transport)->Stop();
  std::optional<absl::StatusOr<size_t>> receive_result = pending_receive.Wait(absl::Seconds(1));
  ASSERT_TRUE(receive_result.has_value());
  EXPECT_EQ(receive_result->status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(inbox.errors().size(), 1u) << "the peer was reported more than once";
}

// The child of the polling tests: on `cpu`, connects with same-host copies, and waits for "bye".
int BoundChild(int from_parent, int to_parent, int cpu) {
  if (!BindToCpu(cpu).ok()) return 9;
  testing::UseTcpTransports();
  Inbox inbox;
  absl::StatusOr<std::unique_ptr<Transport>> transport =
      MakeTransport(1, &inbox, testing::kTcpAndSameHostCopies);
  if (!transport.ok()) return 10;
  std::string parent_address;
  if (!WriteAddress(to_parent, (*transport)->address())) return 11;
  if (!ReadAddress(from_parent, &parent_address)) return 12;
  if (!(*transport)->AddPeer(0, parent_address).ok()) return 13;
  if (!inbox.WaitForMessages(1, kDeadline) || inbox.messages()[0].second != "bye") return 14;
  (*transport)->Stop();
  return 0;
}

// This process on `parent_cpu`, a child on `child_cpu`: whether this process's transport finds a
// CPU of its own once it knows the child (having had one while alone), i.e. polls busily rather
// than yielding; nullopt after a failure.
std::optional<bool> HasACpuWithAChildOn(int parent_cpu, int child_cpu) {
  Child child = Fork([child_cpu](int from_parent, int to_parent) {
    return BoundChild(from_parent, to_parent, child_cpu);
  });
  std::optional<bool> has_a_cpu;
  // On a thread of its own, bound with the threads it starts, so that the test's thread keeps
  // its CPUs for the next test.
  std::thread([&] {
    absl::Status bound = BindToCpu(parent_cpu);
    ASSERT_TRUE(bound.ok()) << bound;
    testing::UseTcpTransports();
    Inbox inbox;
    absl::StatusOr<std::unique_ptr<Transport>> transport =
        MakeTransport(0, &inbox, testing::kTcpAndSameHostCopies);
    ASSERT_TRUE(transport.ok()) << transport.status();
    EXPECT_TRUE((*transport)->SameHostProcessesHaveACpuEach()) << "alone on a CPU of its own";
    std::string child_address;
    ASSERT_TRUE(WriteAddress(child.to_child, (*transport)->address()));
    ASSERT_TRUE(ReadAddress(child.from_child, &child_address));
    absl::Status added = (*transport)->AddPeer(1, child_address);
    ASSERT_TRUE(added.ok()) << added;
    // The probe that found the child on this host read its CPUs.
    ASSERT_TRUE(testing::WaitForSameHostCopies(**transport, 1, kDeadline));
    has_a_cpu = (*transport)->SameHostProcessesHaveACpuEach();
    EXPECT_TRUE((*transport)->Send(1, "bye").ok());
    const int status = WaitForChild(child.pid, kDeadline);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "child status " << status << " (exit code " << WEXITSTATUS(status) << ")";
    (*transport)->Stop();
  }).join();
  if (!has_a_cpu.has_value()) {
    kill(child.pid, SIGKILL);
    WaitForChild(child.pid, kDeadline);
  }
  return has_a_cpu;
}

class TransportPollingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string unavailable = testing::SameHostCopiesUnavailableReason();
    if (!unavailable.empty()) GTEST_SKIP() << unavailable;
    absl::StatusOr<std::vector<int>> cpus = AllowedCpus(0);
    ASSERT_TRUE(cpus.ok()) << cpus.status();
    cpus_ = *std::move(cpus);
  }
  std::vector<int> cpus_;
};

// Two processes confined to one CPU (a cluster under `taskset -c 0`): a busy poll would hold the
// core the other needs, so the driver yields it between polls, whatever the host's core count.
TEST_F(TransportPollingTest, ProcessesOnOneCpuDoNotHaveACpuEach) {
  EXPECT_EQ(HasACpuWithAChildOn(cpus_[0], cpus_[0]), std::optional<bool>(false));
}

TEST_F(TransportPollingTest, ProcessesOnTwoCpusHaveACpuEach) {
  if (cpus_.size() < 2) GTEST_SKIP() << "this process may use only CPU " << cpus_[0];
  EXPECT_EQ(HasACpuWithAChildOn(cpus_[0], cpus_[1]), std::optional<bool>(true));
}

INSTANTIATE_TEST_SUITE_P(DataPaths, TransportProcessTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "SameHostCopies" : "Ucx";
                         });

}  // namespace
}  // namespace loom::transport
