#include "transport/transport.h"

#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/format_bytes.h"
#include "glog/logging.h"
#include "transport/same_host_copies.h"
#include "transport/transport_operation.h"
#include "transport/ucx_status.h"

namespace loom::transport {

// The outcome of an AddPeerCommand, handed from the progress thread to the caller. A std::mutex
// rather than absl::Notification, so that ThreadSanitizer sees the hand-off (Debian's Abseil is
// not instrumented).
struct Transport::AddPeerResult {
  void Set(absl::Status result) {
    std::lock_guard<std::mutex> lock(mutex);
    status = std::move(result);
    done = true;
    changed.notify_all();
  }
  // The status, or nullopt when it was not set within `deadline`.
  std::optional<absl::Status> Wait(absl::Duration deadline) {
    std::unique_lock<std::mutex> lock(mutex);
    if (!changed.wait_for(lock, absl::ToChronoMilliseconds(deadline), [&] { return done; })) {
      return std::nullopt;
    }
    return status;
  }

  std::mutex mutex;
  std::condition_variable changed;
  bool done ABSL_GUARDED_BY(mutex) = false;
  absl::Status status ABSL_GUARDED_BY(mutex);
};

absl::StatusOr<std::unique_ptr<Transport>> Transport::Create(TransportOptions options) {
  // Non-blocking TCP connects: UCX 1.13 connects blocking by default, inside ucp_ep_create on the
  // progress thread, which a peer whose traffic is dropped (firewall, link down with its link
  // address still cached) would hold for the kernel's SYN timeout (minutes). UCX_TCP_CONN_NB as a
  // transport setting is named without its "TCP_" (with it, UCX 1.13 warns and ignores it). Before
  // the caller's settings, which may change it.
  options.context.configuration.insert(options.context.configuration.begin(), {"CONN_NB", "y"});
  // TCP segments of 256 KiB instead of UCX's 8 KiB (UCX_TCP_TX_SEG_SIZE / RX_SEG_SIZE, named
  // without "TCP_" as above): a large register or collective chunk over TCP then goes in 32x
  // fewer sendmsg calls and receive-side copies. Measured (docs/PERFORMANCE.md, allreduce and
  // alltoall): a 1 MiB all-to-all on 2 processes 0.80 -> 0.38 ms, 64 MiB on 4 processes
  // 58 -> 50 ms. Other transports have no such setting and ignore it.
  options.context.configuration.insert(options.context.configuration.begin() + 1,
                                       {{"TX_SEG_SIZE", "256K"}, {"RX_SEG_SIZE", "256K"}});
  absl::StatusOr<std::unique_ptr<UcxContext>> context = UcxContext::Create(options.context);
  if (!context.ok()) return context.status();
  absl::StatusOr<std::unique_ptr<UcxWorker>> worker = UcxWorker::Create(**context);
  if (!worker.ok()) return worker.status();
  int wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd < 0) {
    return absl::InternalError(
        absl::StrCat("creating the transport's wake-up eventfd: ", std::strerror(errno)));
  }
  const bool same_host_copies =
      options.same_host_copies && TransportListAllowsSameHostCopies((*context)->transports());
  std::unique_ptr<Mailbox> mailbox;
  if (same_host_copies) {
    absl::StatusOr<std::unique_ptr<Mailbox>> created = Mailbox::Create(wake_fd);
    if (created.ok()) {
      mailbox = *std::move(created);
    } else {
      LOG(INFO) << "node " << options.self << ": " << created.status()
                << "; same-host copy messages go through UCX";
    }
  }
  auto transport = std::unique_ptr<Transport>(new Transport(std::move(options), *std::move(context),
                                                            *std::move(worker), wake_fd,
                                                            same_host_copies, std::move(mailbox)));

