#include "bench/common/collective_runs.h"

#include <cstdio>
#include <map>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "bench/common/bench_util.h"
#include "bench/common/command.h"
#include "bench/common/gloo_collectives.h"
#include "bench/common/node_job_processes.h"
#include "compiler/node_split.h"
#include "core/cpu_affinity.h"
#include "testing/plan_builder.h"

namespace loom::bench {
namespace {

// Per rank r on node r: source -> in<r> -> collective<r> -> out<r> -> consumer<r>.
plan::Plan CollectivePlan(const CollectiveRun& run) {
  PlanBuilder builder("collective");
  builder.AddCpuDevices(run.ranks);
  plan::Plan& plan = builder.mutable_plan();
  plan::Communicator* world = plan.add_communicators();
  world->set_name("world");
  world->set_num_collectives(1);
  world->set_index(0);
  for (int rank = 0; rank < run.ranks; ++rank) {
    *plan.mutable_devices(rank)->mutable_device() = NodeDevice(rank);
    *world->add_devices() = NodeDevice(rank);
    const std::string in = absl::StrCat("in", rank), out = absl::StrCat("out", rank);
    builder.AddRegister(in, {run.elements}, plan::FLOAT32, run.register_slots);
    builder.AddRegister(out, {run.elements}, plan::FLOAT32, run.register_slots);
    builder.AddRegister(absl::StrCat("unread", rank), {1}, plan::FLOAT32, 1);
    builder.AddTask(absl::StrCat("source", rank), plan::SOURCE, rank, {}, {in}, "bench_noop")
        .set_num_pieces(run.warmup + run.measured);
    plan::Task& collective =
        builder.AddTask(absl::StrCat("collective", rank), plan::COLLECTIVE, rank, {in}, {out});
    collective.mutable_stream()->set_kind(plan::STREAM_COMMUNICATION);
    collective.set_rank(rank);
    plan::CollectiveConf* conf = collective.mutable_collective();
    conf->set_communicator("world");
    conf->set_kind(run.kind);
    if (run.kind == plan::ALL_REDUCE) conf->set_reduce(plan::REDUCE_SUM);
    conf->set_axis(0);
    conf->set_concat_axis(0);
    conf->set_sequence(0);
    conf->set_name(plan::CollectiveKind_Name(run.kind));
    builder.AddTask(absl::StrCat("consumer", rank), plan::COMPUTE, rank, {out},
                    {absl::StrCat("unread", rank)}, "bench_noop");
  }
  // PlanBuilder's cpu:r of node 0 becomes cpu:0 of node r.
  for (plan::Task& task : *plan.mutable_tasks()) {
    *task.mutable_stream()->mutable_device() = NodeDevice(task.stream().device().index());
  }
  return plan;
}

}  // namespace

std::vector<int> RankCpus(int ranks) {
  if (ranks > 2) return {};
  absl::StatusOr<std::vector<int>> allowed = AllowedCpus(0);
  if (!allowed.ok() || static_cast<int>(allowed->size()) < ranks) return {};
  return std::vector<int>(allowed->begin(), allowed->begin() + ranks);
}

std::vector<int> RunCpus(const CollectiveRun& run) {
  return run.placed ? RankCpus(run.ranks) : std::vector<int>();
}

std::string DescribePlacement(int ranks) {
  const std::vector<int> cpus = RankCpus(ranks);
  if (cpus.empty()) return absl::StrCat(ranks, " ranks: not bound to cores");
  return absl::StrCat(ranks, " ranks: each bound to a core of its own (CPUs ",
                      absl::StrJoin(cpus, ","), ")");
}

bool HaveCollectivePeers(const std::string& benchmark, const std::string& peer) {
  std::vector<std::string> missing;
  if (!HaveGloo()) missing.push_back("Gloo (libgloo-dev, found by CMake at configure time)");
  if (!ProgramExists("mpirun")) missing.push_back("mpirun (openmpi-bin)");
  if (!ProgramExists(peer)) {
    missing.push_back("collective_mpi_peer (built only when CMake finds MPI: libopenmpi-dev)");
  }
  for (const std::string& what : missing) {
    std::fprintf(stderr, "%s: peer missing: %s\n", benchmark.c_str(), what.c_str());
  }
  if (!missing.empty()) {
    std::fprintf(stderr, "%s: no result without its peers (scripts/install-deps)\n",
                 benchmark.c_str());
  }
  return missing.empty();
}

absl::StatusOr<double> MedianIteration(const std::vector<int64_t>& ends, int warmup, int measured,
                                       const std::string& who) {
  if (static_cast<int>(ends.size()) != warmup + measured) {
    return absl::InternalError(
        absl::StrCat(who, ": ", ends.size(), " completions, expected ", warmup + measured));
  }
  std::vector<double> intervals;
  for (int iteration = warmup; iteration < warmup + measured; ++iteration) {
    intervals.push_back((ends[iteration] - ends[iteration - 1]) / 1e6);
  }
  return Median(intervals);
}

absl::StatusOr<LoomCollectiveTiming> RunLoomCollectiveTimed(const CollectiveRun& run,
                                                            absl::Duration spin) {
  const std::vector<plan::Plan> plans = compiler::SplitByNode(CollectivePlan(run));
  NodeJobProcessOptions options;
  options.ucx.configuration = {{"TLS", run.loom_transports}};
  options.deadline = absl::Seconds(120);
  options.cpus = RunCpus(run);
  if (spin >= absl::ZeroDuration()) options.job.spin_before_park = spin;
  absl::StatusOr<std::vector<std::string>> reports = RunNodePlansInProcesses(
      plans, options,
      [](daemon::NodeJob& job) { return ReportActs(job, absl::StrCat("collective", job.node())); });
  if (!reports.ok()) return reports.status();
  std::map<int64_t, Act> act_of_piece;
  for (const Act& act : ParseActs((*reports)[0])) act_of_piece[act.piece] = act;
  std::vector<int64_t> ends;
  std::vector<double> acts, betweens;
  const Act* previous = nullptr;
  for (const auto& [piece, act] : act_of_piece) {
    if (static_cast<int>(ends.size()) >= run.warmup && previous != nullptr) {
      acts.push_back((act.end_nanoseconds - act.start_nanoseconds) / 1e6);
      betweens.push_back((act.start_nanoseconds - previous->end_nanoseconds) / 1e6);
    }
    ends.push_back(act.end_nanoseconds);
    previous = &act;
  }
  absl::StatusOr<double> iteration = MedianIteration(ends, run.warmup, run.measured, "Loom");
  if (!iteration.ok()) return iteration.status();
  return LoomCollectiveTiming{*iteration, Median(acts), Median(betweens)};
}

absl::StatusOr<double> RunLoomCollective(const CollectiveRun& run) {
  absl::StatusOr<LoomCollectiveTiming> timing = RunLoomCollectiveTimed(run);
  if (!timing.ok()) return timing.status();
  return timing->iteration;
}

absl::StatusOr<double> RunGlooCollectiveRun(const CollectiveRun& run) {
  absl::StatusOr<std::vector<int64_t>> ends = RunGlooCollective(
      run.kind == plan::ALL_TO_ALL ? GlooCollective::kAlltoall : GlooCollective::kAllreduce,
      run.ranks, run.elements, run.warmup + run.measured, RunCpus(run));
  if (!ends.ok()) return ends.status();
  return MedianIteration(*ends, run.warmup, run.measured, "Gloo");
}

absl::StatusOr<double> RunMpiCollective(const CollectiveRun& run, const std::string& peer,
                                        const std::string& transport_flags) {
  absl::StatusOr<std::string> output = RunCommand(
      absl::StrCat("timeout 120 mpirun --allow-run-as-root --oversubscribe -np ", run.ranks,
                   RunCpus(run).empty() ? " --bind-to none " : " --bind-to core ", transport_flags,
                   " ", peer, run.kind == plan::ALL_TO_ALL ? " alltoall " : " allreduce ",
                   run.elements, " ", run.warmup, " ", run.measured));
  if (!output.ok()) return output.status();
  for (absl::string_view line : absl::StrSplit(*output, '\n')) {
    if (!absl::ConsumePrefix(&line, "ENDS_NS")) continue;
    std::vector<int64_t> ends;
    for (absl::string_view word : absl::StrSplit(line, ' ', absl::SkipWhitespace())) {
      int64_t end = 0;
      if (absl::SimpleAtoi(word, &end)) ends.push_back(end);
    }
    return MedianIteration(ends, run.warmup, run.measured, "OpenMPI");
  }
  return absl::InternalError(absl::StrCat("no ENDS_NS line from the MPI peer:\n", *output));
}

}  // namespace loom::bench
