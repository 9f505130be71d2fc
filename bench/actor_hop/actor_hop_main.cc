// bench_actor_hop: what one message hop between two actors costs, on one thread and across two,
// in Loom and in CAF 0.17 (event-based actors ping-ponging an integer), measured in one run.
//
// Loom: a SOURCE of N pieces writes a one-slot register ([1] float32) read by a COMPUTE whose own
// output nobody reads; both run the "bench_noop" kernel. With one slot every piece is exactly two
// hops (READY producer -> consumer, FREE consumer -> producer) and the two never overlap, so
// hop = elapsed / (2 N), where elapsed is the wall time of JobRuntime::Start() + Wait() (it
// includes starting and joining the stream threads, printed separately as the fixed cost).
// CAF: ping sends N - 1, ..., 0 to pong, pong returns each value to ping; hop = elapsed / (2 N).
// On both sides a hop is one message and the handling it causes at the receiver (in Loom the act
// of a no-op kernel with the runtime's bookkeeping, in CAF the handler).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "actors/actor_factory.h"
#include "bench/common/bench_util.h"
#include "caf/all.hpp"
#include "glog/logging.h"
#include "runtime/job_runtime.h"
#include "testing/plan_builder.h"

namespace loom::bench {
namespace {

constexpr int kRepetitions = 7;
constexpr int64_t kSameThreadPieces = 200'000;
constexpr int64_t kCrossThreadPieces = 30'000;
constexpr int64_t kLatencyPieces = 10'000;
constexpr double kCrossThreadGoalMicroseconds = 2.0;

using Clock = std::chrono::steady_clock;

double NanosecondsSince(Clock::time_point start) {
  return std::chrono::duration<double, std::nano>(Clock::now() - start).count();
}

// ---- Loom -------------------------------------------------------------------------------------

plan::Plan HopPlan(int64_t pieces, int consumer_device) {
  PlanBuilder builder("actor_hop");
  builder.AddCpuDevices(consumer_device + 1);
  builder.AddRegister("token", {1}, plan::FLOAT32, 1);
  builder.AddRegister("unread", {1}, plan::FLOAT32, 1);
  builder.AddTask("producer", plan::SOURCE, 0, {}, {"token"}, "bench_noop").set_num_pieces(pieces);
  builder.AddTask("consumer", plan::COMPUTE, consumer_device, {"token"}, {"unread"}, "bench_noop");
  return builder.plan();
}

struct LoomRun {
  double elapsed_nanoseconds = 0;
  std::unique_ptr<JobRuntime> job;
};

absl::StatusOr<LoomRun> RunLoom(const KernelRegistry& kernels, int64_t pieces, int consumer_device,
                                bool record_events) {
  JobOptions options;
  options.record_events = record_events;
  absl::StatusOr<std::unique_ptr<JobRuntime>> job =
      JobRuntime::Create(HopPlan(pieces, consumer_device), &kernels, MakeActorFactory(), options);
  if (!job.ok()) return job.status();
  LoomRun run;
  const Clock::time_point start = Clock::now();
  if (absl::Status status = (*job)->Start(); !status.ok()) return status;
  if (absl::Status status = (*job)->Wait(); !status.ok()) return status;
  run.elapsed_nanoseconds = NanosecondsSince(start);
  run.job = std::move(*job);
  const int64_t acts = run.job->Summaries()[0].acts + run.job->Summaries()[1].acts;
  if (acts != 2 * pieces) {
    return absl::InternalError(absl::StrCat("expected ", 2 * pieces, " acts, saw ", acts));
  }
  return run;
}

absl::StatusOr<double> LoomHopNanoseconds(const KernelRegistry& kernels, int64_t pieces,
                                          int consumer_device) {
  absl::StatusOr<LoomRun> run = RunLoom(kernels, pieces, consumer_device, false);
  if (!run.ok()) return run.status();
  return run->elapsed_nanoseconds / (2.0 * pieces);
}

// From the event record of a cross-thread run: per piece p, the round trip
// producer start(p + 1) - producer start(p) (producer act, READY, consumer act, FREE), and the
// two one-way hops without the acts: consumer start(p) - producer end(p) and
// producer start(p + 1) - consumer end(p).
struct LatencySample {
  double median_round_trip_nanoseconds = 0;
  double median_ready_hop_nanoseconds = 0;
  double median_free_hop_nanoseconds = 0;
  double p99_round_trip_nanoseconds = 0;
};

absl::StatusOr<LatencySample> LoomCrossThreadLatency(const KernelRegistry& kernels,
                                                     int64_t pieces) {
  absl::StatusOr<LoomRun> run = RunLoom(kernels, pieces, /*consumer_device=*/1, true);
  if (!run.ok()) return run.status();
  const uint32_t producer = run->job->FindActor("producer")->id().task_index();
  std::vector<ActEvent> produced(pieces);
  std::vector<ActEvent> consumed(pieces);
  for (const ActEvent& event : run->job->events()) {
    if (event.piece < 0 || event.piece >= pieces) continue;
    (event.task_index == producer ? produced : consumed)[event.piece] = event;
  }
  std::vector<double> round_trips;
  std::vector<double> ready_hops;
  std::vector<double> free_hops;
  for (int64_t p = 0; p + 1 < pieces; ++p) {
    round_trips.push_back(produced[p + 1].start_nanoseconds - produced[p].start_nanoseconds);
    ready_hops.push_back(consumed[p].start_nanoseconds - produced[p].end_nanoseconds);
    free_hops.push_back(produced[p + 1].start_nanoseconds - consumed[p].end_nanoseconds);
  }
  LatencySample sample;
  sample.median_round_trip_nanoseconds = Median(round_trips);
  sample.median_ready_hop_nanoseconds = Median(ready_hops);
  sample.median_free_hop_nanoseconds = Median(free_hops);
  std::sort(round_trips.begin(), round_trips.end());
  sample.p99_round_trip_nanoseconds = round_trips[round_trips.size() * 99 / 100];
  return sample;
}

// ---- CAF --------------------------------------------------------------------------------------

// Which thread handled each message of a traced ping-pong, to tell how many hops crossed threads.
// Ping and pong alternate strictly, so one handler at a time touches it (the mailboxes order the
// accesses).
struct ThreadTrace {
  std::thread::id last_thread;
  int64_t messages = 0;
  int64_t thread_changes = 0;

