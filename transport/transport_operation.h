#ifndef LOOM_TRANSPORT_TRANSPORT_OPERATION_H_
#define LOOM_TRANSPORT_TRANSPORT_OPERATION_H_

// The Transport's private pieces that its sources share (transport.cc, same_host_copies.cc): an
// operation (an actor or copy message, a data send, a receive) with its UCX request, a connected
// peer, and the header and ids of the active messages. Private to the Transport: included by its
// sources only.

#include <cstddef>
#include <memory>
#include <optional>
#include <string>

#include "transport/same_host.h"
#include "transport/same_host_copies.h"
#include "transport/same_host_mailbox.h"
#include "transport/transport.h"
#include "transport/ucx_endpoint.h"

namespace loom::transport {

// The active message ids of actor messages and of same-host copy messages; every message carries
// its sender in the header.
inline constexpr unsigned kActorMessageId = 1;
inline constexpr unsigned kCopyMessageId = 2;

struct MessageHeader {
  PeerId sender;
};

struct Transport::Peer {
  Transport* transport;
  PeerId id;
  std::unique_ptr<UcxEndpoint> endpoint;
  bool failed = false;
  std::unique_ptr<ProcessReader> reader;   // set when this process can read the peer's memory
  std::unique_ptr<MailboxSender> mailbox;  // set when this process can post to the peer's mailbox
};

struct Transport::Operation {
  enum class Kind { kMessage, kSendData, kReceiveData };
  Kind kind;
  PeerId peer = 0;  // not for kReceiveData
  DataTag tag = 0;
  const void* send_buffer = nullptr;
  void* receive_buffer = nullptr;
  size_t size = 0;
  MessageHeader header{};
  bool driven = false;  // queued kDeferred
  unsigned message_id = kActorMessageId;
  std::string message;
  SendCallback send_callback;
  ReceiveCallback receive_callback;
  Transport* transport = nullptr;
  void* request = nullptr;
  // A receive's callback can run inside ucp_tag_recv_nbx (UCP_OP_ATTR_FLAG_NO_IMM_CMPL); while the
  // call is in progress the completion is only recorded, and handled when the call returns.
  bool starting = false;
  bool completed_while_starting = false;
  ucs_status_t early_status = UCS_OK;
  size_t early_length = 0;
  // A posted receive whose sender announced a same-host copy (or sent its data inline): cancelled
  // in UCX, then copied.
  std::optional<SameHostCopies::ReceivedCopyMessage> copy_from;
};

}  // namespace loom::transport

#endif  // LOOM_TRANSPORT_TRANSPORT_OPERATION_H_
