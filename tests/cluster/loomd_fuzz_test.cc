// Malformed traffic against a running coordinator (a loomd process with a worker, a job running):
// 600 requests to JobService and ClusterService as raw bytes (garbage, random, truncated,
// bit-flipped, and valid messages with fields set to absurd values), 30 WatchJob streams of the
// same, crafted NodeService sessions (garbage, nothing, a heartbeat or job update of an unknown
// node, absurd registrations, the real worker's rank and name, a stranger's updates and loss
// pieces for the running job) and 150 random ones. Every call ends within its deadline, bytes
// that do not parse get an error status, absurd registrations get INVALID_ARGUMENT, the running
// job ignores the stranger; afterwards the daemon still runs, its health is SERVING, the real
// worker is READY and a job across both nodes succeeds. Deterministic (a fixed seed), about 1 s.
#include <signal.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/raw_unary_call.h"
#include "gmock/gmock.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"
#include "google/protobuf/reflection.h"
#include "google/protobuf/stubs/logging.h"
#include "google/protobuf/text_format.h"
#include "grpcpp/generic/generic_stub.h"
#include "gtest/gtest.h"
#include "proto/loom/v1/cluster_service.pb.h"
#include "proto/loom/v1/job_service.pb.h"
#include "proto/loom/v1/node_service.pb.h"
#include "tests/cluster/loomd_client.h"
#include "tests/cluster/loomd_process.h"

