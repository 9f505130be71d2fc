#ifndef LOOM_TRANSPORT_UCX_ENDPOINT_H_
#define LOOM_TRANSPORT_UCX_ENDPOINT_H_

// UcxEndpoint: the owner of a UCX endpoint (ucp_ep_h), the connection from a worker to a peer's
// worker, with peer-failure error handling and a forced or flushed close. The Transport keeps one
// per peer.

#include <ucp/api/ucp.h>

#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "transport/ucx_worker.h"

namespace loom::transport {

// Owns a ucp_ep_h: the connection from a worker to a peer's worker, created from the peer's
// address bytes (UcxWorker::address() on the peer).
//
// Error handling mode UCP_ERR_HANDLING_MODE_PEER: a peer that dies or becomes unreachable is
// reported to `error_callback` (on the worker's progress thread) and the operations pending on the
// endpoint complete with an error, instead of hanging. The price on UCX 1.13: transports that
// cannot detect a peer's failure are excluded, shared memory among them, so two processes on one
// host talk over TCP loopback. A training runtime needs failure detection more than intra-host
// latency (intra-node traffic stays in process, or in NCCL for GPUs).
class UcxEndpoint {
 public:
  // `worker` must outlive the endpoint; `error_callback` is called with `error_argument`, at most
  // until Close() starts.
  static absl::StatusOr<std::unique_ptr<UcxEndpoint>> Create(UcxWorker& worker,
                                                             absl::string_view peer_address,
                                                             ucp_err_handler_cb_t error_callback,
                                                             void* error_argument);

  // Closes the endpoint if Close() was not called: forcibly, progressing the worker for at most a
  // second (call only from the worker's thread).
  ~UcxEndpoint();
  UcxEndpoint(const UcxEndpoint&) = delete;
  UcxEndpoint& operator=(const UcxEndpoint&) = delete;

  ucp_ep_h handle() const { return endpoint_; }

  // Starts closing. `force`: pending operations complete at once with an error and the peer is
  // not told (required after an error was reported); otherwise the pending operations are
  // flushed first. Progress the worker until IsClosed().
  void Close(bool force);
  bool IsClosed();

 private:
  UcxEndpoint(UcxWorker& worker, ucp_ep_h endpoint) : worker_(worker), endpoint_(endpoint) {}

  UcxWorker& worker_;
  ucp_ep_h endpoint_;
  bool close_started_ = false;
  void* close_request_ = nullptr;  // in flight while non-null
};

}  // namespace loom::transport

#endif  // LOOM_TRANSPORT_UCX_ENDPOINT_H_
