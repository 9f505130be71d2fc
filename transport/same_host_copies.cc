#include "transport/same_host_copies.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <optional>
#include <random>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/cpu_affinity.h"
#include "core/format_bytes.h"
#include "glog/logging.h"
#include "transport/transport_operation.h"

namespace loom::transport {
namespace {

ProcessIdentity IdentifyWithMailbox(const uint64_t* probe, const Mailbox* mailbox) {
  ProcessIdentity identity = IdentifyThisProcess(probe);
  if (mailbox != nullptr) {
    identity.mailbox_descriptor = mailbox->descriptor();
    identity.wake_descriptor = mailbox->wake_descriptor();
  }
  return identity;
}

// The CPUs this process may run on; failing that (never seen), the host's.
std::vector<int> ThisProcessCpus() {
  absl::StatusOr<std::vector<int>> cpus = AllowedCpus(0);
  if (cpus.ok()) return *std::move(cpus);
  LOG(WARNING) << cpus.status() << "; counting the host's CPUs";
  std::vector<int> host(std::max<long>(sysconf(_SC_NPROCESSORS_ONLN), 1));
  std::iota(host.begin(), host.end(), 0);
  return host;
}

}  // namespace

Transport::SameHostCopies::SameHostCopies(Transport& transport, std::unique_ptr<Mailbox> mailbox,
                                          bool enabled)
    : transport_(transport),
      self_(transport.self_),
      probe_word_(std::make_unique<uint64_t>(std::random_device()() * 0x100000001ull + 1)),
      mailbox_(std::move(mailbox)),
      identity_(IdentifyWithMailbox(probe_word_.get(), mailbox_.get())),
      enabled_(enabled),
      cpus_(ThisProcessCpus()),
      processes_have_a_cpu_each_(cpus_.HaveACpuEach()) {}

Transport::SameHostCopies::~SameHostCopies() = default;

bool Transport::SameHostCopies::CopiesDirectlyTo(PeerId peer) const {
  std::lock_guard<std::mutex> lock(readers_mutex_);
  return enabled_ && readers_.contains(peer);
}

bool Transport::SameHostCopies::PostsToMailboxOf(PeerId peer) const {
  std::lock_guard<std::mutex> lock(readers_mutex_);
  return mailbox_peers_.contains(peer);
}

void Transport::SameHostCopies::ProbeSameHost(Peer& peer, const ProcessIdentity& identity) {
  absl::StatusOr<std::unique_ptr<ProcessReader>> reader = ProcessReader::Open(identity, identity_);
  if (!reader.ok()) {
    // Another host is the normal case; on this host it means no permission (ptrace policy,
    // seccomp, another user): worth a line, since those data then take TCP loopback.
    if (!identity.host.empty() && identity.host == identity_.host) {
      LOG(INFO) << "node " << self_ << ": peer " << peer.id
                << " runs on this host but its memory cannot be read (" << reader.status()
                << "); its data go through UCX";
    }
    return;
  }
  peer.reader = *std::move(reader);
  if (peer.id != self_) {
    absl::StatusOr<std::vector<int>> cpus = AllowedCpus(identity.pid);
    if (!cpus.ok()) {
      LOG(INFO) << "node " << self_ << ": peer " << peer.id << ": " << cpus.status()
                << "; counted as a process without CPUs of its own";
    }
    cpus_.AddPeer(cpus.ok() ? *cpus : std::vector<int>());
    if (ProcessesHaveACpuEach() && !cpus_.HaveACpuEach()) {
      LOG(INFO) << "node " << self_ << ": the " << cpus_.processes()
                << " processes of this job on this host cannot each have a CPU of its own (they "
                   "may run on "
                << cpus_.cpus()
                << " together); a thread waiting for transfers yields its CPU between polls";
    }
    processes_have_a_cpu_each_.store(cpus_.HaveACpuEach(), std::memory_order_relaxed);
  }
  absl::StatusOr<std::unique_ptr<MailboxSender>> mailbox =
      MailboxSender::Open(*peer.reader, identity, self_);
  if (mailbox.ok()) {
    peer.mailbox = *std::move(mailbox);
    std::lock_guard<std::mutex> lock(readers_mutex_);
    mailbox_peers_.insert(peer.id);
  } else {
    LOG(INFO) << "node " << self_ << ": same-host copy messages to peer " << peer.id
              << " go through UCX: " << mailbox.status();
  }
  CopyMessage can_read;
  can_read.kind = CopyMessage::kCanRead;
  SendCopyMessage(peer.id, can_read);
}

void Transport::SameHostCopies::SendCopyMessage(PeerId peer, const CopyMessage& message,
                                                absl::string_view error) {
  // Through the peer's mailbox when it fits there (an error text does not: it goes with UCX);
  // messages of either path are independent of each other, so they may take both.
  if (error.empty()) {
    auto found = transport_.peers_.find(peer);
    if (found != transport_.peers_.end() && found->second->mailbox != nullptr &&
        !found->second->failed &&
        found->second->mailbox->Post(
            absl::string_view(reinterpret_cast<const char*>(&message), sizeof(message)),
            ReaderOf(message))) {
      return;
    }
  }
  auto operation = std::make_unique<Operation>();
  operation->kind = Operation::Kind::kMessage;
  operation->peer = peer;
  operation->header.sender = self_;
  operation->message_id = kCopyMessageId;
  operation->message.assign(reinterpret_cast<const char*>(&message), sizeof(message));
  absl::StrAppend(&operation->message, error.substr(0, kMaxMessageBytes - sizeof(message)));
  transport_.StartOperation(std::move(operation));
}

Mailbox::Reader Transport::SameHostCopies::ReaderOf(const CopyMessage& message) {
  return (message.flags & CopyMessage::kDriven) != 0 ? Mailbox::Reader::kDriver
                                                     : Mailbox::Reader::kAnyThread;
}

void Transport::SameHostCopies::SendCopyDone(PeerId peer, const CopyMessage& announcement,
                                             const absl::Status& status) {
  CopyMessage done;
  done.kind = CopyMessage::kDone;
  done.flags = announcement.flags & CopyMessage::kDriven;
  done.tag = announcement.tag;
  done.status_code = static_cast<uint32_t>(status.code());
  SendCopyMessage(peer, done, status.message());
}

ucs_status_t Transport::SameHostCopies::OnCopyMessage(void* argument, const void* header,
                                                      size_t header_length, void* data,
                                                      size_t length,
                                                      const ucp_am_recv_param_t* param) {
  auto* copies = static_cast<SameHostCopies*>(argument);
  if (header_length != sizeof(MessageHeader) || length < sizeof(CopyMessage) ||
      (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0) {
    LOG(ERROR) << "node " << copies->self_ << ": dropped a malformed same-host copy message ("
               << header_length << "-byte header, " << length << " bytes)";
    return UCS_OK;
  }
  if (copies->transport_.shutting_down_) return UCS_OK;
  ReceivedCopyMessage received;
  MessageHeader message_header;
  std::memcpy(&message_header, header, sizeof(message_header));
  received.from = message_header.sender;
  std::memcpy(&received.message, data, sizeof(received.message));
  received.trailer.assign(static_cast<const char*>(data) + sizeof(CopyMessage),
                          length - sizeof(CopyMessage));
  // Handled after the progress call: the handling posts sends and cancels requests, which UCX
  // callbacks should not.
  copies->copy_inbox_.push_back(std::move(received));
  return UCS_OK;
}

void Transport::SameHostCopies::ReportMalformed(PeerId peer, absl::string_view what) {
  absl::Status status = absl::DataLossError(absl::StrCat(
      "node ", self_, ": peer ", peer, " sent a malformed same-host copy message: ", what));
  auto found = transport_.peers_.find(peer);
  if (found == transport_.peers_.end()) {
    LOG(ERROR) << status << " (no such peer)";
    return;
  }
  LOG(WARNING) << status;
  transport_.OnPeerFailed(found->second.get(), status);
}

bool Transport::SameHostCopies::ReceiveFromMailbox() {
  if (mailbox_ == nullptr || transport_.shutting_down_) return false;
  auto malformed = [this](uint32_t sender, absl::string_view what) {
    ReportMalformed(sender, absl::StrCat("in the mailbox, ", what));
  };
  auto handle = [this](uint32_t sender, absl::string_view bytes) {
    if (bytes.size() < sizeof(CopyMessage)) {
      ReportMalformed(sender, absl::StrCat("in the mailbox, a message of ", bytes.size(),
                                           " bytes (a copy message has ", sizeof(CopyMessage),
                                           ")"));
      return;
    }
    ReceivedCopyMessage received;
    received.from = sender;
    std::memcpy(&received.message, bytes.data(), sizeof(received.message));
    received.trailer = std::string(bytes.substr(sizeof(CopyMessage)));
    copy_inbox_.push_back(std::move(received));
  };
  return mailbox_->Receive(handle, malformed);
}

bool Transport::SameHostCopies::HandleCopyMessages() {
  if (copy_inbox_.empty() && receives_to_copy_.empty()) return false;
  std::vector<ReceivedCopyMessage> inbox;
  inbox.swap(copy_inbox_);
  for (ReceivedCopyMessage& received : inbox) HandleCopyMessage(std::move(received));
  // Cancelling a receive (HandleCopyMessage) may report it at once or in a later progress call.
  std::vector<std::unique_ptr<Operation>> receives;
  receives.swap(receives_to_copy_);
  for (std::unique_ptr<Operation>& receive : receives) {
    ReceivedCopyMessage source = *std::move(receive->copy_from);
    CopyInto(std::move(receive), source);
  }
  return true;
}

void Transport::SameHostCopies::HandleCopyMessage(ReceivedCopyMessage received) {
  if (transport_.shutting_down_) return;
  const PeerId from = received.from;
  const CopyMessage& message = received.message;
  switch (message.kind) {
    case CopyMessage::kCanRead: {
      std::lock_guard<std::mutex> lock(readers_mutex_);
      readers_.insert(from);
      return;
    }
    case CopyMessage::kAnnounce:
    case CopyMessage::kInline: {
      if (message.kind == CopyMessage::kInline && received.trailer.size() != message.size) {
        ReportMalformed(from, absl::StrCat("inline data with tag ", message.tag, " of ",
                                           received.trailer.size(), " bytes where it says ",
                                           message.size));
        return;
      }
      auto posted = posted_receives_.find(message.tag);
      if (posted == posted_receives_.end()) {
        const CopyMessage announcement = message;  // `received` moves into the table
        const DataTag tag = announcement.tag;
        const bool inline_data = announcement.kind == CopyMessage::kInline;
        if (!announcements_.emplace(tag, std::move(received)).second) {
          // Two transfers with one tag waiting: the cluster's tags are unique per receiving node,
          // so this is a bug; fail the second sender rather than let it wait forever (an inline
          // sender is done already: its data are dropped, and the receive fails instead).
          absl::Status duplicate = absl::AlreadyExistsError(
              absl::StrCat("node ", self_, " already holds another transfer with tag ", tag,
                           " for a receive not yet posted"));
          if (inline_data) {
            LOG(ERROR) << duplicate << "; dropped the inline data from peer " << from;
            dropped_duplicates_.emplace(
                tag, absl::AlreadyExistsError(
                         absl::StrCat("a second transfer with this tag, from peer ", from,
                                      ", came before the receive was posted and was dropped")));
          } else {
            SendCopyDone(from, announcement, duplicate);
          }
        }
        return;
      }
      // The receive is in UCX; cancelling it completes it with UCS_ERR_CANCELED, and Complete
      // then copies instead (no UCX send has this tag: the sender used the mailbox instead).
      Operation* receive = posted->second;
      posted_receives_.erase(posted);
      receive->copy_from = std::move(received);
      ucp_request_cancel(transport_.worker_->handle(), receive->request);
      return;
    }
    case CopyMessage::kDone: {
      auto found = copy_sends_.find(std::make_pair(from, message.tag));
      if (found == copy_sends_.end()) {
        LOG(ERROR) << "node " << self_ << ": peer " << from
                   << " answered a same-host copy with tag " << message.tag
                   << " that this node did not announce";
        return;
      }
      std::unique_ptr<Operation> send = std::move(found->second);
      copy_sends_.erase(found);
      absl::Status status;
      if (message.status_code > static_cast<uint32_t>(absl::StatusCode::kUnauthenticated)) {
        // No status has this code: the answer is garbage, and so is the transfer.
        status = absl::DataLossError(absl::StrCat(transport_.Describe(*send), ": peer ", from,
                                                  " answered with status code ",
                                                  message.status_code, ", which no status has"));
      } else if (message.status_code != 0) {
        status = absl::Status(static_cast<absl::StatusCode>(message.status_code),
                              absl::StrCat(transport_.Describe(*send),
                                           ": the receiver's copy failed: ", received.trailer));
      }
      transport_.Finish(std::move(send), std::move(status), 0);
      return;
    }
  }
  ReportMalformed(from, absl::StrCat("unknown kind ", message.kind));
}

bool Transport::SameHostCopies::SendInline(std::unique_ptr<Operation>& operation, Peer& peer) {
  if (peer.mailbox == nullptr || operation->size > kMaxInlineBytes) return false;
  CopyMessage message;
  message.kind = CopyMessage::kInline;
  message.flags = operation->driven ? CopyMessage::kDriven : 0;
  message.tag = operation->tag;
  message.size = operation->size;
  char bytes[Mailbox::kMaxMessageBytes];
  std::memcpy(bytes, &message, sizeof(message));
  // (memcpy wants valid pointers even for no bytes, and an empty transfer may have none.)
  if (operation->size > 0) {
    std::memcpy(bytes + sizeof(message), operation->send_buffer, operation->size);
  }
  if (!peer.mailbox->Post(absl::string_view(bytes, sizeof(message) + operation->size),
                          ReaderOf(message))) {
    return false;  // a full ring: through UCX
  }
  transport_.Finish(std::move(operation), absl::OkStatus(), 0);
  return true;
}

bool Transport::SameHostCopies::StartCopySend(std::unique_ptr<Operation>& operation) {
  if (!enabled_ || operation->size < transport_.options_.same_host_copy_min_bytes) return false;
  {
    std::lock_guard<std::mutex> lock(readers_mutex_);
    if (!readers_.contains(operation->peer)) return false;
  }
  auto key = std::make_pair(operation->peer, operation->tag);
  if (copy_sends_.contains(key)) return false;  // the same tag twice at once: UCX matches those
  CopyMessage announce;
  announce.kind = CopyMessage::kAnnounce;
  announce.flags = operation->driven ? CopyMessage::kDriven : 0;
  announce.tag = operation->tag;
  announce.address = reinterpret_cast<uintptr_t>(operation->send_buffer);
  announce.size = operation->size;
  PeerId peer = operation->peer;
  copy_sends_.emplace(key, std::move(operation));
  SendCopyMessage(peer, announce);
  return true;
}

bool Transport::SameHostCopies::StartCopyReceive(std::unique_ptr<Operation>& operation) {
  auto announced = announcements_.find(operation->tag);
  if (announced == announcements_.end()) return false;
  ReceivedCopyMessage source = std::move(announced->second);
  announcements_.erase(announced);
  CopyInto(std::move(operation), source);
  return true;
}

void Transport::SameHostCopies::CopyInto(std::unique_ptr<Operation> receive,
                                         const ReceivedCopyMessage& source) {
  const PeerId from = source.from;
  const CopyMessage& request = source.message;
  const bool inline_data = request.kind == CopyMessage::kInline;
  absl::Status status;
  auto peer = transport_.peers_.find(from);
  if (auto dropped = dropped_duplicates_.extract(request.tag); !dropped.empty()) {
    // Another transfer with this tag was dropped (HandleCopyMessage): neither is taken, and an
    // announced one's sender fails too.
    status = absl::Status(dropped.mapped().code(), absl::StrCat(transport_.Describe(*receive), ": ",
                                                                dropped.mapped().message()));
  } else if (request.size > receive->size) {
    status = absl::InvalidArgumentError(absl::StrCat(transport_.Describe(*receive), ": peer ", from,
                                                     " sent ", FormatBytes(request.size),
                                                     ", more than the buffer holds"));
  } else if (inline_data) {
    if (request.size > 0) std::memcpy(receive->receive_buffer, source.trailer.data(), request.size);
  } else if (peer == transport_.peers_.end() || peer->second->reader == nullptr) {
    status = absl::InternalError(absl::StrCat(transport_.Describe(*receive), ": peer ", from,
                                              " announced a same-host copy this node cannot read"));
  } else if (absl::Status read =
                 peer->second->reader->Read(request.address, receive->receive_buffer, request.size);
             !read.ok()) {
    status = absl::Status(read.code(), absl::StrCat(transport_.Describe(*receive), " from peer ",
                                                    from, ": ", read.message()));
  }
  if (!inline_data && peer != transport_.peers_.end() && !peer->second->failed) {
    SendCopyDone(from, request, status);
  }
  transport_.Finish(std::move(receive), std::move(status), request.size);
}

void Transport::SameHostCopies::FailCopySends(std::optional<PeerId> peer,
                                              absl::string_view reason) {
  std::vector<std::unique_ptr<Operation>> failed;
  for (auto it = copy_sends_.begin(); it != copy_sends_.end();) {
    if (!peer.has_value() || it->first.first == *peer) {
      failed.push_back(std::move(it->second));
      copy_sends_.erase(it++);
    } else {
      ++it;
    }
  }
  for (std::unique_ptr<Operation>& send : failed) {
    absl::Status status =
        peer.has_value()
            ? absl::UnavailableError(
                  absl::StrCat(transport_.Describe(*send), ": the peer ", reason))
            : absl::CancelledError(absl::StrCat(transport_.Describe(*send), " ", reason));
    transport_.Finish(std::move(send), std::move(status), 0);
  }
}

void Transport::SameHostCopies::RememberPostedReceive(Operation* receive) {
  posted_receives_.emplace(receive->tag, receive);
}

void Transport::SameHostCopies::ForgetPostedReceive(Operation* receive) {
  auto posted = posted_receives_.find(receive->tag);
  if (posted != posted_receives_.end() && posted->second == receive) posted_receives_.erase(posted);
}

void Transport::SameHostCopies::TakeCancelledReceive(std::unique_ptr<Operation> receive) {
  receives_to_copy_.push_back(std::move(receive));
}

void Transport::SameHostCopies::CancelAll() {
  for (std::unique_ptr<Operation>& receive : receives_to_copy_) {
    absl::Status cancelled = absl::CancelledError(
        absl::StrCat(transport_.Describe(*receive), " was cancelled: the transport stopped"));
    transport_.Finish(std::move(receive), std::move(cancelled), 0);
  }
  receives_to_copy_.clear();
  FailCopySends(std::nullopt, "was cancelled: the transport stopped");
}

}  // namespace loom::transport