namespace loom::testing {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

constexpr uint64_t kSeed = 20251122;
constexpr int kUnaryCases = 600;
constexpr int kWatchCases = 30;
constexpr int kRandomSessionCases = 150;
constexpr absl::Duration kCallDeadline = absl::Seconds(5);
constexpr absl::Duration kBound = absl::Seconds(30);
constexpr char kSessionMethod[] = "/loom.v1.NodeService/Session";

using Random = std::mt19937_64;

int64_t Uniform(Random& random, int64_t low, int64_t high) {
  return std::uniform_int_distribution<int64_t>(low, high)(random);
}

std::string RandomBytes(Random& random, int64_t length) {
  std::string bytes(length, '\0');
  for (char& byte : bytes) byte = static_cast<char>(Uniform(random, 0, 255));
  return bytes;
}

std::string RandomText(Random& random, int64_t length) {
  std::string text(length, ' ');
  for (char& character : text) character = static_cast<char>(Uniform(random, 32, 126));
  return text;
}

// Bytes no protobuf parser accepts: field number 0 is invalid, whatever follows.
std::string Garbage(Random& random) {
  return std::string(1, '\0') + RandomBytes(random, Uniform(random, 0, 300));
}

// Sets one field of `message` (or of a message inside it) to an absurd value.
void MangleOneField(Message* message, Random& random, int depth) {
  const google::protobuf::Descriptor* descriptor = message->GetDescriptor();
  if (descriptor->field_count() == 0) return;
  const FieldDescriptor* field =
      descriptor->field(static_cast<int>(Uniform(random, 0, descriptor->field_count() - 1)));
  const Reflection* reflection = message->GetReflection();
  const int64_t integers[] = {0,
                              -1,
                              1,
                              std::numeric_limits<int32_t>::max(),
                              std::numeric_limits<int32_t>::min(),
                              std::numeric_limits<int64_t>::max(),
                              std::numeric_limits<int64_t>::min(),
                              Uniform(random, -1000, 1000)};
  const int64_t integer = integers[Uniform(random, 0, 7)];
  const double reals[] = {std::numeric_limits<double>::quiet_NaN(),
                          std::numeric_limits<double>::infinity(), -1e308, 0.0, 1e-320};
  const double real = reals[Uniform(random, 0, 4)];
  const std::string texts[] = {"",
                               std::string(4096, 'x'),
                               "node65535/cpu:4095",
                               "node7/cuda:-1",
                               "../../../../etc/passwd",
                               "S(99)",
                               RandomText(random, Uniform(random, 1, 40))};
  const std::string text = texts[Uniform(random, 0, 6)];
  if (field->is_repeated()) {
    if (Uniform(random, 0, 3) == 0) {
      reflection->ClearField(message, field);
      return;
    }
    const int64_t count = Uniform(random, 1, 3);
    for (int64_t i = 0; i < count; ++i) {
      switch (field->cpp_type()) {
        case FieldDescriptor::CPPTYPE_INT32:
          reflection->AddInt32(message, field, static_cast<int32_t>(integer));
          break;
        case FieldDescriptor::CPPTYPE_INT64:
          reflection->AddInt64(message, field, integer);
          break;
        case FieldDescriptor::CPPTYPE_UINT32:
          reflection->AddUInt32(message, field, static_cast<uint32_t>(integer));
          break;
        case FieldDescriptor::CPPTYPE_UINT64:
          reflection->AddUInt64(message, field, static_cast<uint64_t>(integer));
          break;
        case FieldDescriptor::CPPTYPE_DOUBLE:
          reflection->AddDouble(message, field, real);
          break;
        case FieldDescriptor::CPPTYPE_FLOAT:
          reflection->AddFloat(message, field, static_cast<float>(real));
          break;
        case FieldDescriptor::CPPTYPE_BOOL:
          reflection->AddBool(message, field, integer % 2 != 0);
          break;
        case FieldDescriptor::CPPTYPE_ENUM:
          reflection->AddEnumValue(message, field, static_cast<int>(integer % 1000));
          break;
        case FieldDescriptor::CPPTYPE_STRING:
          reflection->AddString(message, field,
                                field->type() == FieldDescriptor::TYPE_BYTES
                                    ? RandomBytes(random, Uniform(random, 0, 64))
                                    : text);
          break;
        case FieldDescriptor::CPPTYPE_MESSAGE: {
          Message* added = reflection->AddMessage(message, field);
          if (depth < 4) MangleOneField(added, random, depth + 1);
          break;
        }
      }
    }
    return;
  }
  switch (field->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      reflection->SetInt32(message, field, static_cast<int32_t>(integer));
      break;
    case FieldDescriptor::CPPTYPE_INT64:
      reflection->SetInt64(message, field, integer);
      break;
    case FieldDescriptor::CPPTYPE_UINT32:
      reflection->SetUInt32(message, field, static_cast<uint32_t>(integer));
      break;
    case FieldDescriptor::CPPTYPE_UINT64:
      reflection->SetUInt64(message, field, static_cast<uint64_t>(integer));
      break;
    case FieldDescriptor::CPPTYPE_DOUBLE:
      reflection->SetDouble(message, field, real);
      break;
    case FieldDescriptor::CPPTYPE_FLOAT:
      reflection->SetFloat(message, field, static_cast<float>(real));
      break;
    case FieldDescriptor::CPPTYPE_BOOL:
      reflection->SetBool(message, field, !reflection->GetBool(*message, field));
      break;
    case FieldDescriptor::CPPTYPE_ENUM:
      reflection->SetEnumValue(message, field, static_cast<int>(integer % 1000));
      break;
    case FieldDescriptor::CPPTYPE_STRING:
      reflection->SetString(message, field,
                            field->type() == FieldDescriptor::TYPE_BYTES
                                ? RandomBytes(random, Uniform(random, 0, 64))
                                : text);
      break;
    case FieldDescriptor::CPPTYPE_MESSAGE:
      if (depth < 4) MangleOneField(reflection->MutableMessage(message, field), random, depth + 1);
      break;
  }
}

enum class Mutation { kGarbage, kRandomBytes, kTruncated, kBitFlips, kMangledFields };

// A malformed variant of `valid` (a serialized `prototype`).
std::string Mutate(const Message& prototype, const std::string& valid, Mutation mutation,
                   Random& random) {
  switch (mutation) {
    case Mutation::kGarbage:
      return Garbage(random);
    case Mutation::kRandomBytes:
      return RandomBytes(random, Uniform(random, 0, 200));
    case Mutation::kTruncated:
      return valid.substr(0, Uniform(random, 0, std::max<int64_t>(valid.size() - 1, 0)));
    case Mutation::kBitFlips: {
      std::string flipped = valid;
      if (flipped.empty()) return Garbage(random);
      for (int64_t i = Uniform(random, 1, 8); i > 0; --i) {
        flipped[Uniform(random, 0, flipped.size() - 1)] ^=
            static_cast<char>(1 << Uniform(random, 0, 7));
      }
      return flipped;
    }
    case Mutation::kMangledFields: {
      std::unique_ptr<Message> message(prototype.New());
      message->ParseFromString(valid);
      for (int64_t i = Uniform(random, 1, 4); i > 0; --i) MangleOneField(message.get(), random, 0);
      return message->SerializeAsString();
    }
  }
  return valid;
}

// Whether `bytes` parse as `prototype`'s type (what the daemon's gRPC does first).
bool Parses(const Message& prototype, const std::string& bytes) {
  google::protobuf::LogSilencer silencer;  // invalid UTF-8 is an error it would log
  std::unique_ptr<Message> message(prototype.New());
  return message->ParseFromString(bytes);
}

// A streaming call with raw messages: writes `requests`, half-closes, reads up to
// `max_responses` responses (then cancels), and returns the call's status and the responses.
struct StreamOutcome {
  grpc::Status status;
  std::vector<std::string> responses;
};

StreamOutcome RawStreamingCall(const std::shared_ptr<grpc::Channel>& channel,
                               const std::string& method, const std::vector<std::string>& requests,
                               size_t max_responses = 100) {
  grpc::GenericStub stub(channel);
  grpc::CompletionQueue queue;
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + kCallDeadline));
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call =
      stub.PrepareCall(&context, method, &queue);
  // One operation at a time; the context's deadline ends any of them.
  auto await = [&queue] {
    void* tag = nullptr;
    bool ok = false;
    return queue.Next(&tag, &ok) && ok;
  };
  call->StartCall(reinterpret_cast<void*>(1));
  bool open = await();
  for (const std::string& request : requests) {
    if (!open) break;
    grpc::Slice slice(request);
    grpc::ByteBuffer buffer(&slice, 1);
    call->Write(buffer, reinterpret_cast<void*>(2));
    open = await();
  }
  if (open) {
    call->WritesDone(reinterpret_cast<void*>(3));
    open = await();
  }
  StreamOutcome outcome;
  while (true) {
    grpc::ByteBuffer buffer;
    call->Read(&buffer, reinterpret_cast<void*>(4));
    if (!await()) break;
    std::vector<grpc::Slice> slices;
    std::string bytes;
    if (buffer.Dump(&slices).ok()) {
      for (const grpc::Slice& slice : slices) {
        bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
      }
    }
    outcome.responses.push_back(std::move(bytes));
    if (outcome.responses.size() >= max_responses) context.TryCancel();
  }
  call->Finish(&outcome.status, reinterpret_cast<void*>(5));
  await();
  queue.Shutdown();
  void* tag = nullptr;
  bool ok = false;
  while (queue.Next(&tag, &ok)) {
  }
  return outcome;
}

