#include "runtime/job_runtime.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "core/collective_backend_kind.h"
#include "core/device_name.h"
#include "core/shared_kernels.h"
#include "glog/logging.h"
#include "runtime/collectives/network_collectives.h"
#include "runtime/collectives/shared_memory_collectives.h"
#include "runtime/metered_network.h"
#include "runtime/plan_validation.h"

namespace loom {
namespace {

// What GPU streams do not run (their actors would read or write the registers from the host):
// refused before anything starts, naming the task. `backend` is the communicator's, for
// collectives.
absl::Status CheckRunsOnItsDevice(const plan::Task& task, const CollectiveBackend* backend) {
  if (task.stream().device().type() == plan::CPU) return absl::OkStatus();
  std::string what;
  switch (task.kind()) {
    case plan::SEND:
    case plan::RECEIVE:
      // The network moves host memory; the compiler's node split stages a GPU's registers
      // through its host with COPY tasks.
      what = "sending registers between nodes";
      break;
    case plan::COLLECTIVE:
      if (backend != nullptr && backend->transport() != "nccl") {
        what = absl::StrCat("collectives over ", backend->transport());
      }
      break;
    default:
      break;
  }
  if (what.empty()) return absl::OkStatus();
  return absl::UnimplementedError(absl::StrCat("task '", task.name(), "': ", what, " on ",
                                               StreamName(task.stream()),
                                               " is not supported yet; place it on a CPU device"));
}

}  // namespace

JobRuntime::JobRuntime(const plan::Plan& plan, JobOptions options)
    : plan_(plan), options_(std::move(options)) {
  // Actors read their kernels from their tasks (Create validated the positions).
  InlineSharedKernels(&plan_);
  if (options_.metrics != nullptr && options_.network != nullptr) {
    // Actors and collective backends see the metered network; it counts their bytes.
    metered_network_ = std::make_unique<MeteredNetwork>(options_.network, options_.metrics);
    options_.network = metered_network_.get();
  }
}

absl::StatusOr<std::unique_ptr<JobRuntime>> JobRuntime::Create(const plan::Plan& plan,
                                                               const KernelRegistry* kernels,
                                                               ActorFactory actor_factory,
                                                               JobOptions options) {
  if (absl::Status status = ValidatePlan(plan); !status.ok()) return status;
  if (options.snapshot_every_steps < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "snapshot_every_steps is ", options.snapshot_every_steps, ": it must not be negative"));
  }
  if (options.max_recorded_events < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_recorded_events is ", options.max_recorded_events, ": it must not be negative"));
  }
  std::unique_ptr<JobRuntime> job(new JobRuntime(plan, std::move(options)));
  if (absl::Status status = job->Build(kernels, actor_factory); !status.ok()) return status;
  return job;
}

