#include "tools/loomctl/interrupt_signals.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace loom::loomctl {
namespace {

constexpr std::array<int, 2> kSignals = {SIGINT, SIGTERM};

// What the handler reads. Written by Install and the destructor only, one InterruptSignals at a
// time (`installed`).
std::atomic<bool> installed{false};
std::atomic<int> handler_write_descriptor{-1};
std::atomic<int> received_signal{0};
// Handlers between reading handler_write_descriptor and their write (on any thread): the
// destructor closes the pipe only once none is, so that a handler never writes to a closed
// descriptor, or to one that another file reused.
std::atomic<int> handlers_running{0};
// The dispositions to restore, per kSignals entry; `handled` is false for a signal left alone
// (one this process ignores, such as SIGINT for a command started in the background).
std::array<struct sigaction, kSignals.size()> previous_actions;
std::array<bool, kSignals.size()> handled = {false, false};

// Async-signal-safe only: atomics, write, sigaction, raise.
void OnSignal(int signal) {
  const int saved_errno = errno;
  int none = 0;
  if (received_signal.compare_exchange_strong(none, signal)) {
    handlers_running.fetch_add(1);
    const unsigned char byte = static_cast<unsigned char>(signal);
    const int descriptor = handler_write_descriptor.load();
    if (descriptor >= 0) (void)!write(descriptor, &byte, 1);
    handlers_running.fetch_sub(1);
  } else {
    // The second signal: as if loomctl had not caught it.
    for (size_t i = 0; i < kSignals.size(); ++i) {
      if (kSignals[i] == signal) sigaction(signal, &previous_actions[i], nullptr);
    }
    raise(signal);
  }
  errno = saved_errno;
}

}  // namespace

absl::StatusOr<std::unique_ptr<InterruptSignals>> InterruptSignals::Install(
    std::function<void()> on_signal) {
  if (installed.exchange(true)) {
    return absl::FailedPreconditionError("signals are already handled by another waiter");
  }
  int descriptors[2];
  if (pipe2(descriptors, O_CLOEXEC) != 0) {
    installed = false;
    return absl::InternalError(
        absl::StrCat("cannot make a pipe for signals: ", std::strerror(errno)));
  }
  received_signal = 0;
  handler_write_descriptor = descriptors[1];
  std::unique_ptr<InterruptSignals> signals(
      new InterruptSignals(descriptors[0], descriptors[1], std::move(on_signal)));
  struct sigaction action {};
  action.sa_handler = OnSignal;
  action.sa_flags = SA_RESTART;
  sigemptyset(&action.sa_mask);
  for (size_t i = 0; i < kSignals.size(); ++i) {
    sigaction(kSignals[i], nullptr, &previous_actions[i]);
    handled[i] = previous_actions[i].sa_handler != SIG_IGN;
    if (handled[i]) sigaction(kSignals[i], &action, nullptr);
  }
  return signals;
}

InterruptSignals::InterruptSignals(int read_descriptor, int write_descriptor,
                                   std::function<void()> on_signal)
    : read_descriptor_(read_descriptor),
      write_descriptor_(write_descriptor),
      on_signal_(std::move(on_signal)),
      listener_([this] { Listen(); }) {}

InterruptSignals::~InterruptSignals() {
  for (size_t i = 0; i < kSignals.size(); ++i) {
    if (handled[i]) sigaction(kSignals[i], &previous_actions[i], nullptr);
  }
  // A handler that read the descriptor before this store counted itself first: wait for it. One
  // that comes later reads -1 and writes nothing.
  handler_write_descriptor = -1;
  while (handlers_running.load() != 0) std::this_thread::yield();
  const unsigned char stop = 0;
  while (write(write_descriptor_, &stop, 1) < 0 && errno == EINTR) {
  }
  listener_.join();
  close(read_descriptor_);
  close(write_descriptor_);
  installed = false;
}

void InterruptSignals::Listen() {
  while (true) {
    unsigned char byte = 0;
    const ssize_t got = read(read_descriptor_, &byte, 1);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0 || byte == 0) return;
    if (on_signal_) on_signal_();
  }
}

int InterruptSignals::received() const { return received_signal.load(); }

int ExitCodeOfSignal(int signal) { return 128 + signal; }

std::string SignalName(int signal) {
  const char* abbreviation = sigabbrev_np(signal);
  return abbreviation == nullptr ? absl::StrCat("signal ", signal)
                                 : absl::StrCat("SIG", abbreviation);
}

}  // namespace loom::loomctl