std::string Serialized(const Message& message) { return message.SerializeAsString(); }

v1::WorkerMessage Registration(const std::string& name, int rank, int devices) {
  v1::WorkerMessage message;
  v1::RegisterNode* node = message.mutable_register_();
  node->set_name(name);
  node->set_rank(rank);
  node->set_address("127.0.0.1:1");
  node->set_version("fuzz");
  for (int index = 0; index < devices; ++index) {
    v1::DeviceInfo* device = node->add_devices();
    device->set_type("cpu");
    device->set_index(index);
  }
  return message;
}

class LoomdFuzzTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string prefix = absl::StrCat(::testing::TempDir(), "/loomd-fuzz-", getpid(), "-");
    auto coordinator = LoomdProcess::Start(
        LOOMD_BINARY,
        {"--devices", "cpu:2", "--node-name", "coordinator", "--memory-budget-per-device", "256MiB",
         "--max-message-size", "1MiB", "--heartbeat-interval", "200ms", "--node-timeout", "2s",
         "--shutdown-grace", "0s"},
        absl::StrCat(prefix, "coordinator.log"));
    ASSERT_TRUE(coordinator.ok()) << coordinator.status();
    coordinator_ = *std::move(coordinator);
    auto worker =
        LoomdProcess::Start(LOOMD_BINARY,
                            {"--devices", "cpu:1", "--node-name", "worker-1", "--node-rank", "1",
                             "--coordinator", coordinator_->address(), "--shutdown-grace", "0s"},
                            absl::StrCat(prefix, "worker.log"));
    ASSERT_TRUE(worker.ok()) << worker.status();
    worker_ = *std::move(worker);
    client_ = std::make_unique<LoomdClient>(coordinator_->address());
    ASSERT_TRUE(client_->WaitForReadyNodes(2, absl::Seconds(20))) << coordinator_->Log();
  }

  void TearDown() override {
    if (HasFailure()) {
      if (coordinator_ != nullptr) std::cerr << coordinator_->Log() << "\n";
      if (worker_ != nullptr) std::cerr << worker_->Log() << "\n";
    }
    if (worker_ != nullptr) worker_->Signal(SIGTERM);
    if (coordinator_ != nullptr) coordinator_->Signal(SIGTERM);
  }

  // The example MLP, data parallel over the coordinator's node and the worker's.
  static job::Job TwoNodeJob(int64_t steps) {
    std::ifstream file(LOOM_SOURCE_DIR "/examples/jobs/mlp_regression.pbtxt");
    std::stringstream text;
    text << file.rdbuf();
    job::Job job;
    EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text.str(), &job));
    job.mutable_placement()->clear_devices();
    job.mutable_placement()->add_devices("cpu:0");
    job.mutable_placement()->add_devices("node1/cpu:0");
    job.set_num_steps(steps);
    return job;
  }

  // A unary call of raw bytes: it must end within its deadline, on a daemon still serving.
  grpc::Status Call(const std::string& method, const std::string& bytes) {
    std::string response;
    auto context = LoomdClient::Context(kCallDeadline);
    grpc::Status status = RawUnaryCall(client_->channel(), context.get(), method, bytes, &response);
    EXPECT_NE(status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << method;
    EXPECT_NE(status.error_code(), grpc::StatusCode::UNAVAILABLE)
        << method << ": " << status.error_message();
    return status;
  }

  // A session of raw messages; it must end within its deadline.
  StreamOutcome Session(const std::vector<std::string>& messages) {
    StreamOutcome outcome = RawStreamingCall(client_->channel(), kSessionMethod, messages);
    EXPECT_NE(outcome.status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
    EXPECT_NE(outcome.status.error_code(), grpc::StatusCode::UNAVAILABLE)
        << outcome.status.error_message();
    return outcome;
  }

  std::unique_ptr<LoomdProcess> coordinator_;
  std::unique_ptr<LoomdProcess> worker_;
  std::unique_ptr<LoomdClient> client_;
};

TEST_F(LoomdFuzzTest, MalformedRequestsGetErrorsAndTheDaemonStaysUp) {
  const absl::Time start = absl::Now();
  Random random(kSeed);

  // A stranger joins (and leaves: it is MISSING) before a job that runs throughout, so that the
  // job knows it as a node taking no part; requests meet a running job.
  {
    StreamOutcome joined = Session({Serialized(Registration("stranger", -1, 1))});
    ASSERT_EQ(joined.responses.size(), 1u) << joined.status.error_message();
  }
  absl::StatusOr<std::string> running = client_->Submit(TwoNodeJob(1'000'000));
  ASSERT_TRUE(running.ok()) << running.status();
  while (client_->Get(*running).steps_done() < 1 && absl::Now() - start < absl::Seconds(10)) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_EQ(client_->Get(*running).state(), v1::JOB_STATE_RUNNING);

  // Valid requests of every unary method, to mutate.
  v1::SubmitJobRequest submit;
  *submit.mutable_job() = TwoNodeJob(2);
  v1::GetJobRequest get;
  get.set_job_id(*running);
  v1::ListJobsRequest list;
  list.add_states(v1::JOB_STATE_RUNNING);
  v1::CancelJobRequest cancel;
  cancel.set_job_id("job-999");
  cancel.set_reason("fuzz");
  v1::GetPlanRequest plan;
  plan.set_job_id(*running);
  v1::ListNodesRequest nodes;
  struct Method {
    std::string name;
    const Message* request;
  };
  const std::vector<Method> methods = {
      {"/loom.v1.JobService/SubmitJob", &submit}, {"/loom.v1.JobService/GetJob", &get},
      {"/loom.v1.JobService/ListJobs", &list},    {"/loom.v1.JobService/CancelJob", &cancel},
      {"/loom.v1.JobService/GetPlan", &plan},     {"/loom.v1.ClusterService/ListNodes", &nodes}};
  std::map<std::string, int> errors_by_method;
  for (int i = 0; i < kUnaryCases; ++i) {
    const Method& method = methods[Uniform(random, 0, methods.size() - 1)];
    const auto mutation = static_cast<Mutation>(Uniform(random, 0, 4));
    const std::string bytes =
        Mutate(*method.request, Serialized(*method.request), mutation, random);
    grpc::Status status = Call(method.name, bytes);
    if (!Parses(*method.request, bytes)) {
      EXPECT_FALSE(status.ok()) << method.name << " took bytes that do not parse (case " << i
                                << ")";
    }
    errors_by_method[method.name] += !status.ok();
    if (i % 50 == 49) {
      ASSERT_TRUE(coordinator_->Running()) << "after case " << i;
    }
  }

  // WatchJob (a server stream) with the same mutations.
  v1::WatchJobRequest watch;
  watch.set_job_id(*running);
  for (int i = 0; i < kWatchCases; ++i) {
    const auto mutation = static_cast<Mutation>(Uniform(random, 0, 4));
    const std::string bytes = Mutate(watch, Serialized(watch), mutation, random);
    StreamOutcome outcome =
        RawStreamingCall(client_->channel(), "/loom.v1.JobService/WatchJob", {bytes}, 2);
    if (!Parses(watch, bytes)) {
      EXPECT_FALSE(outcome.status.ok()) << "WatchJob case " << i;
    }
  }

  // NodeService sessions, crafted.
  auto code_of = [&](const std::vector<std::string>& messages) {
    return Session(messages).status.error_code();
  };
  v1::WorkerMessage heartbeat;
  heartbeat.mutable_heartbeat();
  v1::WorkerMessage update;
  update.mutable_job()->set_job_id(*running);
  update.mutable_job()->set_connected(true);
  EXPECT_EQ(code_of({Garbage(random)}), grpc::StatusCode::INVALID_ARGUMENT) << "garbage first";
  EXPECT_EQ(code_of({}), grpc::StatusCode::INVALID_ARGUMENT) << "nothing";
  EXPECT_EQ(code_of({Serialized(heartbeat)}), grpc::StatusCode::INVALID_ARGUMENT)
      << "a heartbeat of an unknown node";
  EXPECT_EQ(code_of({Serialized(update)}), grpc::StatusCode::INVALID_ARGUMENT)
      << "a job update of an unknown node";
  std::vector<std::pair<std::string, v1::WorkerMessage>> absurd = {
      {"no name", Registration("", -1, 1)},
      {"rank 0", Registration("absurd", 0, 1)},
      {"rank 2^31-1", Registration("absurd", std::numeric_limits<int32_t>::max(), 1)},
      {"rank -7", Registration("absurd", -7, 1)},
      {"a 100 KB name", Registration(std::string(100'000, 'n'), -1, 1)},
      {"10000 devices", Registration("absurd", -1, 10'000)},
      {"the real worker's rank", Registration("impostor", 1, 1)}};
  v1::WorkerMessage device_type = Registration("absurd", -1, 1);
  device_type.mutable_register_()->mutable_devices(0)->set_type("tpu");
  absurd.emplace_back("a tpu", device_type);
  v1::WorkerMessage device_index = Registration("absurd", -1, 1);
  device_index.mutable_register_()->mutable_devices(0)->set_index(-1);
  absurd.emplace_back("device index -1", device_index);
  v1::WorkerMessage twice = Registration("absurd", -1, 1);
  *twice.mutable_register_()->add_devices() = twice.register_().devices(0);
  absurd.emplace_back("a device twice", twice);
  v1::WorkerMessage budget = Registration("absurd", -1, 1);
  budget.mutable_register_()->mutable_devices(0)->set_memory_budget_bytes(-1);
  absurd.emplace_back("a negative budget", budget);
  for (const auto& [what, message] : absurd) {
    EXPECT_EQ(code_of({Serialized(message)}), grpc::StatusCode::INVALID_ARGUMENT) << what;
  }
  EXPECT_EQ(code_of({Serialized(Registration("worker-1", -1, 1))}),
            grpc::StatusCode::ALREADY_EXISTS)
      << "the real worker's name";

  // A stranger registers, then sends updates for the running job it takes no part in (its loss
  // pieces too, with sizes that do not match), updates of an unknown job, and garbage.
  v1::GetPlanResponse running_plan;
  {
    std::string bytes;
    auto context = LoomdClient::Context(kCallDeadline);
    ASSERT_TRUE(RawUnaryCall(client_->channel(), context.get(), "/loom.v1.JobService/GetPlan",
                             Serialized(plan), &bytes)
                    .ok());
    ASSERT_TRUE(running_plan.ParseFromString(bytes));
  }
  std::vector<std::string> stranger = {Serialized(Registration("stranger", -1, 1)),
                                       Serialized(heartbeat)};
  // Pieces of every loss sink for steps the job has yet to make (were they taken, those steps
  // would show a loss of about 3.4e38, or never finish), and pieces whose size does not match.
  const int64_t ahead = client_->Get(*running).steps_done() + 200;
  auto piece_message = [&](const std::string& sink, int64_t piece, int64_t bytes) {
    v1::WorkerMessage message;
    message.mutable_job()->set_job_id(*running);
    v1::SinkPieceUpdate* forwarded = message.mutable_job()->mutable_piece();
    forwarded->set_sink(sink);
    forwarded->set_piece(piece);
    forwarded->set_data_type(plan::FLOAT32);
    forwarded->set_data(std::string(bytes, '\x7f'));
    return Serialized(message);
  };
  for (const plan::Fetch& fetch : running_plan.plan().fetches()) {
    for (const std::string& sink : fetch.sinks()) {
      for (int64_t piece = ahead; piece < ahead + 20; ++piece) {
        stranger.push_back(piece_message(sink, piece, 4));
      }
      for (int64_t bytes : {0, 3, 1 << 16}) stranger.push_back(piece_message(sink, ahead, bytes));
    }
  }
  for (int i = 0; i < 20; ++i) {
    v1::WorkerMessage message = update;
    if (i % 2 == 1) message.mutable_job()->set_job_id("job-999");
    MangleOneField(message.mutable_job(), random, 0);
    stranger.push_back(Serialized(message));
  }
  stranger.push_back(Garbage(random));
  StreamOutcome session = Session(stranger);
  ASSERT_FALSE(session.responses.empty()) << session.status.error_message();
  v1::CoordinatorMessage registered;
  ASSERT_TRUE(registered.ParseFromString(session.responses[0]));
  EXPECT_TRUE(registered.has_registered());

  // NodeService sessions, random: mangled registrations, heartbeats and updates, and garbage.
  const std::vector<v1::WorkerMessage> bases = {Registration("fuzz", -1, 2), heartbeat, update};
  for (int i = 0; i < kRandomSessionCases; ++i) {
    std::vector<std::string> messages;
    for (int64_t count = Uniform(random, 1, 5); count > 0; --count) {
      const v1::WorkerMessage& base = bases[Uniform(random, 0, bases.size() - 1)];
      const auto mutation = static_cast<Mutation>(Uniform(random, 0, 4));
      messages.push_back(Mutate(base, Serialized(base), mutation, random));
    }
    Session(messages);
  }
  std::cerr << "unary errors by method:";
  for (const auto& [method, errors] : errors_by_method) std::cerr << " " << method << "=" << errors;
  std::cerr << "\n";

  // Still up, serving, with its worker, and running jobs.
  ASSERT_TRUE(coordinator_->Running());
  EXPECT_TRUE(client_->Serving());
  std::vector<v1::NodeInfo> after = client_->Nodes();
  ASSERT_GE(after.size(), 2u);
  EXPECT_EQ(after[1].name(), "worker-1");
  EXPECT_EQ(after[1].state(), v1::NODE_STATE_READY);
  // The running job went on past the stranger's pieces, unaffected.
  const absl::Time waited = absl::Now();
  while (client_->Get(*running).steps_done() < ahead + 40 &&
         absl::Now() - waited < absl::Seconds(15)) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_GE(client_->Get(*running).steps_done(), ahead + 40);
  EXPECT_EQ(client_->Get(*running).state(), v1::JOB_STATE_RUNNING)
      << client_->Get(*running).error().message();
  for (const v1::JobInfo& job : client_->List()) {
    if (job.state() == v1::JOB_STATE_PENDING || job.state() == v1::JOB_STATE_LAUNCHING ||
        job.state() == v1::JOB_STATE_RUNNING) {
      EXPECT_TRUE(client_->Cancel(job.job_id()).ok()) << job.job_id();
    }
  }
  JobOutcome cancelled = client_->Watch(*running, absl::Seconds(10));
  EXPECT_EQ(cancelled.state, v1::JOB_STATE_CANCELLED) << cancelled.error;
  EXPECT_FALSE(cancelled.losses.empty());
  for (double loss : cancelled.losses) EXPECT_LT(loss, 1e30);
  JobOutcome outcome = client_->Run(TwoNodeJob(3));
  EXPECT_EQ(outcome.state, v1::JOB_STATE_SUCCEEDED) << outcome.error;
  EXPECT_EQ(outcome.losses.size(), 3u);
  const absl::Duration elapsed = absl::Now() - start;
  std::cerr << "fuzzed for " << elapsed << "\n";
  EXPECT_LT(elapsed, kBound);
}

}  // namespace
}  // namespace loom::testing