  ucp_am_handler_param_t handler{};
  handler.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                       UCP_AM_HANDLER_PARAM_FIELD_ARG | UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
  handler.id = kActorMessageId;
  handler.cb = &Transport::OnActiveMessage;
  handler.arg = transport.get();
  handler.flags = UCP_AM_FLAG_WHOLE_MSG;
  ucs_status_t status = ucp_worker_set_am_recv_handler(transport->worker_->handle(), &handler);
  if (status != UCS_OK) {
    return UcxStatusToStatus(status, "registering the actor message handler");
  }
  handler.id = kCopyMessageId;
  handler.cb = &SameHostCopies::OnCopyMessage;
  handler.arg = transport->copies_.get();
  status = ucp_worker_set_am_recv_handler(transport->worker_->handle(), &handler);
  if (status != UCS_OK) {
    return UcxStatusToStatus(status, "registering the same-host copy message handler");
  }
  // The worker is handed to the progress thread here; no other thread touches it from now on.
  transport->progress_thread_ = std::thread([t = transport.get()] { t->ProgressLoop(); });
  return transport;
}

Transport::Transport(TransportOptions options, std::unique_ptr<UcxContext> context,
                     std::unique_ptr<UcxWorker> worker, int wake_fd, bool same_host_copies,
                     std::unique_ptr<Mailbox> mailbox)
    : self_(options.self),
      on_message_(std::move(options.on_message)),
      on_peer_error_(std::move(options.on_peer_error)),
      options_(std::move(options)),
      context_(std::move(context)),
      worker_(std::move(worker)),
      wake_fd_(wake_fd),
      copies_(std::make_unique<SameHostCopies>(*this, std::move(mailbox), same_host_copies)),
      address_(EncodeAddress(copies_->identity(), worker_->address())) {}

Transport::~Transport() {
  Stop();
  worker_.reset();  // normally done by the progress thread; not when Create failed before it ran
  context_.reset();
  close(wake_fd_);
}

void Transport::Stop() {
  std::lock_guard<std::mutex> stop_lock(stop_mutex_);
  CHECK(std::this_thread::get_id() != progress_thread_.get_id())
      << "Transport::Stop called from a transport callback";
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_requested_ = true;
  }
  has_commands_.store(true);
  Wake();
  if (progress_thread_.joinable()) progress_thread_.join();
}

absl::Status Transport::AddPeer(PeerId peer, absl::string_view address) {
  auto result = std::make_shared<AddPeerResult>();
  absl::Status queued = Enqueue(AddPeerCommand{peer, std::string(address), result});
  if (!queued.ok()) return queued;
  std::optional<absl::Status> added = result->Wait(options_.add_peer_deadline);
  if (!added.has_value()) {
    return absl::DeadlineExceededError(
        absl::StrCat("node ", self_, ": connecting to peer ", peer, " took longer than ",
                     absl::FormatDuration(options_.add_peer_deadline)));
  }
  return *added;
}

bool Transport::CopiesDirectlyTo(PeerId peer) const { return copies_->CopiesDirectlyTo(peer); }

bool Transport::PostsToMailboxOf(PeerId peer) const { return copies_->PostsToMailboxOf(peer); }

bool Transport::SameHostProcessesHaveACpuEach() const { return copies_->ProcessesHaveACpuEach(); }

absl::Status Transport::Send(PeerId peer, absl::string_view bytes) {
  if (bytes.size() > kMaxMessageBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "node ", self_, ": a message to peer ", peer, " has ", bytes.size(),
        " bytes, more than the ", kMaxMessageBytes, " a message may have; send data instead"));
  }
  auto operation = std::make_unique<Operation>();
  operation->kind = Operation::Kind::kMessage;
  operation->peer = peer;
  operation->header.sender = self_;
  operation->message.assign(bytes.data(), bytes.size());
  return Enqueue(std::move(operation));
}

absl::Status Transport::SendData(PeerId peer, DataTag tag, const void* buffer, size_t size,
                                 SendCallback callback, Queueing queueing) {
  auto operation = std::make_unique<Operation>();
  operation->kind = Operation::Kind::kSendData;
  operation->peer = peer;
  operation->tag = tag;
  operation->send_buffer = buffer;
  operation->size = size;
  operation->send_callback = std::move(callback);
  operation->driven = queueing == Queueing::kDeferred;
  return Enqueue(std::move(operation), queueing);
}