absl::Status JobRuntime::Build(const KernelRegistry* kernels, const ActorFactory& actor_factory) {
  // Devices and their memory.
  for (const plan::DeviceDesc& desc : plan_.devices()) {
    std::unique_ptr<MemoryResource> resource;
    if (options_.memory_resource_factory) {
      absl::StatusOr<std::unique_ptr<MemoryResource>> made =
          options_.memory_resource_factory(desc.device());
      if (!made.ok()) return made.status();
      resource = std::move(*made);
    }
    if (resource == nullptr && desc.device().type() != plan::CPU) {
      return absl::FailedPreconditionError(
          absl::StrCat("device ", DeviceName(desc.device()),
                       ": no memory for this device type here (is its backend built and set up?)"));
    }
    memories_.push_back(std::make_shared<DeviceMemory>(
        DeviceName(desc.device()), desc.memory_budget_bytes(), std::move(resource)));
  }
  // The node's host memory, for the registers in it (offloaded activations): the memory of its
  // CPU devices (pinned where the node has GPUs), charged to an account of its own.
  {
    std::unique_ptr<MemoryResource> resource;
    if (options_.memory_resource_factory) {
      plan::Device host;
      host.set_node(plan_.node());
      host.set_type(plan::CPU);
      absl::StatusOr<std::unique_ptr<MemoryResource>> made = options_.memory_resource_factory(host);
      if (!made.ok()) return made.status();
      resource = std::move(*made);
    }
    host_memory_ =
        std::make_shared<DeviceMemory>(absl::StrCat("node", plan_.node(), " host memory"),
                                       plan_.host_memory_budget_bytes(), std::move(resource));
  }
  auto memory_of = [&](const plan::Device& device) { return MemoryOf(device).get(); };

  // Task indices, names and actor ids.
  absl::flat_hash_map<std::string, int> task_position;
  std::vector<ActorId> actor_ids(plan_.tasks_size());
  uint32_t max_index = 0;
  for (int i = 0; i < plan_.tasks_size(); ++i) {
    task_position[plan_.tasks(i).name()] = i;
    actor_ids[i] = ActorId::Make(plan_.tasks(i).stream(), TaskIndex(plan_, i));
    max_index = std::max(max_index, actor_ids[i].task_index());
  }
  task_names_.assign(max_index + 1, "");
  for (int i = 0; i < plan_.tasks_size(); ++i) {
    task_names_[actor_ids[i].task_index()] = plan_.tasks(i).name();
  }

  // Registers live on their producer's device.
  absl::flat_hash_map<std::string, int> register_position;
  std::vector<int> producer_of(plan_.registers_size(), -1);
  for (int r = 0; r < plan_.registers_size(); ++r) {
    register_position[plan_.registers(r).name()] = r;
  }
  for (int i = 0; i < plan_.tasks_size(); ++i) {
    for (const std::string& name : plan_.tasks(i).outputs()) {
      producer_of[register_position[name]] = i;
    }
  }
  // Memory pools, before the registers placed in them (ValidatePlan checked that each such
  // register's slot lies inside its pool, on its producer's device).
  absl::flat_hash_map<std::string, int> registers_in_pool;
  for (const plan::RegisterDesc& desc : plan_.registers()) {
    if (!desc.pool().empty()) ++registers_in_pool[desc.pool()];
  }
  absl::flat_hash_map<std::string, char*> pool_base;
  for (const plan::MemoryPool& pool : plan_.memory_pools()) {
    std::shared_ptr<DeviceMemory> memory = MemoryOf(pool.device());
    absl::StatusOr<void*> buffer =
        memory->Allocate(pool.bytes(), absl::StrCat("memory pool '", pool.name(), "' (",
                                                    registers_in_pool[pool.name()], " registers)"));
    if (!buffer.ok()) return buffer.status();
    pools_.push_back(PoolBuffer{memory, *buffer});
    pool_base[pool.name()] = static_cast<char*>(*buffer);
  }
  for (int r = 0; r < plan_.registers_size(); ++r) {
    const plan::RegisterDesc& desc = plan_.registers(r);
    const plan::Task& producer = plan_.tasks(producer_of[r]);
    absl::StatusOr<std::unique_ptr<Register>> reg =
        desc.pool().empty()
            ? Register::Create(
                  desc, static_cast<uint32_t>(r),
                  desc.host_memory() ? host_memory_.get() : memory_of(producer.stream().device()))
            : Register::CreateInPool(desc, static_cast<uint32_t>(r),
                                     pool_base.at(desc.pool()) + desc.pool_offset());
    if (!reg.ok()) return reg.status();
    (*reg)->set_producer(actor_ids[producer_of[r]]);
    registers_.push_back(std::move(*reg));
  }
  for (int i = 0; i < plan_.tasks_size(); ++i) {
    for (const std::string& name : plan_.tasks(i).inputs()) {
      registers_[register_position[name]]->add_consumer(actor_ids[i]);
    }
  }

  if (absl::Status status = BuildCollectiveBackends(); !status.ok()) return status;
  absl::flat_hash_map<std::pair<uint64_t, std::string>, CollectiveTurn*> turn_of_stream;
  absl::flat_hash_map<std::string, int> num_collectives;
  for (const plan::Communicator& communicator : plan_.communicators()) {
    num_collectives[communicator.name()] = communicator.num_collectives();
  }

  // One thread per stream.
  absl::flat_hash_map<uint64_t, StreamThread*> thread_of_stream;
  thread_of_task_.assign(max_index + 1, nullptr);
  StreamThread::Options thread_options{options_.spin_before_park, options_.record_events,
                                       options_.recorded_steps, options_.metrics};
  thread_options.recorded_events = &recorded_events_;
  thread_options.max_recorded_events = options_.max_recorded_events;
  actor_of_task_.assign(max_index + 1, nullptr);
  for (int i = 0; i < plan_.tasks_size(); ++i) {
    const plan::Task& task = plan_.tasks(i);
    uint64_t key = actor_ids[i].stream_key();
    StreamThread*& thread = thread_of_stream[key];
    if (thread == nullptr) {
      std::unique_ptr<StreamContext> context;
      if (options_.stream_context_factory) {
        context = options_.stream_context_factory(task.stream());
      } else if (task.stream().device().type() == plan::CPU) {
        context = std::make_unique<SynchronousStreamContext>();
      }
      if (context == nullptr) {
        return absl::FailedPreconditionError(
            absl::StrCat("task '", task.name(), "': no stream context for ",
                         StreamName(task.stream()), " (is this device type supported here?)"));
      }
      thread_options.kind = task.stream().kind() == plan::STREAM_KIND_UNSPECIFIED
                                ? plan::STREAM_COMPUTE
                                : task.stream().kind();
      threads_.push_back(std::make_unique<StreamThread>(StreamName(task.stream()),
                                                        std::move(context), this, thread_options));
      thread = threads_.back().get();
    }
    thread_of_task_[actor_ids[i].task_index()] = thread;

    if (absl::Status status = CheckRunsOnItsDevice(
            task, task.kind() == plan::COLLECTIVE
                      ? backend_of_communicator_.at(task.collective().communicator())
                      : nullptr);
        !status.ok()) {
      return status;
    }
    ActorInit init;
    init.task = &plan_.tasks(i);
    init.id = actor_ids[i];
    for (const std::string& name : task.inputs()) {
      init.inputs.push_back(registers_[register_position[name]].get());
    }
    for (const std::string& name : task.outputs()) {
      init.outputs.push_back(registers_[register_position[name]].get());
    }
    init.device_type = task.stream().device().type();
    init.stream = thread->context();
    init.memory = memory_of(task.stream().device());
    init.kernels = kernels;
    init.files = options_.files;
    init.ending = &ending_;
    init.task_names = &task_names_;
    init.metrics = options_.metrics;
    if (task.kind() == plan::SINK) {
      if (!options_.reported_sinks.has_value() || options_.reported_sinks->contains(task.name())) {
        init.sink_piece_callback = &options_.sink_piece_callback;
      }
      init.keep_sink_pieces = options_.keep_sink_pieces;
    }
    if (task.kind() == plan::VARIABLE && options_.variable_snapshot_callback) {
      init.snapshot_every_steps = options_.snapshot_every_steps;
      init.variable_snapshot_callback = &options_.variable_snapshot_callback;
    }
    if (task.kind() == plan::SEND || task.kind() == plan::RECEIVE) {
      if (options_.network == nullptr) {
        return absl::FailedPreconditionError(absl::StrCat(
            "task '", task.name(), "' talks to node ", task.peer().stream().device().node(),
            ", but this runtime was given no network"));
      }
      init.network = options_.network;
      init.deliver_from_any_thread = [this](const ActorMessage& message) {
        if (StreamThread* thread = ThreadOf(message.destination)) thread->Deliver(message);
      };
    }
    if (task.kind() == plan::COLLECTIVE) {
      // ValidatePlan checked that the communicator exists.
      const std::string& communicator = task.collective().communicator();
      init.collectives = backend_of_communicator_.at(communicator);
      CollectiveTurn*& turn = turn_of_stream[{actor_ids[i].stream_key(), communicator}];
      if (turn == nullptr) {
        collective_turns_.push_back(
            std::make_unique<CollectiveTurn>(communicator, num_collectives.at(communicator)));
        turn = collective_turns_.back().get();
      }
      init.collective_turn = turn;
    }
    absl::StatusOr<std::unique_ptr<Actor>> actor = actor_factory(init);
    if (!actor.ok()) return actor.status();
    if (absl::Status status = (*actor)->Initialize(); !status.ok()) return status;
    thread->AddActor(actor->get());
    actor_of_task_[actor_ids[i].task_index()] = actor->get();
    actors_.push_back(std::move(*actor));
  }
  VLOG(1) << "job '" << plan_.job_name() << "': " << actors_.size() << " actors on "
          << threads_.size() << " stream threads, " << registers_.size() << " registers";
  return absl::OkStatus();
}