  void Record() {
    const std::thread::id thread = std::this_thread::get_id();
    if (messages > 0 && thread != last_thread) ++thread_changes;
    last_thread = thread;
    ++messages;
  }
};

caf::behavior Pong(caf::event_based_actor* self, ThreadTrace* trace) {
  return {[=](int32_t value) {
    if (trace != nullptr) trace->Record();
    return value;
  }};
}

// Counts down from the first value it receives: each value v > 0 goes to pong as v - 1 and comes
// back; at 0 it fulfils `done` and quits.
caf::behavior Ping(caf::event_based_actor* self, caf::actor pong, std::promise<void>* done,
                   ThreadTrace* trace) {
  return {[=](int32_t remaining) {
    if (trace != nullptr) trace->Record();
    if (remaining == 0) {
      done->set_value();
      self->quit();
      return;
    }
    self->send(pong, remaining - 1);
  }};
}

// One ping-pong of `round_trips` exchanges in `system`: 2 * round_trips hops (plus the kick-off).
// `detached`: each actor on its own thread instead of the scheduler's workers.
double CafHopNanoseconds(caf::actor_system& system, int32_t round_trips, bool detached = false,
                         ThreadTrace* trace = nullptr) {
  caf::actor pong = detached ? system.spawn<caf::detached>(Pong, trace) : system.spawn(Pong, trace);
  std::promise<void> done;
  std::future<void> finished = done.get_future();
  caf::actor ping = detached ? system.spawn<caf::detached>(Ping, pong, &done, trace)
                             : system.spawn(Ping, pong, &done, trace);
  const Clock::time_point start = Clock::now();
  caf::anon_send(ping, round_trips);
  finished.wait();
  const double elapsed = NanosecondsSince(start);
  caf::anon_send_exit(pong, caf::exit_reason::user_shutdown);
  system.await_all_actors_done();
  return elapsed / (2.0 * round_trips);
}

std::unique_ptr<caf::actor_system> MakeCafSystem(caf::actor_system_config* config, int threads) {
  config->set("scheduler.max-threads", threads);
  return std::make_unique<caf::actor_system>(*config);
}

// ---- Main -------------------------------------------------------------------------------------

int Main() {
  KernelRegistry kernels;
  ExitIfError(RegisterNoopKernel(&kernels), "registering bench_noop");

  caf::actor_system_config one_worker_config;
  std::unique_ptr<caf::actor_system> one_worker = MakeCafSystem(&one_worker_config, 1);
  caf::actor_system_config two_worker_config;
  std::unique_ptr<caf::actor_system> two_workers = MakeCafSystem(&two_worker_config, 2);

  std::printf("CAF %d.%d.%d: scheduler workers %zu (same thread) and %zu (cross thread)\n",
              CAF_VERSION / 10000, CAF_VERSION / 100 % 100, CAF_VERSION % 100,
              one_worker->scheduler().num_workers(), two_workers->scheduler().num_workers());
  // Warm-up (page faults, lazy symbol binding, first thread creation).
  ExitIfError(LoomHopNanoseconds(kernels, 10'000, 0).status(), "loom warm-up");
  ExitIfError(LoomHopNanoseconds(kernels, 10'000, 1).status(), "loom warm-up");
  CafHopNanoseconds(*one_worker, 10'000);
  CafHopNanoseconds(*two_workers, 10'000);

  std::vector<double> loom_fixed;
  std::vector<double> loom_same;
  std::vector<double> caf_same;
  std::vector<double> loom_cross;
  std::vector<double> caf_cross;
  std::vector<double> caf_detached;
  std::vector<double> loom_round_trip;
  std::vector<double> loom_ready_hop;
  std::vector<double> loom_free_hop;
  std::vector<double> loom_p99_round_trip;
  for (int repetition = 0; repetition < kRepetitions; ++repetition) {
    // The fixed cost of a job with zero pieces (thread start and join), in microseconds.
    absl::StatusOr<LoomRun> empty = RunLoom(kernels, 0, 1, false);
    ExitIfError(empty.status(), "loom empty job");
    loom_fixed.push_back(empty->elapsed_nanoseconds / 1e3);

    absl::StatusOr<double> same = LoomHopNanoseconds(kernels, kSameThreadPieces, 0);
    ExitIfError(same.status(), "loom same-thread run");
    loom_same.push_back(*same);
    caf_same.push_back(CafHopNanoseconds(*one_worker, kSameThreadPieces));

    absl::StatusOr<double> cross = LoomHopNanoseconds(kernels, kCrossThreadPieces, 1);
    ExitIfError(cross.status(), "loom cross-thread run");
    loom_cross.push_back(*cross);
    caf_cross.push_back(CafHopNanoseconds(*two_workers, kCrossThreadPieces));
    caf_detached.push_back(CafHopNanoseconds(*two_workers, kCrossThreadPieces, true));

    absl::StatusOr<LatencySample> latency = LoomCrossThreadLatency(kernels, kLatencyPieces);
    ExitIfError(latency.status(), "loom latency run");
    loom_round_trip.push_back(latency->median_round_trip_nanoseconds);
    loom_ready_hop.push_back(latency->median_ready_hop_nanoseconds);
    loom_free_hop.push_back(latency->median_free_hop_nanoseconds);
    loom_p99_round_trip.push_back(latency->p99_round_trip_nanoseconds);
    std::printf(
        "rep %d: same-thread hop ns loom=%.1f caf=%.1f | cross-thread hop ns loom=%.1f "
        "caf(2 workers)=%.1f caf(detached)=%.1f | loom cross median round trip ns=%.0f\n",
        repetition, *same, caf_same.back(), *cross, caf_cross.back(), caf_detached.back(),
        latency->median_round_trip_nanoseconds);
    std::fflush(stdout);
  }

  std::printf("\nMedians over %d repetitions (hop = elapsed / (2 x pieces)):\n", kRepetitions);
  std::printf(
      "  loom fixed cost of a 0-piece job (start+join threads): %.1f us (repetitions: %s)\n",
      Median(loom_fixed), JoinValues(loom_fixed, 1).c_str());
  std::printf("  same thread,  %7lld pieces: loom %.1f ns/hop, caf (1 worker) %.1f ns/hop\n",
              static_cast<long long>(kSameThreadPieces), Median(loom_same), Median(caf_same));
  std::printf(
      "  cross thread, %7lld pieces: loom %.1f ns/hop (cpu:0 -> cpu:1 stream threads), caf %.1f "
      "ns/hop (2 scheduler workers: the work-stealing scheduler may run both actors on one "
      "worker), caf %.1f ns/hop (detached: one thread per actor)\n",
      static_cast<long long>(kCrossThreadPieces), Median(loom_cross), Median(caf_cross),
      Median(caf_detached));
  std::printf(
      "  loom cross thread from the event record (%lld pieces, record_events=true): median round "
      "trip %.0f ns, p99 round trip %.0f ns, median READY hop (producer end -> consumer start) "
      "%.0f ns, median FREE hop (consumer end -> producer start) %.0f ns\n",
      static_cast<long long>(kLatencyPieces), Median(loom_round_trip), Median(loom_p99_round_trip),
      Median(loom_ready_hop), Median(loom_free_hop));
  // Untimed: how many of CAF's hops on 2 workers really changed thread.
  ThreadTrace trace;
  CafHopNanoseconds(*two_workers, kCrossThreadPieces, false, &trace);
  std::printf(
      "  caf (2 workers), traced run (untimed): %.1f%% of %lld messages were handled on "
      "another thread than the message before\n",
      100.0 * trace.thread_changes / std::max<int64_t>(1, trace.messages - 1),
      static_cast<long long>(trace.messages));
  const double cross_median_microseconds = Median(loom_round_trip) / 2.0 / 1e3;
  std::printf("CROSS-THREAD actor-hop: median_hop_us=%.3f goal_us=%.1f (%s)\n",
              cross_median_microseconds, kCrossThreadGoalMicroseconds,
              cross_median_microseconds <= kCrossThreadGoalMicroseconds ? "met" : "NOT met");
  PrintResult("actor-hop", "same_thread_hop_ns", Median(loom_same), "caf_hop_ns", Median(caf_same));
  return 0;
}

}  // namespace
}  // namespace loom::bench

int main(int argc, char** argv) {
  loom::bench::InitLogging(argv[0]);
  return loom::bench::Main();
}