absl::Status Transport::ReceiveData(DataTag tag, void* buffer, size_t size,
                                    ReceiveCallback callback, Queueing queueing) {
  auto operation = std::make_unique<Operation>();
  operation->kind = Operation::Kind::kReceiveData;
  operation->tag = tag;
  operation->receive_buffer = buffer;
  operation->size = size;
  operation->receive_callback = std::move(callback);
  operation->driven = queueing == Queueing::kDeferred;
  return Enqueue(std::move(operation), queueing);
}

absl::Status Transport::Enqueue(Command command, Queueing queueing) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stop_requested_) {
      return absl::FailedPreconditionError(
          absl::StrCat("node ", self_, ": the transport is stopped"));
    }
    commands_.push_back(std::move(command));
  }
  has_commands_.store(true);
  if (queueing == Queueing::kWake && sleeping_.load()) Wake();
  return absl::OkStatus();
}

void Transport::Wake() {
  uint64_t one = 1;
  if (write(wake_fd_, &one, sizeof(one)) < 0 && errno != EAGAIN) {
    PLOG(ERROR) << "node " << self_ << ": waking the transport's progress thread";
  }
}

void Transport::ProgressLoop() {
  // Named like the stream threads ("node3/cpu:0/com"), so that top -H and perf tell them apart;
  // Linux thread names are at most 15 characters.
  pthread_setname_np(pthread_self(), absl::StrCat("node", self_, "/ucx").substr(0, 15).c_str());
  std::unique_lock<std::mutex> token(worker_mutex_);
  sleeping_.store(false);
  absl::Time last_activity = absl::Now();
  while (true) {
    if (drivers_waiting_.load() > 0) {
      HandOver(token);
      last_activity = absl::Now();
    }
    bool stop = false;
    bool worker_busy = false;
    const bool busy = Step(stop, &worker_busy);
    if (stop) break;
    absl::Time now = absl::Now();
    if (worker_busy) last_activity = now;  // the spin counts from UCX's activity (progress_spin)
    if (busy) continue;
    if (now - last_activity < options_.progress_spin) continue;

    // Sleep. sleeping_ is set before the last look at has_commands_, and Enqueue sets
    // has_commands_ before looking at sleeping_: one of the two sees the other (sequentially
    // consistent atomics). It stays set until this thread holds the token again, so that commands
    // queued while a driver holds it wake the driver.
    sleeping_.store(true);
    if (has_commands_.load()) {
      sleeping_.store(false);
      continue;
    }
    Park(options_.park_timeout, &token);
    sleeping_.store(false);
  }
  Shutdown();
}

bool Transport::Step(bool& stop, bool* worker_busy) {
  bool busy = false;
  if (has_commands_.load()) {
    busy = RunCommands(stop);
    if (stop) return false;
  }
  while (worker_->Progress()) busy = true;
  if (worker_busy != nullptr) *worker_busy = busy;
  if (copies_->ReceiveFromMailbox()) busy = true;
  if (copies_->HandleCopyMessages()) busy = true;
  if (!failed_to_close_.empty()) CloseFailedEndpoints();
  return busy;
}

void Transport::Park(absl::Duration timeout, std::unique_lock<std::mutex>* token) {
  absl::StatusOr<bool> armed = worker_->Arm();
  if (!armed.ok()) LOG(ERROR) << "node " << self_ << ": " << armed.status();
  if (!armed.ok() || !*armed) return;  // events are waiting
  // Same-host peers post to the mailbox without an event of the worker; a post while parked
  // writes the wake-up eventfd, if it is for this thread: a driver (no token to let go of) reads
  // every message, the progress thread those of driven transfers only while some are pending.
  const Mailbox::Reader reader = token == nullptr || driven_pending_ > 0
                                     ? Mailbox::Reader::kDriver
                                     : Mailbox::Reader::kAnyThread;
  Mailbox* const mailbox = copies_->mailbox();
  if (mailbox != nullptr && !mailbox->BeginPark(reader)) return;
  pollfd fds[2] = {{worker_->event_fd(), POLLIN, 0}, {wake_fd_, POLLIN, 0}};
  const int timeout_ms = static_cast<int>(absl::ToInt64Milliseconds(timeout));
  if (token != nullptr) token->unlock();
  if (poll(fds, 2, timeout_ms) < 0 && errno != EINTR) {
    PLOG(ERROR) << "node " << self_ << ": polling the UCX worker";
  }
  if (mailbox != nullptr) mailbox->EndPark(reader);
  if (token != nullptr) token->lock();
  // Drained only with the token held: while a driver holds it, the progress thread may sleep in
  // this poll too, and a wake-up meant for the driver (a command queued meanwhile, WakeDriver)
  // wakes both; the progress thread must not consume it and leave the driver asleep.
  uint64_t count;
  while (read(wake_fd_, &count, sizeof(count)) > 0) {
  }
}

