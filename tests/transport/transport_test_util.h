#ifndef LOOM_TESTS_TRANSPORT_TRANSPORT_TEST_UTIL_H_
#define LOOM_TESTS_TRANSPORT_TRANSPORT_TEST_UTIL_H_

#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "transport/transport.h"

namespace loom::transport::testing {

// Makes UCX use TCP (and `self` for a worker talking to itself), whatever the machine offers.
// Tests only: production code passes UcxContextOptions::configuration and never touches the
// environment. Must run before the first context is created; UCX reads UCX_TLS in ucp_config_read.
inline void UseTcpTransports() { setenv("UCX_TLS", "tcp,self", /*overwrite=*/1); }

// Collects what a Transport delivers (messages and peer errors) and waits for it with deadlines.
class Inbox {
 public:
  void AddMessage(PeerId from, absl::string_view bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    messages_.emplace_back(from, std::string(bytes));
    changed_.notify_all();
  }
  void AddError(PeerId peer, const absl::Status& status) {
    std::lock_guard<std::mutex> lock(mutex_);
    errors_.emplace_back(peer, status);
    changed_.notify_all();
  }
  // Returns whether at least `count` messages arrived within `deadline`.
  bool WaitForMessages(size_t count, absl::Duration deadline) {
    std::unique_lock<std::mutex> lock(mutex_);
    return changed_.wait_for(lock, absl::ToChronoMilliseconds(deadline),
                             [&] { return messages_.size() >= count; });
  }
  bool WaitForErrors(size_t count, absl::Duration deadline) {
    std::unique_lock<std::mutex> lock(mutex_);
    return changed_.wait_for(lock, absl::ToChronoMilliseconds(deadline),
                             [&] { return errors_.size() >= count; });
  }
  std::vector<std::pair<PeerId, std::string>> messages() {
    std::lock_guard<std::mutex> lock(mutex_);
    return messages_;
  }
  std::vector<std::pair<PeerId, absl::Status>> errors() {
    std::lock_guard<std::mutex> lock(mutex_);
    return errors_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<std::pair<PeerId, std::string>> messages_;
  std::vector<std::pair<PeerId, absl::Status>> errors_;
};

// UCX's transport lists of the two data paths: TCP only, and TCP with same-host copies (`cma`).
inline constexpr char kTcpOnly[] = "tcp,self";
inline constexpr char kTcpAndSameHostCopies[] = "tcp,self,cma";

// A transport whose UCX context uses `transports` (UCX_TLS) when given. Same-host copies, when the
// transports allow them, take every transfer however small (`copy_min_bytes`), so that the tests
// of small transfers exercise them too.
inline absl::StatusOr<std::unique_ptr<Transport>> MakeTransport(
    PeerId self, Inbox* inbox, std::string transports = "", size_t copy_min_bytes = 0,
    absl::Duration park_timeout = TransportOptions().park_timeout) {
  TransportOptions options;
  options.self = self;
  options.same_host_copy_min_bytes = copy_min_bytes;
  options.park_timeout = park_timeout;
  if (!transports.empty()) options.context.configuration = {{"TLS", transports}};
  options.on_message = [inbox](PeerId from, absl::string_view bytes) {
    inbox->AddMessage(from, bytes);
  };
  options.on_peer_error = [inbox](PeerId peer, const absl::Status& status) {
    inbox->AddError(peer, status);
  };
  return Transport::Create(std::move(options));
}

// Runs `probe(parent)` in a forked child: OK when it returned true, PermissionDenied when it
// returned false, Internal when the probe could not run (fork or wait failed, or the child was
// killed). The child makes no call but `probe`'s system calls and _exit, so forking with threads
// running is safe.
inline absl::Status RunChildProbe(bool (*probe)(pid_t parent)) {
  const pid_t parent = getpid();
  const pid_t child = fork();
  if (child < 0) return absl::InternalError(absl::StrCat("fork: ", strerror(errno)));
  if (child == 0) _exit(probe(parent) ? 0 : 1);
  int status = 0;
  if (waitpid(child, &status, 0) != child) {
    return absl::InternalError(absl::StrCat("waitpid: ", strerror(errno)));
  }
  if (!WIFEXITED(status)) return absl::InternalError("the probe's child was killed");
  return WEXITSTATUS(status) == 0 ? absl::OkStatus() : absl::PermissionDeniedError("refused");
}

// Why a probe of `what` found it unavailable, `refusal` where the kernel refused it; "" when it
// is available.
inline std::string ProbeUnavailableReason(const absl::Status& probed, absl::string_view what,
                                          absl::string_view refusal) {
  if (probed.ok()) return "";
  if (probed.code() == absl::StatusCode::kPermissionDenied) return std::string(refusal);
  return absl::StrCat("could not probe for ", what, " on this machine: ", probed.message());
}

// Why same-host copies cannot work on this machine, or "" when they can: a forked child reads a
// word of this process with process_vm_readv, as a receiver reads its sender (a child reading
// its parent is what the process tests need, and the strictest case: Yama's ptrace_scope 1 allows
// only the opposite direction; seccomp may forbid the call altogether).
inline std::string SameHostCopiesUnavailableReason() {
  static const uint64_t word = 0x5ca1ab1e5ca1ab1eull;
  const absl::Status probed = RunChildProbe([](pid_t parent) {
    uint64_t copy = 0;
    iovec local{&copy, sizeof(copy)};
    iovec remote{const_cast<uint64_t*>(&word), sizeof(word)};
    ssize_t read = process_vm_readv(parent, &local, 1, &remote, 1, 0);
    return read == static_cast<ssize_t>(sizeof(copy)) && copy == word;
  });
  return ProbeUnavailableReason(
      probed, "same-host copies",
      "this kernel does not let a process read its parent's memory with process_vm_readv "
      "(ptrace policy or seccomp), so Loom's same-host copies fall back to UCX here");
}

// Why a child could not take a descriptor of its parent with pidfd_getfd (how same-host peers
// reach each other's mailbox: transport/same_host_mailbox.h), or "" when it can.
inline std::string MailboxUnavailableReason() {
  const absl::Status probed = RunChildProbe([](pid_t parent) {
    const int pidfd = static_cast<int>(syscall(SYS_pidfd_open, parent, 0));
    return pidfd >= 0 && syscall(SYS_pidfd_getfd, pidfd, /*targetfd=*/0, 0) >= 0;
  });
  return ProbeUnavailableReason(
      probed, "same-host mailboxes",
      "this kernel does not let a process take its parent's descriptors with pidfd_getfd, so "
      "same-host copy messages go through UCX here");
}

// Waits until `transport` sends its data to `peer` by same-host copy (the peer's announcement that
// it can read this process arrived).
inline bool WaitForSameHostCopies(const Transport& transport, PeerId peer,
                                  absl::Duration deadline) {
  absl::Time end = absl::Now() + deadline;
  while (!transport.CopiesDirectlyTo(peer)) {
    if (absl::Now() > end) return false;
    absl::SleepFor(absl::Milliseconds(1));
  }
  return true;
}

// A one-shot result set from a callback, waited for with a deadline.
template <typename T>
class Completion {
 public:
  void Set(T value) {
    std::lock_guard<std::mutex> lock(mutex_);
    value_ = std::move(value);
    done_ = true;
    changed_.notify_all();
  }
  bool done() {
    std::lock_guard<std::mutex> lock(mutex_);
    return done_;
  }
  // The value, or nullopt when it was not set within `deadline`. (Not a StatusOr: for T =
  // absl::Status a timeout would become a value, and a test asserting completion could not fail.)
  std::optional<T> Wait(absl::Duration deadline) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!changed_.wait_for(lock, absl::ToChronoMilliseconds(deadline), [&] { return done_; })) {
      return std::nullopt;
    }
    return value_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  bool done_ = false;
  T value_{};
};

// A byte pattern that differs between offsets and seeds, to check transfers byte for byte.
inline unsigned char PatternByte(size_t offset, unsigned seed) {
  uint64_t x = (offset + 1) * 0x9E3779B97F4A7C15ull + seed;
  return static_cast<unsigned char>((x >> 29) ^ (x >> 47));
}

}  // namespace loom::transport::testing

#endif  // LOOM_TESTS_TRANSPORT_TRANSPORT_TEST_UTIL_H_
