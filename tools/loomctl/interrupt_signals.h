#ifndef LOOM_TOOLS_LOOMCTL_INTERRUPT_SIGNALS_H_
#define LOOM_TOOLS_LOOMCTL_INTERRUPT_SIGNALS_H_

// SIGINT and SIGTERM during a long loomctl wait: while an InterruptSignals lives, the first such
// signal calls a handler so that the wait (a watch, `cluster up`) ends cleanly, and a second ends
// loomctl. Also the exit code and the name of a signal (ExitCodeOfSignal, SignalName).

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"

namespace loom::loomctl {

// While an InterruptSignals lives, SIGINT (Ctrl-C) and SIGTERM do not end loomctl at once: the
// first one is recorded and calls `on_signal` on a thread of its own, so that a long wait
// (following a job, starting a local cluster) can end cleanly and say what it leaves behind. A
// second one ends loomctl as the signal would have (for a person who does not want to wait for
// that). The destructor restores the signals' previous handling.
//
// A signal handler can only reach process-wide state, so one InterruptSignals may live at a time:
// Install returns FAILED_PRECONDITION while another does.
class InterruptSignals {
 public:
  static absl::StatusOr<std::unique_ptr<InterruptSignals>> Install(
      std::function<void()> on_signal = {});
  ~InterruptSignals();
  InterruptSignals(const InterruptSignals&) = delete;
  InterruptSignals& operator=(const InterruptSignals&) = delete;

  // The signal that came (SIGINT or SIGTERM), or 0 while none did.
  int received() const;

 private:
  InterruptSignals(int read_descriptor, int write_descriptor, std::function<void()> on_signal);
  // On listener_: calls on_signal_ when the handler reports a signal, returns on a 0 byte.
  void Listen();

  // A pipe: the handler writes the signal's number into it (write() is async-signal-safe).
  const int read_descriptor_;
  const int write_descriptor_;
  const std::function<void()> on_signal_;
  std::thread listener_;
};

// 128 + `signal`: the exit status a shell gives a command that signal ended.
int ExitCodeOfSignal(int signal);
// "SIGINT", "SIGTERM".
std::string SignalName(int signal);

}  // namespace loom::loomctl

#endif  // LOOM_TOOLS_LOOMCTL_INTERRUPT_SIGNALS_H_