bool Transport::DriveUntil(absl::FunctionRef<bool()> done, absl::Time deadline) {
  // The progress thread hands the token over within one round of its work (HandOver), or holds
  // it not at all while it sleeps. Another driver (a second rank of a collective on this node)
  // holds it through its poll: woken, it sees this one waiting and lets go, instead of at its
  // next event or park timeout (50 ms a collective, measured, before this wake-up).
  drivers_waiting_.fetch_add(1);
  std::unique_lock<std::mutex> token(worker_mutex_, std::try_to_lock);
  if (!token.owns_lock()) {
    Wake();
    token.lock();
  }
  drivers_waiting_.fetch_sub(1);
  bool stop = shutting_down_;
  bool finished = false;
  // Polling keeps this process awake for its peers' posts: busily with a CPU of its own
  // (TransportOptions::progress_spin), yielding the CPU between rounds where same-host processes
  // share CPUs (TransportOptions::shared_cpu_poll), so that a peer this one waits for runs there.
  const bool yields = !SameHostProcessesHaveACpuEach();
  const absl::Duration spin = yields ? options_.shared_cpu_poll : options_.progress_spin;
  absl::Time last_activity = absl::Now();
  while (!stop) {
    const bool busy = Step(stop);
    if (stop) break;
    if (done()) {
      finished = true;
      break;
    }
    // Another waiting thread takes over (this one then waits as usual): a thread that has its
    // completions must not wait for the token until this one's wait is over, which might need it.
    if (drivers_waiting_.load() > 0) break;
    const absl::Time now = absl::Now();
    if (busy) {
      last_activity = now;
      continue;
    }
    if (now >= deadline) break;
    if (has_commands_.load()) continue;
    if (now - last_activity < spin) {
      if (yields) sched_yield();
      continue;
    }
    // Enqueue wakes this poll through the eventfd: sleeping_ is true while a driver holds the
    // token.
    Park(std::min(options_.park_timeout, deadline - now), nullptr);
  }
  if (!shutting_down_) {
    // Hand the worker back armed, so that its next event wakes the progress thread if it sleeps;
    // wake it when work is left (or Stop() was called), and when the drive ends early with driven
    // operations pending, so that it parks as their driver (their messages do not wake it
    // otherwise, and the caller now waits without driving).
    while (!stop && Step(stop)) {
    }
    absl::StatusOr<bool> armed = stop ? false : worker_->Arm();
    if (stop || has_commands_.load() || !armed.ok() || !*armed ||
        (!finished && driven_pending_ > 0)) {
      Wake();
    }
  }
  token.unlock();
  token_returned_.notify_all();
  return finished;
}

void Transport::HandOver(std::unique_lock<std::mutex>& token) {
  sleeping_.store(true);  // what is queued meanwhile wakes the driver's poll
  token_returned_.wait(token, [this] { return drivers_waiting_.load() == 0; });
  sleeping_.store(false);
}

bool Transport::RunCommands(bool& stop) {
  std::deque<Command> commands;
  {
    // The stop request is looked at where has_commands_ is cleared: Stop() sets it after
    // stop_requested_, so a request that comes after this look leaves has_commands_ set for the
    // next round. (Looked at in a section of its own, a request made between the two was cleared
    // with the commands, and the progress thread went on parking, unaware of it.)
    std::lock_guard<std::mutex> lock(mutex_);
    if (stop_requested_) {
      stop = true;
      return false;
    }
    commands.swap(commands_);
    has_commands_.store(false);
  }
  for (Command& command : commands) RunCommand(std::move(command));
  return !commands.empty();
}