std::shared_ptr<DeviceMemory> JobRuntime::MemoryOf(const plan::Device& device) const {
  for (int i = 0; i < plan_.devices_size(); ++i) {
    if (SameDevice(plan_.devices(i).device(), device)) return memories_[i];
  }
  return nullptr;  // ValidatePlan rules this out.
}

absl::Status JobRuntime::BuildCollectiveBackends() {
  for (const plan::Communicator& communicator : plan_.communicators()) {
    const CollectiveBackendKind kind = CollectiveBackendKindOf(communicator);
    std::unique_ptr<CollectiveBackend> backend;
    if (options_.collective_backend_factory) {
      absl::StatusOr<std::unique_ptr<CollectiveBackend>> made =
          options_.collective_backend_factory(communicator, plan_);
      if (!made.ok()) return made.status();
      backend = std::move(*made);
    }
    if (backend == nullptr && kind == CollectiveBackendKind::kNetwork &&
        options_.network != nullptr) {
      // Ranks on other nodes: CPU collectives over the job's network.
      NetworkCollectives::Options backend_options;
      backend_options.timeout = options_.collective_timeout;
      for (const plan::Device& device : communicator.devices()) {
        backend_options.memories.push_back(device.node() == plan_.node() ? MemoryOf(device)
                                                                         : nullptr);
      }
      absl::StatusOr<std::unique_ptr<CollectiveBackend>> made =
          MakeNetworkCollectives(communicator, plan_.node(), options_.network, backend_options);
      if (!made.ok()) return made.status();
      backend = std::move(*made);
    }
    if (backend == nullptr) {
      // The shared-memory backend: every rank is a CPU device of this node (a thread of this
      // process).
      for (const plan::Device& device : communicator.devices()) {
        if (device.type() != plan::CPU) {
          return absl::FailedPreconditionError(
              absl::StrCat("communicator '", communicator.name(), "' includes ", DeviceName(device),
                           ": collectives on ", DeviceTypeName(device.type()),
                           " devices need the NCCL backend, which this runtime was not given"));
        }
      }
      for (const plan::Device& device : communicator.devices()) {
        if (device.node() != plan_.node()) {
          return absl::FailedPreconditionError(absl::StrCat(
              "communicator '", communicator.name(), "' spans node ", device.node(), " (device ",
              DeviceName(device), "), but this is node ", plan_.node(),
              ": collectives between nodes need the UCX backend, which this runtime was not "
              "given"));
        }
      }
      SharedMemoryCollectives::Options backend_options;
      backend_options.timeout = options_.collective_timeout;
      backend_options.spin = options_.spin_before_park;
      backend = std::make_unique<SharedMemoryCollectives>(communicator, backend_options);
    }
    backend_of_communicator_[communicator.name()] = backend.get();
    collective_backends_.push_back(std::move(backend));
  }
  return absl::OkStatus();
}

