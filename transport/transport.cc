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
#include <numeric>
#include <optional>
#include <random>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "runtime/cpu_affinity.h"
#include "runtime/format_bytes.h"
#include "transport/ucx_status.h"

namespace loom::transport {
namespace {

// The active message ids of actor messages and of same-host copy messages; every message carries
// its sender in the header.
constexpr unsigned kActorMessageId = 1;
constexpr unsigned kCopyMessageId = 2;

struct MessageHeader {
  PeerId sender;
};

}  // namespace

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
  bool done = false;    // guarded by mutex
  absl::Status status;  // guarded by mutex
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
  std::optional<ReceivedCopyMessage> copy_from;
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
  handler.cb = &Transport::OnCopyMessage;
  status = ucp_worker_set_am_recv_handler(transport->worker_->handle(), &handler);
  if (status != UCS_OK) {
    return UcxStatusToStatus(status, "registering the same-host copy message handler");
  }
  // The worker is handed to the progress thread here; no other thread touches it from now on.
  transport->progress_thread_ = std::thread([t = transport.get()] { t->ProgressLoop(); });
  return transport;
}

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
      probe_word_(std::make_unique<uint64_t>(std::random_device()() * 0x100000001ull + 1)),
      mailbox_(std::move(mailbox)),
      identity_(IdentifyWithMailbox(probe_word_.get(), mailbox_.get())),
      same_host_copies_(same_host_copies),
      address_(EncodeAddress(identity_, worker_->address())),
      same_host_cpus_(ThisProcessCpus()),
      same_host_processes_have_a_cpu_each_(same_host_cpus_.HaveACpuEach()) {}

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

bool Transport::CopiesDirectlyTo(PeerId peer) const {
  std::lock_guard<std::mutex> lock(readers_mutex_);
  return same_host_copies_ && readers_.contains(peer);
}

