// WorkerSession against a fake coordinator that registers the worker and then reads its messages
// only when the test says so: updates are queued (the reporting thread does not wait for the
// coordinator), go out in order, and wait for room once the queue holds its limit. And a worker
// whose coordinator is down stops at once.
#include "daemon/worker_session.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "gtest/gtest.h"

namespace loom::daemon {
namespace {

using ::testing::ElementsAre;

class SlowCoordinator final : public v1::NodeService::Service {
 public:
  grpc::Status Session(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<v1::CoordinatorMessage, v1::WorkerMessage>* stream) override {
    v1::WorkerMessage hello;
    if (!stream->Read(&hello) || !hello.has_register_()) return grpc::Status::OK;
    {
      // Before answering: the worker is connected once it has the answer.
      std::lock_guard<std::mutex> lock(mutex_);
      worker_max_message_bytes_ = hello.register_().max_message_bytes();
    }
    v1::CoordinatorMessage registered;
    registered.mutable_registered()->set_index(1);
    registered.mutable_registered()->set_heartbeat_interval_milliseconds(10);
    registered.mutable_registered()->set_max_message_bytes(max_message_bytes_);
    stream->Write(registered);
    {
      std::unique_lock<std::mutex> lock(mutex_);
      ++sessions_;
      changed_.notify_all();
      changed_.wait(lock, [this] { return reading_ || ending_; });
      if (ending_) {
        // Ends this session unread; the next one reads.
        ending_ = false;
        reading_ = true;
        return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the test ends the session");
      }
    }
    v1::WorkerMessage message;
    while (stream->Read(&message)) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (message.has_job()) updates_.push_back(message.job().job_id());
      if (message.has_heartbeat()) ++heartbeats_;
      changed_.notify_all();
    }
    return grpc::Status::OK;
  }

  // Ends the current session without reading it.
  void EndSession() {
    std::lock_guard<std::mutex> lock(mutex_);
    ending_ = true;
    changed_.notify_all();
  }

  // Whether `count` sessions registered (within 20 s).
  bool WaitForSessions(int count) {
    std::unique_lock<std::mutex> lock(mutex_);
    return changed_.wait_for(lock, std::chrono::seconds(20), [&] { return sessions_ >= count; });
  }

  void StartReading() {
    std::lock_guard<std::mutex> lock(mutex_);
    reading_ = true;
    changed_.notify_all();
  }

  // The job ids of the updates read, once there are `count` of them (or after 20 s).
  std::vector<std::string> WaitForUpdates(size_t count) {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait_for(lock, std::chrono::seconds(20), [&] { return updates_.size() >= count; });
    return updates_;
  }

  int heartbeats() {
    std::lock_guard<std::mutex> lock(mutex_);
    return heartbeats_;
  }

  // The limit this coordinator says it has at registration (0: says none); before a session.
  void set_max_message_bytes(int64_t bytes) { max_message_bytes_ = bytes; }
  // The limit the worker said it has.
  int64_t worker_max_message_bytes() {
    std::lock_guard<std::mutex> lock(mutex_);
    return worker_max_message_bytes_;
  }
  int sessions() {
    std::lock_guard<std::mutex> lock(mutex_);
    return sessions_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  bool reading_ = false;
  bool ending_ = false;
  int sessions_ = 0;
  std::vector<std::string> updates_;
  int heartbeats_ = 0;
  std::atomic<int64_t> max_message_bytes_{0};
  int64_t worker_max_message_bytes_ = 0;
};

class WorkerSessionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&coordinator_);
    builder.SetMaxReceiveMessageSize(64 << 20);
    // As loomd's server: the worker pings every second.
    builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    address_ = absl::StrCat("127.0.0.1:", port);
  }

  void TearDown() override {
    coordinator_.StartReading();  // lets a waiting Session handler end
    if (session_ != nullptr) session_->Stop();
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  }

  // Starts a session and waits until it registered.
  void StartSession(size_t max_queued_update_bytes) {
    WorkerSession::Options options;
    options.coordinator_address = address_;
    options.node.set_name("worker");
    options.max_queued_update_bytes = max_queued_update_bytes;
    options.retry_interval = absl::Milliseconds(50);
    session_ = std::make_unique<WorkerSession>(options);
    session_->Start(&agent_);
    const absl::Time deadline = absl::Now() + absl::Seconds(20);
    while (!session_->connected() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(5));
    ASSERT_TRUE(session_->connected());
  }

  // An update carrying a forwarded piece of `megabytes` MiB.
  static v1::NodeJobUpdate Piece(const std::string& job_id, int megabytes) {
    v1::NodeJobUpdate update;
    update.set_job_id(job_id);
    update.mutable_piece()->set_data(
        std::string(size_t{1} << 20, 'x').append((megabytes - 1) * (size_t{1} << 20), 'y'));
    return update;
  }

  SlowCoordinator coordinator_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
  NodeAgent agent_{nullptr, [](const v1::NodeJobUpdate&) { return absl::OkStatus(); }};
  std::unique_ptr<WorkerSession> session_;
};

TEST_F(WorkerSessionTest, UpdatesAreQueuedWhileTheCoordinatorIsSlowAndArriveInOrder) {
  StartSession(size_t{64} << 20);
  // 8 x 4 MiB while the coordinator reads nothing: far more than HTTP/2's flow-control window, so
  // a report that wrote to the stream itself would wait for the coordinator.
  std::atomic<int> reported{0};
  std::thread reporter([&] {
    for (int index = 0; index < 8; ++index) {
      EXPECT_TRUE(session_->Report(Piece(absl::StrCat("job-", index), 4)).ok());
      ++reported;
    }
  });
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (reported < 8 && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(5));
  EXPECT_EQ(reported, 8) << "a report waited for the coordinator to read";
  coordinator_.StartReading();
  reporter.join();
  EXPECT_THAT(coordinator_.WaitForUpdates(8),
              ElementsAre("job-0", "job-1", "job-2", "job-3", "job-4", "job-5", "job-6", "job-7"));
  EXPECT_GE(coordinator_.heartbeats(), 1);
}

