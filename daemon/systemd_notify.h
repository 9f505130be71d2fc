#ifndef LOOM_DAEMON_SYSTEMD_NOTIFY_H_
#define LOOM_DAEMON_SYSTEMD_NOTIFY_H_

// SystemdNotifier: loomd's notifications to systemd through sd_notify (READY=1, WATCHDOG=1 pings
// from a thread of its own, STOPPING=1), no-ops outside systemd. main.cc uses it; it is the
// library loom_systemd_notify, which only the binary and its test link.

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace loom::daemon {

// Tells systemd how loomd is doing, through libsystemd's sd_notify (a unit with Type=notify and
// WatchdogSec=, see deploy/systemd/loomd.service): READY=1 once the server serves, WATCHDOG=1 at
// half the unit's watchdog interval while it runs, STOPPING=1 when the shutdown starts.
//
// Outside systemd every call is a no-op: systemd's protocol passes the notification socket in
// NOTIFY_SOCKET and the watchdog interval in WATCHDOG_USEC / WATCHDOG_PID, which it sets only for
// the service's main process. Loom itself reads no environment variable for this.
//
//   SystemdNotifier systemd;
//   ... serve ...
//   systemd.Ready("serving on 0.0.0.0:7070");
//   systemd.StartWatchdog();
//   ... wait for SIGTERM ...
//   systemd.Stopping();
//
// Not thread-safe: call it from one thread (main's). The watchdog thread stops in StopWatchdog or
// the destructor.
class SystemdNotifier {
 public:
  SystemdNotifier() = default;
  ~SystemdNotifier();
  SystemdNotifier(const SystemdNotifier&) = delete;
  SystemdNotifier& operator=(const SystemdNotifier&) = delete;

  // Whether the process runs under a systemd that listens (NOTIFY_SOCKET is set).
  static bool Enabled();

  // READY=1 with STATUS=`status` (shown by systemctl status). OK outside systemd; UNAVAILABLE when
  // the notification cannot be sent.
  absl::Status Ready(absl::string_view status);
  // STOPPING=1 with a STATUS line.
  absl::Status Stopping();
  // STATUS=`status` alone (e.g. that the node is unhealthy, and again once it is not).
  absl::Status SetStatus(absl::string_view status);

  // Starts a thread that sends WATCHDOG=1 every half of the unit's watchdog interval, when
  // systemd enabled the watchdog for this process; otherwise does nothing. Idempotent.
  void StartWatchdog();
  // Stops that thread (no more pings). Idempotent.
  void StopWatchdog();
  // The interval between pings (zero when the watchdog thread does not run).
  std::chrono::microseconds watchdog_period() const { return watchdog_period_; }

 private:
  void WatchdogLoop();

  std::chrono::microseconds watchdog_period_{0};
  std::thread watchdog_thread_;
  std::mutex mutex_;
  std::condition_variable stop_requested_;
  bool stopping_ = false;  // guarded by mutex_
};

}  // namespace loom::daemon

#endif  // LOOM_DAEMON_SYSTEMD_NOTIFY_H_