std::map<std::string, std::string> JobRuntime::CommunicatorJoinIds() const {
  std::map<std::string, std::string> ids;
  for (const auto& backend : collective_backends_) {
    if (std::string id = backend->join_id(); !id.empty()) {
      ids.emplace(backend->communicator(), std::move(id));
    }
  }
  return ids;
}

absl::Status JobRuntime::JoinCommunicators(const std::map<std::string, std::string>& ids,
                                           absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  absl::Status status;
  for (const auto& backend : collective_backends_) {
    auto id = ids.find(backend->communicator());
    status = backend->StartJoin(id == ids.end() ? std::string() : id->second);
    if (!status.ok()) break;
  }
  for (const auto& backend : collective_backends_) {
    if (!status.ok()) break;
    status = backend->FinishJoin(deadline);
  }
  // A failed join fails the job, which aborts every backend; then every backend is asked to
  // finish at once, so that joins still under way (started before the failure, or never waited
  // for) end now rather than when the job is released, and no backend waits for peers at its
  // destruction.
  if (!status.ok()) {
    Fail(status);
    for (const auto& backend : collective_backends_) {
      backend->FinishJoin(absl::InfinitePast()).IgnoreError();
    }
  }
  return status;
}

JobRuntime::~JobRuntime() {
  if (started_ && !waited_) {
    Abort(absl::CancelledError("the job runtime was destroyed while running"));
  }
  // Joined threads no longer touch the actors. Actors next: their kernels may use their stream
  // contexts, which the threads own, as they go (a CUDA kernel selects its GPU to free its
  // scratch). Then the threads with those contexts, then registers (they free memory), then the
  // memory pools that registers' slots lie in.
  for (auto& thread : threads_) thread->Join();
  actors_.clear();
  threads_.clear();
  registers_.clear();
  for (const PoolBuffer& pool : pools_) pool.memory->Free(pool.base);
  pools_.clear();
}