void Transport::RunCommand(Command command) {
  if (auto* add_peer = std::get_if<AddPeerCommand>(&command)) {
    AddPeerNow(*add_peer);
    return;
  }
  StartOperation(std::move(std::get<std::unique_ptr<Operation>>(command)));
}

void Transport::AddPeerNow(AddPeerCommand& command) {
  absl::Status status;
  if (shutting_down_) {
    status =
        absl::CancelledError(absl::StrCat("node ", self_, ": connecting to peer ", command.peer,
                                          " was cancelled: the transport stopped"));
  } else if (peers_.contains(command.peer)) {
    status = absl::AlreadyExistsError(
        absl::StrCat("node ", self_, ": peer ", command.peer, " was already added"));
  } else if (absl::StatusOr<DecodedAddress> address = DecodeAddress(command.address);
             !address.ok()) {
    status = absl::InvalidArgumentError(absl::StrCat(
        "node ", self_, ": connecting to peer ", command.peer, ": ", address.status().message()));
  } else {
    auto peer = std::make_unique<Peer>();
    peer->transport = this;
    peer->id = command.peer;
    absl::StatusOr<std::unique_ptr<UcxEndpoint>> endpoint = UcxEndpoint::Create(
        *worker_, address->worker_address, &Transport::OnEndpointError, peer.get());
    if (endpoint.ok()) {
      peer->endpoint = *std::move(endpoint);
      Peer& added = *peers_.emplace(command.peer, std::move(peer)).first->second;
      if (copies_->enabled()) copies_->ProbeSameHost(added, address->identity);
    } else {
      status = absl::Status(endpoint.status().code(),
                            absl::StrCat("node ", self_, ": connecting to peer ", command.peer,
                                         ": ", endpoint.status().message()));
    }
  }
  command.result->Set(std::move(status));
}

std::string Transport::Describe(const Operation& operation) const {
  switch (operation.kind) {
    case Operation::Kind::kMessage:
      return absl::StrCat("node ", self_, ": sending a ", operation.message.size(),
                          "-byte message to peer ", operation.peer);
    case Operation::Kind::kSendData:
      return absl::StrCat("node ", self_, ": sending ", FormatBytes(operation.size),
                          " of data with tag ", operation.tag, " to peer ", operation.peer);
    case Operation::Kind::kReceiveData:
      return absl::StrCat("node ", self_, ": receiving data with tag ", operation.tag,
                          " into a buffer of ", FormatBytes(operation.size));
  }
  return "";
}

