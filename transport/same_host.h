#ifndef LOOM_TRANSPORT_SAME_HOST_H_
#define LOOM_TRANSPORT_SAME_HOST_H_

// What same-host copies need to know of the processes: ProcessIdentity (what a Transport publishes
// so that a peer can tell it shares the host and may read its memory), the transport address that
// carries it with UCX's worker address (EncodeAddress, DecodeAddress), whether UCX's transport list
// allows such copies, and ProcessReader, which reads another process's memory (process_vm_readv).

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace loom::transport {

// Same-host copies: a receiver on the same host reads a sender's buffer straight out of the
// sender's address space with Linux's cross memory attach (process_vm_readv, what UCX calls `cma`),
// one copy by the kernel, instead of the bytes going through TCP loopback (two kernel copies and
// UCX's own). UCX 1.13 offers neither shared memory nor CMA to endpoints with error handling
// (transport/README.md); Loom's endpoints keep error handling and carry the control messages, so a
// killed peer is still reported as before, while the data take this path.

// What a Transport publishes about its process next to its UCX worker address, so that a peer can
// tell whether it runs on the same host and may read this process's memory.
struct ProcessIdentity {
  // The kernel's boot id and the pid namespace: equal on both sides when process ids mean the
  // same process to both. Empty when they could not be read (then never "same host").
  std::string host;
  pid_t pid = 0;
  // A word in the publishing process holding `probe_value`: a peer that can read it back through
  // process_vm_readv has the permission (same user, ptrace policy, seccomp) the copies need.
  uint64_t probe_address = 0;
  uint64_t probe_value = 0;
  // The descriptors of the process's same-host mailbox (transport/same_host_mailbox.h) and of the
  // eventfd that wakes it, which a peer that passed the probe may duplicate; -1 when it has none.
  int32_t mailbox_descriptor = -1;
  int32_t wake_descriptor = -1;
};

// This process's identity with a probe word at `probe` (which must outlive every peer's use) and
// no mailbox.
ProcessIdentity IdentifyThisProcess(const uint64_t* probe);

// A transport address: the identity, then UCX's worker address bytes.
std::string EncodeAddress(const ProcessIdentity& identity, absl::string_view worker_address);
struct DecodedAddress {
  ProcessIdentity identity;
  std::string worker_address;
};
// InvalidArgument when `address` is not one EncodeAddress wrote.
absl::StatusOr<DecodedAddress> DecodeAddress(absl::string_view address);

// Whether UCX's transport list (the effective UCX_TLS, e.g. "all", "tcp,self", "^sm") allows
// same-host copies: when it names `cma` or an alias that includes it (`sm`, `shm`, `all`), or
// excludes others with `^` without excluding those.
bool TransportListAllowsSameHostCopies(absl::string_view transports);

// Reads another process's memory. Holds a pidfd, so that a read is known to have come from the
// process that was probed and not from a later one that reused its process id.
class ProcessReader {
 public:
  // Probes `identity` (a different host, a process that is gone, no permission, or a probe word
  // that does not hold its value are errors saying which).
  static absl::StatusOr<std::unique_ptr<ProcessReader>> Open(const ProcessIdentity& identity,
                                                             const ProcessIdentity& self);
  ~ProcessReader();
  ProcessReader(const ProcessReader&) = delete;
  ProcessReader& operator=(const ProcessReader&) = delete;

  // Copies `size` bytes at `address` in the process into `destination`. Unavailable when the
  // process exited before the copy was complete.
  absl::Status Read(uint64_t address, void* destination, size_t size) const;

  // A duplicate, in this process, of the process's open descriptor `descriptor` (pidfd_getfd,
  // which needs the permission the probe proved, and Linux 5.6). The caller owns it.
  absl::StatusOr<int> DuplicateDescriptor(int descriptor) const;

 private:
  ProcessReader(pid_t pid, int pidfd) : pid_(pid), pidfd_(pidfd) {}
  bool Exited() const;

  const pid_t pid_;
  const int pidfd_;
};

}  // namespace loom::transport

#endif  // LOOM_TRANSPORT_SAME_HOST_H_