int64_t JobRuntime::NowNanoseconds() const {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() -
                                                              start_time_)
      .count();
}

absl::Status JobRuntime::Start() {
  if (started_) return absl::FailedPreconditionError("the job was already started");
  started_ = true;
  start_time_ = std::chrono::steady_clock::now();
  for (auto& thread : threads_) thread->Start();
  return absl::OkStatus();
}

void JobRuntime::Fail(absl::Status status) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    // The first failure decides; an ended job (every thread exited) keeps its outcome: a peer
    // released before this node, or an abort that arrives late, fails nothing.
    if (!status_.ok() || (!threads_.empty() && exited_threads_ == threads_.size())) return;
    status_ = status;
    failed_.store(true, std::memory_order_release);
    // Kernels that wait (a sleep, a slow read) see it and return within their bound.
    ending_.store(true, std::memory_order_release);
  }
  LOG(INFO) << "job '" << plan_.job_name() << "' failed: " << status;
  ActorMessage abort;
  abort.type = MessageType::kAbort;
  for (auto& thread : threads_) thread->Deliver(abort);
  // Ranks waiting in a collective for a peer that will never come wake up now.
  for (auto& backend : collective_backends_) backend->Abort(status);
  changed_.notify_all();
}

void JobRuntime::SendToNode(const ActorMessage& message) {
  if (options_.network == nullptr) {
    Fail(absl::FailedPreconditionError(
        absl::StrCat("actor '", task_names_[message.source.task_index()], "' sends to node ",
                     message.destination.node(), ", but this runtime was given no network")));
    return;
  }
  if (absl::Status status = options_.network->SendMessage(message); !status.ok()) {
    Fail(absl::Status(status.code(),
                      absl::StrCat("actor '", task_names_[message.source.task_index()],
                                   "' could not send to node ", message.destination.node(), ": ",
                                   status.message())));
  }
}

void JobRuntime::DeliverFromNetwork(const ActorMessage& message) {
  // Every field is the peer's word: check each before anything indexes by it.
  auto refuse = [&](absl::string_view what) {
    Fail(absl::DataLossError(absl::StrCat("node ", plan_.node(), " received a malformed ",
                                          MessageTypeName(message.type), " message from node ",
                                          message.source.node(), ": ", what)));
  };
  if (!IsNetworkMessageType(message.type)) {
    refuse(absl::StrCat("type ", static_cast<int>(message.type), " does not cross nodes"));
    return;
  }
  if (message.source.node() == plan_.node()) {
    refuse(absl::StrCat("the sender ", message.source.ToString(),
                        " claims to be on this node, but arrived over the network"));
    return;
  }
  const ActorId destination = message.destination;
  const uint32_t task_index = destination.task_index();
  const Actor* actor = destination.node() == plan_.node() && task_index < actor_of_task_.size()
                           ? actor_of_task_[task_index]
                           : nullptr;
  if (actor == nullptr || actor->id() != destination) {
    refuse(absl::StrCat("it is for actor ", destination.ToString(),
                        ", which this node does not run: the nodes' plans do not belong together"));
    return;
  }
  if (absl::Status status = actor->CheckNetworkMessage(message); !status.ok()) {
    Fail(absl::DataLossError(absl::StrCat("node ", plan_.node(), ": actor '", actor->name(),
                                          "' received ", status.message())));
    return;
  }
  thread_of_task_[task_index]->Deliver(message);
}

