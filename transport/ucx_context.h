#ifndef LOOM_TRANSPORT_UCX_CONTEXT_H_
#define LOOM_TRANSPORT_UCX_CONTEXT_H_

// UcxContext: the owner of a UCX context (ucp_context_h), created with the features the Transport
// uses (active messages, tag messages, wake-up), and UcxContextOptions, the UCX configuration
// overrides a daemon's config passes in.

#include <ucp/api/ucp.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace loom::transport {

struct UcxContextOptions {
  // UCX configuration overrides applied with ucp_config_modify, e.g. {"TLS", "tcp,self"}: names
  // without the "UCX_" prefix. This is how a daemon's config selects transports; UCX itself still
  // reads its UCX_* environment variables (ucp_config_read), Loom code never does. A bad value is
  // an error; UCX 1.13 silently ignores an unknown name.
  std::vector<std::pair<std::string, std::string>> configuration;
};

// Owns a ucp_context_h (UCX's per-process state: the transports found and the memory domains).
//
// Features, chosen once here because a context cannot gain features later:
//  - UCP_FEATURE_AM: small actor messages (READY/FREE/commands) as active messages, delivered to a
//    handler without a receive posted in advance;
//  - UCP_FEATURE_TAG: register data (tensor slots) as tag messages into a receive buffer the
//    receive actor owns, so a transfer lands in place, rendezvous (zero copy) for large ones;
//  - UCP_FEATURE_WAKEUP: the progress thread sleeps on the worker's event file descriptor instead
//    of busy polling, which on a 2-core machine would steal a core from the stream threads.
// RMA (get with keys exchanged at launch) is not enabled yet: tag messages need no memory
// registration or key exchange and already move large buffers without copies.
class UcxContext {
 public:
  static absl::StatusOr<std::unique_ptr<UcxContext>> Create(const UcxContextOptions& options);

  ~UcxContext();
  UcxContext(const UcxContext&) = delete;
  UcxContext& operator=(const UcxContext&) = delete;

  ucp_context_h handle() const { return context_; }
  // The transports UCX was allowed to use (UCX_TLS after the environment and the overrides, e.g.
  // "all" or "tcp,self"); empty if it could not be read.
  const std::string& transports() const { return transports_; }

 private:
  UcxContext(ucp_context_h context, std::string transports)
      : context_(context), transports_(std::move(transports)) {}

  ucp_context_h context_;
  const std::string transports_;
};

}  // namespace loom::transport

#endif  // LOOM_TRANSPORT_UCX_CONTEXT_H_