void Transport::StartOperation(std::unique_ptr<Operation> operation) {
  if (operation->driven) ++driven_pending_;  // until Finish
  if (shutting_down_) {
    absl::Status cancelled = absl::CancelledError(
        absl::StrCat(Describe(*operation), " was cancelled: the transport stopped"));
    Finish(std::move(operation), std::move(cancelled), 0);
    return;
  }
  operation->transport = this;
  operation->starting = true;
  ucp_request_param_t params{};
  params.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  params.user_data = operation.get();
  ucs_status_ptr_t request = nullptr;

  if (operation->kind == Operation::Kind::kReceiveData) {
    if (copies_->StartCopyReceive(operation)) return;
    // Always through the callback, which reports the received length: with an immediate
    // completion UCX 1.13 sometimes left the length in recv_info at 0.
    params.op_attr_mask |= UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    params.cb.recv = &Transport::OnReceiveDone;
    request = ucp_tag_recv_nbx(worker_->handle(), operation->receive_buffer, operation->size,
                               operation->tag, /*tag_mask=*/~ucp_tag_t{0}, &params);
  } else {
    auto found = peers_.find(operation->peer);
    if (found == peers_.end() || found->second->failed) {
      std::string description = Describe(*operation);
      absl::Status status =
          found == peers_.end()
              ? absl::NotFoundError(absl::StrCat(description, ": no such peer (AddPeer first)"))
              : absl::UnavailableError(absl::StrCat(description, ": the peer failed earlier"));
      Finish(std::move(operation), status, 0);
      return;
    }
    if (operation->kind == Operation::Kind::kSendData &&
        (copies_->SendInline(operation, *found->second) || copies_->StartCopySend(operation))) {
      return;
    }
    ucp_ep_h endpoint = found->second->endpoint->handle();
    params.cb.send = &Transport::OnSendDone;
    if (operation->kind == Operation::Kind::kMessage) {
      params.op_attr_mask |= UCP_OP_ATTR_FIELD_FLAGS;
      params.flags = UCP_AM_SEND_FLAG_EAGER;
      request = ucp_am_send_nbx(endpoint, operation->message_id, &operation->header,
                                sizeof(operation->header), operation->message.data(),
                                operation->message.size(), &params);
    } else {
      request = ucp_tag_send_nbx(endpoint, operation->send_buffer, operation->size, operation->tag,
                                 &params);
    }
  }

  operation->starting = false;
  if (UCS_PTR_IS_ERR(request)) {
    Complete(operation.release(), UCS_PTR_STATUS(request), 0);
  } else if (request == nullptr) {  // a send that completed at once
    Complete(operation.release(), UCS_OK, 0);
  } else if (operation->completed_while_starting) {
    operation->request = request;
    ucs_status_t status = operation->early_status;
    size_t length = operation->early_length;
    Complete(operation.release(), status, length);
  } else {
    operation->request = request;
    if (operation->kind == Operation::Kind::kReceiveData) {
      copies_->RememberPostedReceive(operation.get());
    }
    pending_.insert(operation.release());
  }
}

void Transport::OnSendDone(void* request, ucs_status_t status, void* user_data) {
  auto* operation = static_cast<Operation*>(user_data);
  operation->transport->Complete(operation, status, 0);
}

void Transport::OnReceiveDone(void* request, ucs_status_t status, const ucp_tag_recv_info_t* info,
                              void* user_data) {
  auto* operation = static_cast<Operation*>(user_data);
  operation->transport->Complete(operation, status, info != nullptr ? info->length : 0);
}

void Transport::Complete(Operation* raw, ucs_status_t status, size_t received_bytes) {
  if (raw->starting) {
    raw->completed_while_starting = true;
    raw->early_status = status;
    raw->early_length = received_bytes;
    return;
  }
  std::unique_ptr<Operation> operation(raw);
  pending_.erase(raw);
  if (operation->request != nullptr) {
    ucp_request_free(operation->request);
    operation->request = nullptr;
  }
  if (operation->kind == Operation::Kind::kReceiveData) {
    copies_->ForgetPostedReceive(raw);
    if (operation->copy_from.has_value() && !shutting_down_) {
      // Copied after the UCX call that reported the cancellation, as messages are handled.
      copies_->TakeCancelledReceive(std::move(operation));
      return;
    }
  }
  absl::Status result;
  if (status != UCS_OK) {
    result = shutting_down_ ? absl::CancelledError(absl::StrCat(
                                  Describe(*operation), " was cancelled: the transport stopped"))
                            : UcxStatusToStatus(status, Describe(*operation));
  }
  Finish(std::move(operation), std::move(result), received_bytes);
}

void Transport::Finish(std::unique_ptr<Operation> operation, absl::Status status,
                       size_t received_bytes) {
  if (operation->driven) --driven_pending_;
  switch (operation->kind) {
    case Operation::Kind::kMessage:
      if (!status.ok() && !shutting_down_) {
        auto found = peers_.find(operation->peer);
        if (found != peers_.end()) {
          OnPeerFailed(found->second.get(), status);
        } else {
          LOG(ERROR) << status;
        }
      }
      break;
    case Operation::Kind::kSendData:
      if (operation->send_callback) operation->send_callback(std::move(status));
      break;
    case Operation::Kind::kReceiveData:
      if (operation->receive_callback) {
        if (status.ok()) {
          operation->receive_callback(received_bytes);
        } else {
          operation->receive_callback(std::move(status));
        }
      }
      break;
  }
}