void JobRuntime::Abort(absl::Status reason) {
  if (reason.ok()) reason = absl::CancelledError("the job was aborted");
  Fail(std::move(reason));
}

std::string JobRuntime::DiagnoseStall() {
  std::string report;
  for (auto& thread : threads_) absl::StrAppend(&report, thread->Diagnose(absl::Seconds(1)));
  return report;
}

absl::Status JobRuntime::Wait() {
  if (!started_) return absl::FailedPreconditionError("the job was not started");
  if (waited_) {
    std::lock_guard<std::mutex> lock(mutex_);
    return status_;
  }
  // Watch for a stall while the threads run: no act or message anywhere, and nothing running.
  int64_t last_progress = -1;
  auto last_change = std::chrono::steady_clock::now();
  const auto stall_timeout = absl::ToChronoNanoseconds(options_.stall_timeout);
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      if (exited_threads_ == threads_.size()) break;
      changed_.wait_for(lock, std::chrono::milliseconds(20));
      if (exited_threads_ == threads_.size()) break;
    }
    int64_t progress = 0;
    bool busy = false;
    for (auto& thread : threads_) {
      progress += thread->progress();
      busy = busy || thread->busy();
    }
    auto now = std::chrono::steady_clock::now();
    if (progress != last_progress || busy) {
      last_progress = progress;
      last_change = now;
    } else if (!failed_.load(std::memory_order_acquire) && now - last_change > stall_timeout) {
      std::string report = DiagnoseStall();
      Fail(absl::DeadlineExceededError(absl::StrCat(
          "job '", plan_.job_name(), "' stalled: no actor could act for ",
          absl::FormatDuration(options_.stall_timeout), " and the job is not done.\n", report)));
    }
  }
  for (auto& thread : threads_) thread->Join();
  waited_ = true;
  for (auto& thread : threads_) {
    std::vector<ActEvent> events = thread->TakeEvents();
    events_.insert(events_.end(), events.begin(), events.end());
  }
  std::sort(events_.begin(), events_.end(), [](const ActEvent& a, const ActEvent& b) {
    return a.start_nanoseconds < b.start_nanoseconds;
  });
  // The end of the last act when acts were recorded, else the moment the last thread exited.
  makespan_nanoseconds_ = events_.empty() ? last_exit_nanoseconds_ : 0;
  for (const ActEvent& event : events_) {
    makespan_nanoseconds_ = std::max(makespan_nanoseconds_, event.end_nanoseconds);
  }
  std::lock_guard<std::mutex> lock(mutex_);
  return status_;
}

void JobRuntime::ThreadExited() {
  const int64_t now = NowNanoseconds();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++exited_threads_;
    last_exit_nanoseconds_ = std::max(last_exit_nanoseconds_, now);
  }
  changed_.notify_all();
}

absl::Status JobRuntime::Run() {
  if (absl::Status status = Start(); !status.ok()) return status;
  return Wait();
}

std::vector<ActorSummary> JobRuntime::Summaries() const {
  std::vector<ActorSummary> summaries;
  for (const auto& actor : actors_) summaries.push_back(actor->summary());
  return summaries;
}

const Register* JobRuntime::FindRegister(const std::string& name) const {
  for (const auto& reg : registers_) {
    if (reg->name() == name) return reg.get();
  }
  return nullptr;
}

const Actor* JobRuntime::FindActor(const std::string& task_name) const {
  for (const auto& actor : actors_) {
    if (actor->name() == task_name) return actor.get();
  }
  return nullptr;
}

absl::StatusOr<VariableOnHost> JobRuntime::CopyVariableToHost(const std::string& task) const {
  const auto* variable = dynamic_cast<const VariableHolder*>(FindActor(task));
  if (variable == nullptr) {
    return absl::NotFoundError(absl::StrCat("the job has no variable task named '", task, "'"));
  }
  return variable->CopyVariableToHost();
}

}  // namespace loom