TEST_F(WorkerSessionTest, AReportWaitsForRoomOnceTheQueueIsFull) {
  // Room for 16 MiB of 8 MiB pieces while the coordinator reads nothing: once the queue and what
  // gRPC's buffers take are full, the reports wait, and 10 pieces (80 MiB) never all get in.
  StartSession(size_t{16} << 20);
  std::atomic<int> reported{0};
  std::thread reporter([&] {
    for (int index = 0; index < 10; ++index) {
      EXPECT_TRUE(session_->Report(Piece(absl::StrCat("job-", index), 8)).ok());
      ++reported;
    }
  });
  absl::SleepFor(absl::Milliseconds(500));
  EXPECT_LT(reported, 10);
  coordinator_.StartReading();
  reporter.join();
  EXPECT_EQ(reported, 10);
  EXPECT_THAT(coordinator_.WaitForUpdates(10),
              ElementsAre("job-0", "job-1", "job-2", "job-3", "job-4", "job-5", "job-6", "job-7",
                          "job-8", "job-9"));
}

TEST_F(WorkerSessionTest, UpdatesQueuedWhenASessionEndsAreDroppedAndTheNextSessionReports) {
  // Room for 9 MiB: one 4 MiB piece in the writer's hands, one queued, when the session ends.
  StartSession(size_t{9} << 20);
  EXPECT_TRUE(session_->Report(Piece("lost-0", 4)).ok());
  EXPECT_TRUE(session_->Report(Piece("lost-1", 4)).ok());
  coordinator_.EndSession();
  ASSERT_TRUE(coordinator_.WaitForSessions(2));
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (!session_->connected() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(5));
  // The queue's account starts empty again: an 8 MiB piece gets in (a count left over from the
  // dropped pieces would keep it waiting).
  std::atomic<bool> reported{false};
  std::thread reporter([&] {
    EXPECT_TRUE(session_->Report(Piece("after", 8)).ok());
    reported = true;
  });
  EXPECT_THAT(coordinator_.WaitForUpdates(1), ElementsAre("after"));
  reporter.join();
  EXPECT_TRUE(reported);
}

TEST_F(WorkerSessionTest, AnUpdateOverTheCoordinatorsSmallerLimitIsRefusedAndTheSessionGoesOn) {
  // The worker may send 64 MiB, the coordinator takes 1 MiB: a 2 MiB piece would end the session
  // (gRPC refuses to send it), so Report refuses it and the session carries on.
  coordinator_.set_max_message_bytes(int64_t{1} << 20);
  StartSession(size_t{64} << 20);
  EXPECT_EQ(coordinator_.worker_max_message_bytes(), int64_t{64} << 20);
  EXPECT_EQ(session_->message_limit(), int64_t{1} << 20);
  absl::Status refused = session_->Report(Piece("too-large", 2));
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(refused.message(), ::testing::HasSubstr("over the 1048576 bytes"));
  EXPECT_THAT(refused.message(), ::testing::HasSubstr("job too-large"));
  v1::NodeJobUpdate small;
  small.set_job_id("small");
  EXPECT_TRUE(session_->Report(small).ok());
  coordinator_.StartReading();
  EXPECT_THAT(coordinator_.WaitForUpdates(1), ElementsAre("small"));
  EXPECT_TRUE(session_->connected());
  EXPECT_EQ(coordinator_.sessions(), 1);
}

// A port of 127.0.0.1 that nothing listens on (bound, then closed).
int ClosedPort() {
  const int socket_descriptor = ::socket(AF_INET, SOCK_STREAM, 0);
  if (socket_descriptor < 0) return 0;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  socklen_t length = sizeof(address);
  int port = 0;
  if (::bind(socket_descriptor, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0 &&
      ::getsockname(socket_descriptor, reinterpret_cast<sockaddr*>(&address), &length) == 0) {
    port = ntohs(address.sin_port);
  }
  ::close(socket_descriptor);
  return port;
}

TEST(WorkerSessionStopTest, AWorkerWhoseCoordinatorIsDownStopsWithinTwoSeconds) {
  const int port = ClosedPort();
  ASSERT_NE(port, 0);
  // Shared with the thread that stops it, which outlives the test if Stop hangs.
  auto agent = std::make_shared<NodeAgent>(
      nullptr, [](const v1::NodeJobUpdate&) { return absl::OkStatus(); });
  WorkerSession::Options options;
  options.coordinator_address = absl::StrCat("127.0.0.1:", port);
  options.node.set_name("orphan");
  options.node.set_rank(-1);
  auto session = std::make_shared<WorkerSession>(options);
  session->Start(agent.get());
  // The session is waiting for the coordinator (its call waits for the channel to connect).
  absl::SleepFor(absl::Milliseconds(500));
  EXPECT_FALSE(session->connected());
  auto stopped = std::make_shared<std::promise<void>>();
  std::future<void> done = stopped->get_future();
  const absl::Time stop = absl::Now();
  std::thread([session, agent, stopped]() mutable {
    session->Stop();
    session.reset();
    stopped->set_value();
  }).detach();
  ASSERT_EQ(done.wait_for(std::chrono::seconds(2)), std::future_status::ready)
      << "WorkerSession::Stop did not return within 2 s while its coordinator is down";
  EXPECT_LT(absl::Now() - stop, absl::Seconds(2));
}

}  // namespace
}  // namespace loom::daemon