bool Transport::PostsToMailboxOf(PeerId peer) const {
  std::lock_guard<std::mutex> lock(readers_mutex_);
  return mailbox_peers_.contains(peer);
}

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
  if (ReceiveFromMailbox()) busy = true;
  if (HandleCopyMessages()) busy = true;
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
  if (mailbox_ != nullptr && !mailbox_->BeginPark(reader)) return;
  pollfd fds[2] = {{worker_->event_fd(), POLLIN, 0}, {wake_fd_, POLLIN, 0}};
  const int timeout_ms = static_cast<int>(absl::ToInt64Milliseconds(timeout));
  if (token != nullptr) token->unlock();
  if (poll(fds, 2, timeout_ms) < 0 && errno != EINTR) {
    PLOG(ERROR) << "node " << self_ << ": polling the UCX worker";
  }
  if (mailbox_ != nullptr) mailbox_->EndPark(reader);
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
  // it not at all while it sleeps.
  drivers_waiting_.fetch_add(1);
  std::unique_lock<std::mutex> token(worker_mutex_);
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
      if (same_host_copies_) ProbeSameHost(added, address->identity);
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
    if (StartCopyReceive(operation)) return;
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
        (SendInline(operation, *found->second) || StartCopySend(operation))) {
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
      posted_receives_.emplace(operation->tag, operation.get());
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
    auto posted = posted_receives_.find(operation->tag);
    if (posted != posted_receives_.end() && posted->second == raw) posted_receives_.erase(posted);
    if (operation->copy_from.has_value() && !shutting_down_) {
      // Copied after the UCX call that reported the cancellation, as messages are handled.
      receives_to_copy_.push_back(std::move(operation));
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
  FailCopySends(peer->id, absl::StrCat("failed: ", status.message()));
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
  for (std::unique_ptr<Operation>& receive : receives_to_copy_) {
    absl::Status cancelled = absl::CancelledError(
        absl::StrCat(Describe(*receive), " was cancelled: the transport stopped"));
    Finish(std::move(receive), std::move(cancelled), 0);
  }
  receives_to_copy_.clear();
  FailCopySends(std::nullopt, "was cancelled: the transport stopped");
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

// Same-host copies. The receiver of data from a peer on this host reads the sender's buffer with
// process_vm_readv; the three messages of transport.h's CopyMessage travel through the peer's
// mailbox, or as active messages on its UCX endpoint (an error text, a full ring, no mailbox).

void Transport::ProbeSameHost(Peer& peer, const ProcessIdentity& identity) {
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
    same_host_cpus_.AddPeer(cpus.ok() ? *cpus : std::vector<int>());
    if (SameHostProcessesHaveACpuEach() && !same_host_cpus_.HaveACpuEach()) {
      LOG(INFO) << "node " << self_ << ": the " << same_host_cpus_.processes()
                << " processes of this job on this host cannot each have a CPU of its own (they "
                   "may run on "
                << same_host_cpus_.cpus()
                << " together); a thread waiting for transfers yields its CPU between polls";
    }
    same_host_processes_have_a_cpu_each_.store(same_host_cpus_.HaveACpuEach(),
                                               std::memory_order_relaxed);
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

void Transport::SendCopyMessage(PeerId peer, const CopyMessage& message, absl::string_view error) {
  // Through the peer's mailbox when it fits there (an error text does not: it goes with UCX);
  // messages of either path are independent of each other, so they may take both.
  if (error.empty()) {
    auto found = peers_.find(peer);
    if (found != peers_.end() && found->second->mailbox != nullptr && !found->second->failed &&
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
  StartOperation(std::move(operation));
}

Mailbox::Reader Transport::ReaderOf(const CopyMessage& message) {
  return (message.flags & CopyMessage::kDriven) != 0 ? Mailbox::Reader::kDriver
                                                     : Mailbox::Reader::kAnyThread;
}

void Transport::SendCopyDone(PeerId peer, const CopyMessage& announcement,
                             const absl::Status& status) {
  CopyMessage done;
  done.kind = CopyMessage::kDone;
  done.flags = announcement.flags & CopyMessage::kDriven;
  done.tag = announcement.tag;
  done.status_code = static_cast<uint32_t>(status.code());
  SendCopyMessage(peer, done, status.message());
}

ucs_status_t Transport::OnCopyMessage(void* argument, const void* header, size_t header_length,
                                      void* data, size_t length, const ucp_am_recv_param_t* param) {
  auto* transport = static_cast<Transport*>(argument);
  if (header_length != sizeof(MessageHeader) || length < sizeof(CopyMessage) ||
      (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0) {
    LOG(ERROR) << "node " << transport->self_ << ": dropped a malformed same-host copy message ("
               << header_length << "-byte header, " << length << " bytes)";
    return UCS_OK;
  }
  if (transport->shutting_down_) return UCS_OK;
  ReceivedCopyMessage received;
  MessageHeader message_header;
  std::memcpy(&message_header, header, sizeof(message_header));
  received.from = message_header.sender;
  std::memcpy(&received.message, data, sizeof(received.message));
  received.trailer.assign(static_cast<const char*>(data) + sizeof(CopyMessage),
                          length - sizeof(CopyMessage));
  // Handled after the progress call: the handling posts sends and cancels requests, which UCX
  // callbacks should not.
  transport->copy_inbox_.push_back(std::move(received));
  return UCS_OK;
}

bool Transport::ReceiveFromMailbox() {
  if (mailbox_ == nullptr || shutting_down_) return false;
  return mailbox_->Receive([this](uint32_t sender, absl::string_view bytes) {
    if (bytes.size() < sizeof(CopyMessage)) {
      LOG(ERROR) << "node " << self_ << ": dropped a same-host copy message of " << bytes.size()
                 << " bytes from peer " << sender << " in the mailbox";
      return;
    }
    ReceivedCopyMessage received;
    received.from = sender;
    std::memcpy(&received.message, bytes.data(), sizeof(received.message));
    received.trailer = std::string(bytes.substr(sizeof(CopyMessage)));
    copy_inbox_.push_back(std::move(received));
  });
}

bool Transport::HandleCopyMessages() {
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

void Transport::HandleCopyMessage(ReceivedCopyMessage received) {
  if (shutting_down_) return;
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
        LOG(ERROR) << "node " << self_ << ": dropped inline data with tag " << message.tag
                   << " from peer " << from << ": " << received.trailer.size()
                   << " bytes where it says " << message.size;
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
      ucp_request_cancel(worker_->handle(), receive->request);
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
      if (message.status_code != 0) {
        status = absl::Status(
            static_cast<absl::StatusCode>(message.status_code),
            absl::StrCat(Describe(*send), ": the receiver's copy failed: ", received.trailer));
      }
      Finish(std::move(send), std::move(status), 0);
      return;
    }
  }
  LOG(ERROR) << "node " << self_ << ": dropped a same-host copy message of unknown kind "
             << message.kind << " from peer " << from;
}

bool Transport::SendInline(std::unique_ptr<Operation>& operation, Peer& peer) {
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
  Finish(std::move(operation), absl::OkStatus(), 0);
  return true;
}

bool Transport::StartCopySend(std::unique_ptr<Operation>& operation) {
  if (!same_host_copies_ || operation->size < options_.same_host_copy_min_bytes) return false;
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

bool Transport::StartCopyReceive(std::unique_ptr<Operation>& operation) {
  auto announced = announcements_.find(operation->tag);
  if (announced == announcements_.end()) return false;
  ReceivedCopyMessage source = std::move(announced->second);
  announcements_.erase(announced);
  CopyInto(std::move(operation), source);
  return true;
}

void Transport::CopyInto(std::unique_ptr<Operation> receive, const ReceivedCopyMessage& source) {
  const PeerId from = source.from;
  const CopyMessage& request = source.message;
  const bool inline_data = request.kind == CopyMessage::kInline;
  absl::Status status;
  auto peer = peers_.find(from);
  if (auto dropped = dropped_duplicates_.extract(request.tag); !dropped.empty()) {
    // Another transfer with this tag was dropped (HandleCopyMessage): neither is taken, and an
    // announced one's sender fails too.
    status = absl::Status(dropped.mapped().code(),
                          absl::StrCat(Describe(*receive), ": ", dropped.mapped().message()));
  } else if (request.size > receive->size) {
    status = absl::InvalidArgumentError(absl::StrCat(Describe(*receive), ": peer ", from, " sent ",
                                                     FormatBytes(request.size),
                                                     ", more than the buffer holds"));
  } else if (inline_data) {
    if (request.size > 0) std::memcpy(receive->receive_buffer, source.trailer.data(), request.size);
  } else if (peer == peers_.end() || peer->second->reader == nullptr) {
    status = absl::InternalError(absl::StrCat(Describe(*receive), ": peer ", from,
                                              " announced a same-host copy this node cannot read"));
  } else if (absl::Status read =
                 peer->second->reader->Read(request.address, receive->receive_buffer, request.size);
             !read.ok()) {
    status = absl::Status(
        read.code(), absl::StrCat(Describe(*receive), " from peer ", from, ": ", read.message()));
  }
  if (!inline_data && peer != peers_.end() && !peer->second->failed) {
    SendCopyDone(from, request, status);
  }
  Finish(std::move(receive), std::move(status), request.size);
}

void Transport::FailCopySends(std::optional<PeerId> peer, absl::string_view reason) {
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
            ? absl::UnavailableError(absl::StrCat(Describe(*send), ": the peer ", reason))
            : absl::CancelledError(absl::StrCat(Describe(*send), " ", reason));
    Finish(std::move(send), std::move(status), 0);
  }
}

}  // namespace loom::transport
