// SystemdNotifier against a fake systemd: a unix datagram socket this test binds and names in
// NOTIFY_SOCKET (systemd's protocol), as systemd does for a Type=notify service.
#include "daemon/systemd_notify.h"

#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace loom::daemon {
namespace {

class SystemdNotifyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    directory_ =
        std::filesystem::temp_directory_path() / absl::StrCat("loom-systemd-notify-", getpid());
    std::filesystem::create_directories(directory_);
    socket_path_ = (directory_ / "notify").string();
    socket_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(socket_, 0);
    sockaddr_un address = {};
    address.sun_family = AF_UNIX;
    ASSERT_LT(socket_path_.size(), sizeof(address.sun_path));
    socket_path_.copy(address.sun_path, socket_path_.size());
    ASSERT_EQ(bind(socket_, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
    // Every receive gives up after 5 s, so that a missing notification fails instead of hanging.
    timeval timeout = {.tv_sec = 5, .tv_usec = 0};
    ASSERT_EQ(setsockopt(socket_, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout)), 0);
    unsetenv("WATCHDOG_USEC");
    unsetenv("WATCHDOG_PID");
  }

  void TearDown() override {
    unsetenv("NOTIFY_SOCKET");
    unsetenv("WATCHDOG_USEC");
    unsetenv("WATCHDOG_PID");
    if (socket_ >= 0) close(socket_);
    std::filesystem::remove_all(directory_);
  }

  void ListenAsSystemd() { setenv("NOTIFY_SOCKET", socket_path_.c_str(), /*overwrite=*/1); }

  // The next datagram, or "" after the receive timeout.
  std::string Receive() {
    std::string message(4096, '\0');
    const ssize_t size = recv(socket_, message.data(), message.size(), 0);
    message.resize(size < 0 ? 0 : size);
    return message;
  }

  // Datagrams until one that is not a watchdog ping ("" after the receive timeout).
  std::string ReceiveSkippingWatchdog() {
    std::string message = Receive();
    while (message == "WATCHDOG=1") message = Receive();
    return message;
  }

  std::filesystem::path directory_;
  std::string socket_path_;
  int socket_ = -1;
};

TEST_F(SystemdNotifyTest, SendsReadyWatchdogAndStopping) {
  ListenAsSystemd();
  setenv("WATCHDOG_USEC", "200000", 1);
  setenv("WATCHDOG_PID", std::to_string(getpid()).c_str(), 1);
  SystemdNotifier notifier;
  EXPECT_TRUE(SystemdNotifier::Enabled());

  ASSERT_TRUE(notifier.Ready("serving on 127.0.0.1:7070").ok());
  EXPECT_EQ(Receive(), "READY=1\nSTATUS=serving on 127.0.0.1:7070");

  notifier.StartWatchdog();
  EXPECT_EQ(notifier.watchdog_period(), std::chrono::microseconds(100000));
  // The first ping at once, the next ones every 100 ms.
  EXPECT_EQ(Receive(), "WATCHDOG=1");
  EXPECT_EQ(Receive(), "WATCHDOG=1");

  ASSERT_TRUE(notifier.Stopping().ok());
  EXPECT_EQ(ReceiveSkippingWatchdog(), "STOPPING=1\nSTATUS=shutting down");
  notifier.StopWatchdog();
  EXPECT_EQ(notifier.watchdog_period(), std::chrono::microseconds(0));
}

TEST_F(SystemdNotifyTest, NoWatchdogWhenSystemdDidNotEnableIt) {
  ListenAsSystemd();
  SystemdNotifier notifier;
  notifier.StartWatchdog();
  EXPECT_EQ(notifier.watchdog_period(), std::chrono::microseconds(0));
  ASSERT_TRUE(notifier.Ready("serving").ok());
  // The first datagram is READY=1: no ping came before it.
  EXPECT_EQ(Receive(), "READY=1\nSTATUS=serving");
  ASSERT_TRUE(notifier.SetStatus("unhealthy: job-3 has not ended").ok());
  EXPECT_EQ(Receive(), "STATUS=unhealthy: job-3 has not ended");
}

TEST_F(SystemdNotifyTest, NoWatchdogForAnotherProcess) {
  ListenAsSystemd();
  setenv("WATCHDOG_USEC", "200000", 1);
  // The watchdog of the service's main process, which is not this one.
  setenv("WATCHDOG_PID", std::to_string(getpid() + 1).c_str(), 1);
  SystemdNotifier notifier;
  notifier.StartWatchdog();
  EXPECT_EQ(notifier.watchdog_period(), std::chrono::microseconds(0));
}

TEST_F(SystemdNotifyTest, NoOpOutsideSystemd) {
  unsetenv("NOTIFY_SOCKET");
  setenv("WATCHDOG_USEC", "200000", 1);
  SystemdNotifier notifier;
  EXPECT_FALSE(SystemdNotifier::Enabled());
  EXPECT_TRUE(notifier.Ready("serving").ok());
  EXPECT_TRUE(notifier.Stopping().ok());
  notifier.StartWatchdog();
  EXPECT_EQ(notifier.watchdog_period(), std::chrono::microseconds(0));
}

TEST_F(SystemdNotifyTest, UnreachableSocketIsAnError) {
  setenv("NOTIFY_SOCKET", (directory_ / "nobody-listens").c_str(), 1);
  SystemdNotifier notifier;
  absl::Status status = notifier.Ready("serving");
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
}

}  // namespace
}  // namespace loom::daemon