void Transport::OnEndpointError(void* argument, ucp_ep_h endpoint, ucs_status_t status) {
  auto* peer = static_cast<Peer*>(argument);
  Transport* transport = peer->transport;
  transport->OnPeerFailed(
      peer, UcxStatusToStatus(status,
                              absl::StrCat("node ", transport->self_, ": the connection to peer ",
                                           peer->id, " failed (the peer died or is unreachable)")));
}

void Transport::OnPeerFailed(Peer* peer, const absl::Status& status) {
  if (peer->failed) return;
  peer->failed = true;
  // UCX requires a failed endpoint to be closed with the force mode; not from inside its callback.
  failed_to_close_.push_back(peer);
  if (shutting_down_) return;
  copies_->FailCopySends(peer->id, absl::StrCat("failed: ", status.message()));
  if (on_peer_error_) {
    on_peer_error_(peer->id, status);  // the owner knows whether it matters
  } else {
    LOG(WARNING) << status;
  }
}

void Transport::CloseFailedEndpoints() {
  std::vector<Peer*> peers;
  peers.swap(failed_to_close_);
  for (Peer* peer : peers) peer->endpoint->Close(/*force=*/true);
}

ucs_status_t Transport::OnActiveMessage(void* argument, const void* header, size_t header_length,
                                        void* data, size_t length,
                                        const ucp_am_recv_param_t* param) {
  auto* transport = static_cast<Transport*>(argument);
  if (header_length != sizeof(MessageHeader)) {
    LOG(ERROR) << "node " << transport->self_ << ": dropped a message with a " << header_length
               << "-byte header (expected " << sizeof(MessageHeader) << ")";
    return UCS_OK;
  }
  if ((param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0) {
    // Cannot happen: messages are sent with UCP_AM_SEND_FLAG_EAGER.
    LOG(ERROR) << "node " << transport->self_ << ": dropped a rendezvous message";
    return UCS_OK;
  }
  MessageHeader message_header;
  std::memcpy(&message_header, header, sizeof(message_header));
  if (!transport->shutting_down_ && transport->on_message_) {
    transport->on_message_(message_header.sender,
                           absl::string_view(static_cast<const char*>(data), length));
  }
  return UCS_OK;
}

void Transport::Shutdown() {
  shutting_down_ = true;
  copies_->CancelAll();
  std::deque<Command> commands;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    commands.swap(commands_);
  }
  for (Command& command : commands) RunCommand(std::move(command));  // each is cancelled

  std::vector<Operation*> receives;
  for (Operation* operation : pending_) {
    if (operation->kind == Operation::Kind::kReceiveData) receives.push_back(operation);
  }
  for (Operation* operation : receives) ucp_request_cancel(worker_->handle(), operation->request);
  for (auto& [id, peer] : peers_) peer->endpoint->Close(/*force=*/true);

  absl::Time deadline = absl::Now() + options_.stop_deadline;
  auto all_closed = [this] {
    for (auto& [id, peer] : peers_) {
      if (!peer->endpoint->IsClosed()) return false;
    }
    return true;
  };
  while ((!pending_.empty() || !all_closed()) && absl::Now() < deadline) {
    if (!worker_->Progress()) std::this_thread::yield();
  }
  if (!pending_.empty()) {
    LOG(ERROR) << "node " << self_ << ": " << pending_.size()
               << " operations did not complete within the stop deadline of "
               << absl::FormatDuration(options_.stop_deadline) << "; reporting them cancelled";
    std::vector<Operation*> leftovers(pending_.begin(), pending_.end());
    for (Operation* operation : leftovers) Complete(operation, UCS_ERR_CANCELED, 0);
  }
  peers_.clear();  // closes endpoints still open (bounded by a second each)
  // Destroying the worker closes its sockets, which is how the peers learn that this node left
  // (a forced endpoint close does not tell the peer).
  worker_.reset();
}

}  // namespace loom::transport
