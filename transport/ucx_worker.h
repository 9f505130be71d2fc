#ifndef LOOM_TRANSPORT_UCX_WORKER_H_
#define LOOM_TRANSPORT_UCX_WORKER_H_

// UcxWorker: the owner of a UCX worker (ucp_worker_h), a Transport's progress engine: its address
// for peers, Progress, and the event file descriptor a thread sleeps on. One per Transport; threads
// take turns on it through the Transport's worker token.

#include <ucp/api/ucp.h>

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "transport/ucx_context.h"

namespace loom::transport {

// Owns a ucp_worker_h: the progress engine that owns the network resources and completes
// operations. Created in UCS_THREAD_MODE_SERIALIZED: several threads may call into it, one at a
// time (the Transport's worker token orders them).
class UcxWorker {
 public:
  // `context` must outlive the worker.
  static absl::StatusOr<std::unique_ptr<UcxWorker>> Create(UcxContext& context);

  ~UcxWorker();
  UcxWorker(const UcxWorker&) = delete;
  UcxWorker& operator=(const UcxWorker&) = delete;

  ucp_worker_h handle() const { return worker_; }

  // The worker's address, as opaque bytes another worker connects to (exchanged through the
  // coordinator in a cluster). Captured once at creation.
  const std::string& address() const { return address_; }

  // Makes progress on every pending operation; callbacks run inside. Returns whether anything
  // happened (call again while it returns true).
  bool Progress();

  // The file descriptor that becomes readable when the worker has events (UCP_FEATURE_WAKEUP).
  int event_fd() const { return event_fd_; }

  // Arms the event file descriptor before sleeping on it. Returns false when events are already
  // pending (UCS_ERR_BUSY): progress again instead of sleeping.
  absl::StatusOr<bool> Arm();

 private:
  UcxWorker(ucp_worker_h worker, std::string address, int event_fd)
      : worker_(worker), address_(std::move(address)), event_fd_(event_fd) {}

  ucp_worker_h worker_;
  std::string address_;
  int event_fd_;
};

}  // namespace loom::transport

#endif  // LOOM_TRANSPORT_UCX_WORKER_H_
