#include "tools/loomctl/interrupt_signals.h"

#include <signal.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "gtest/gtest.h"

namespace loom::loomctl {
namespace {

// The handler of `signal` now.
void (*HandlerOf(int signal))(int) {
  struct sigaction action {};
  sigaction(signal, nullptr, &action);
  return action.sa_handler;
}

void IgnoreTheSignal(int) {}

bool WaitFor(const std::atomic<int>& calls, int expected) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (calls.load() != expected && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return calls.load() == expected;
}

TEST(InterruptSignalsTest, TheFirstSignalCallsBackInsteadOfEndingTheProcess) {
  std::atomic<int> calls = 0;
  absl::StatusOr<std::unique_ptr<InterruptSignals>> signals =
      InterruptSignals::Install([&calls] { ++calls; });
  ASSERT_TRUE(signals.ok()) << signals.status();
  EXPECT_EQ((*signals)->received(), 0);
  raise(SIGTERM);
  EXPECT_TRUE(WaitFor(calls, 1));
  EXPECT_EQ((*signals)->received(), SIGTERM);
  EXPECT_EQ(ExitCodeOfSignal((*signals)->received()), 143);
  EXPECT_EQ(SignalName(SIGINT), "SIGINT");
  EXPECT_EQ(SignalName(SIGTERM), "SIGTERM");
}

TEST(InterruptSignalsTest, ASecondSignalEndsTheProcessAsTheSignalWould) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // the test binary may have threads running
  EXPECT_EXIT(
      {
        absl::StatusOr<std::unique_ptr<InterruptSignals>> signals = InterruptSignals::Install();
        if (!signals.ok()) _exit(3);
        raise(SIGINT);
        raise(SIGINT);
        std::this_thread::sleep_for(std::chrono::seconds(10));
        _exit(0);
      },
      testing::KilledBySignal(SIGINT), "");
}

TEST(InterruptSignalsTest, OneAtATimeAndThePreviousHandlingComesBack) {
  struct sigaction custom {};
  custom.sa_handler = IgnoreTheSignal;
  struct sigaction saved_interrupt {};
  sigaction(SIGINT, &custom, &saved_interrupt);
  {
    absl::StatusOr<std::unique_ptr<InterruptSignals>> signals = InterruptSignals::Install();
    ASSERT_TRUE(signals.ok()) << signals.status();
    EXPECT_NE(HandlerOf(SIGINT), IgnoreTheSignal);
    absl::StatusOr<std::unique_ptr<InterruptSignals>> second = InterruptSignals::Install();
    EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  }
  EXPECT_EQ(HandlerOf(SIGINT), IgnoreTheSignal);
  absl::StatusOr<std::unique_ptr<InterruptSignals>> again = InterruptSignals::Install();
  EXPECT_TRUE(again.ok()) << again.status();
  again->reset();
  sigaction(SIGINT, &saved_interrupt, nullptr);
}

TEST(InterruptSignalsTest, AnIgnoredSignalStaysIgnored) {
  // A command started in the background of a script ignores SIGINT: so does loomctl then.
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  struct sigaction saved_interrupt {};
  sigaction(SIGINT, &ignore, &saved_interrupt);
  {
    absl::StatusOr<std::unique_ptr<InterruptSignals>> signals = InterruptSignals::Install();
    ASSERT_TRUE(signals.ok()) << signals.status();
    EXPECT_EQ(HandlerOf(SIGINT), SIG_IGN);
    EXPECT_NE(HandlerOf(SIGTERM), SIG_IGN);
    raise(SIGINT);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_EQ((*signals)->received(), 0);
  }
  EXPECT_EQ(HandlerOf(SIGINT), SIG_IGN);
  sigaction(SIGINT, &saved_interrupt, nullptr);
}

}  // namespace
}  // namespace loom::loomctl
