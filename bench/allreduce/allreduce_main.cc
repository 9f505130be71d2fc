// bench_allreduce: a 64 MiB float32 all-reduce (sum) over 2 and 4 ranks, each rank a process of
// its own on this machine: Loom's NetworkCollectives against Gloo (TCP) and OpenMPI's
// MPI_Allreduce, in one run.
//
// Loom: a whole-job plan with, per rank r, a SOURCE on node r/cpu:0 ("bench_noop": its 2-slot
// register of zeros is the input), the all-reduce as a COLLECTIVE task on node r's communication
// stream (one communicator "world" over the n nodes, one collective in its order) writing a 2-slot
// output register, and a COMPUTE ("bench_noop") reading the output. compiler::SplitByNode gives
// each node its plan; each runs in a process of its own as a daemon::NodeJob, as in loomd, so the
// communicator spans nodes and gets the UCX backend (NetworkCollectives: direct exchange,
// reduce-scatter then all-gather; UCX_TLS=tcp,cma: messages over TCP, data by same-host copy,
// as loomd runs). Out of place: input and output are different registers. For reference, also one
// run per rank count with every byte over TCP (UCX_TLS=tcp, as between hosts).
// Gloo: the same number of forked processes, gloo::allreduce (ring) over its TCP transport on
// 127.0.0.1, in place.
// OpenMPI: `mpirun --allow-run-as-root --oversubscribe -np n collective_mpi_peer allreduce`,
// MPI_Allreduce in place, with OpenMPI's default choices (shared memory between processes of one
// host). For reference, also one run per rank count forced onto TCP (--mca pml ob1 --mca btl
// tcp,self).
// Placement, the same for all three: as mpirun places its ranks by default, each bound to a core
// of its own with two ranks, none bound with four (collective_runs.h's RankCpus).
//
// Timing, the same for all three: each rank runs kWarmup + kMeasured all-reduces back to back; an
// iteration's time is the interval between successive completions on rank 0 (Loom: the ends of
// the COLLECTIVE task's acts in rank 0's event record; the peers: the clock after each call
// returns), and a run's time is the median over its kMeasured iterations. Each run is repeated
// kRepetitions times, the three systems interleaved; the medians of the runs are compared.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "bench/common/bench_util.h"
#include "bench/common/collective_runs.h"
#include "bench/common/command.h"
#include "bench/common/gloo_collectives.h"

#ifndef LOOM_COLLECTIVE_MPI_PEER
#define LOOM_COLLECTIVE_MPI_PEER ""
#endif

namespace loom::bench {
namespace {

constexpr int64_t kBytes = int64_t{64} << 20;
constexpr int64_t kElements = kBytes / 4;
constexpr int kWarmup = 3;
constexpr int kMeasured = 10;
constexpr int kRepetitions = 5;
constexpr double kGoalVersusGloo = 1.0;
constexpr double kGoalVersusMpi = 1.2;

CollectiveRun AllreduceRun(int ranks) {
  CollectiveRun run;
  run.kind = plan::ALL_REDUCE;
  run.ranks = ranks;
  run.elements = kElements;
  run.warmup = kWarmup;
  run.measured = kMeasured;
  return run;
}

absl::StatusOr<double> RunLoom(int ranks, const std::string& transports = kLoomTransports) {
  CollectiveRun run = AllreduceRun(ranks);
  run.loom_transports = transports;
  return RunLoomCollective(run);
}

absl::StatusOr<double> RunGloo(int ranks) { return RunGlooCollectiveRun(AllreduceRun(ranks)); }

absl::StatusOr<double> RunMpi(int ranks, const std::string& transport_flags) {
  return RunMpiCollective(AllreduceRun(ranks), LOOM_COLLECTIVE_MPI_PEER, transport_flags);
}

struct RankMedians {
  double loom = 0, gloo = 0, mpi = 0;
};

// `bench_allreduce --only loom|loom-tcp|gloo|mpi RANKS`: one side alone, kRepetitions runs, no
// RESULT line (for profiling it, e.g. under `perf record -a -g`).
int OnlyOne(const std::string& system, int ranks) {
  std::vector<double> times;
  for (int repetition = 0; repetition < kRepetitions; ++repetition) {
    absl::StatusOr<double> time = system == "loom"       ? RunLoom(ranks)
                                  : system == "loom-tcp" ? RunLoom(ranks, kLoomTcpOnly)
                                  : system == "gloo"     ? RunGloo(ranks)
                                  : system == "mpi"      ? RunMpi(ranks, "")
                                                         : absl::InvalidArgumentError(system);
    ExitIfError(time.status(), absl::StrCat(system, "'s all-reduce"));
    times.push_back(*time);
  }
  std::printf("%s, %d ranks: %s (median %.2f ms)\n", system.c_str(), ranks,
              JoinValues(times, 2).c_str(), Median(times));
  return 0;
}

int Main(int argc, char** argv) {
  if (argc == 4 && std::string(argv[1]) == "--only") return OnlyOne(argv[2], std::atoi(argv[3]));
  if (argc != 1) {
    std::fprintf(stderr, "usage: bench_allreduce [--only loom|loom-tcp|gloo|mpi RANKS]\n");
    return 2;
  }
  if (!HaveCollectivePeers("allreduce", LOOM_COLLECTIVE_MPI_PEER)) return 2;
  std::printf(
      "allreduce: 64 MiB float32 sum, one process per rank; Loom NetworkCollectives (UCX "
      "tcp,cma: data by same-host copy) vs Gloo (tcp, ring) vs OpenMPI (defaults); %d warm-up + "
      "%d measured "
      "iterations per run, %d runs; ms per all-reduce (median iteration of each run)\n",
      kWarmup, kMeasured, kRepetitions);
  std::printf("machine at start: %s\n", MachineCheck().c_str());
  std::printf("placement, the same for every system (OpenMPI's default): %s; %s\n",
              DescribePlacement(2).c_str(), DescribePlacement(4).c_str());
  std::map<int, RankMedians> medians;
  for (int ranks : {2, 4}) {
    std::vector<double> loom, gloo, mpi;
    for (int repetition = 0; repetition < kRepetitions; ++repetition) {
      absl::StatusOr<double> ours = RunLoom(ranks);
      ExitIfError(ours.status(), "Loom's all-reduce");
      loom.push_back(*ours);
      absl::StatusOr<double> gloo_run = RunGloo(ranks);
      ExitIfError(gloo_run.status(), "Gloo's all-reduce");
      gloo.push_back(*gloo_run);
      absl::StatusOr<double> mpi_run = RunMpi(ranks, "");
      ExitIfError(mpi_run.status(), "OpenMPI's all-reduce");
      mpi.push_back(*mpi_run);
    }
    absl::StatusOr<double> mpi_tcp = RunMpi(ranks, "--mca pml ob1 --mca btl tcp,self");
    absl::StatusOr<double> loom_tcp = RunLoom(ranks, kLoomTcpOnly);
    RankMedians& result = medians[ranks];
    result = {Median(loom), Median(gloo), Median(mpi)};
    std::printf("%d ranks:\n", ranks);
    std::printf("  loom     %s\n", JoinValues(loom, 2).c_str());
    std::printf("  gloo     %s\n", JoinValues(gloo, 2).c_str());
    std::printf("  openmpi  %s\n", JoinValues(mpi, 2).c_str());
    std::printf(
        "  median: loom %.2f  gloo %.2f (loom/gloo %.3f)  openmpi %.2f (loom/openmpi %.3f)\n",
        result.loom, result.gloo, result.loom / result.gloo, result.mpi, result.loom / result.mpi);
    if (mpi_tcp.ok()) {
      std::printf(
          "  for reference, openmpi forced onto tcp (pml ob1, btl tcp,self), one run: %.2f\n",
          *mpi_tcp);
    } else {
      std::printf("  for reference, openmpi forced onto tcp: failed: %s\n",
                  std::string(mpi_tcp.status().message()).c_str());
    }
    if (loom_tcp.ok()) {
      std::printf("  for reference, loom with every byte over tcp (UCX_TLS=tcp), one run: %.2f\n",
                  *loom_tcp);
    } else {
      std::printf("  for reference, loom over tcp only: failed: %s\n",
                  std::string(loom_tcp.status().message()).c_str());
    }
    std::fflush(stdout);
  }
  std::printf("machine at end: %s\n", MachineCheck().c_str());
  // One RESULT line per peer, each for the rank count with the larger ratio.
  int worst_gloo = 2, worst_mpi = 2;
  for (const auto& [ranks, result] : medians) {
    if (result.loom / result.gloo > medians[worst_gloo].loom / medians[worst_gloo].gloo) {
      worst_gloo = ranks;
    }
    if (result.loom / result.mpi > medians[worst_mpi].loom / medians[worst_mpi].mpi) {
      worst_mpi = ranks;
    }
  }
  std::printf("GOALS allreduce: loom/gloo < %.1f; loom/openmpi <= %.1f (lower is better)\n",
              kGoalVersusGloo, kGoalVersusMpi);
  PrintResult("allreduce-vs-gloo", absl::StrCat("loom_ms_", worst_gloo, "_ranks"),
              medians[worst_gloo].loom, absl::StrCat("gloo_ms_", worst_gloo, "_ranks"),
              medians[worst_gloo].gloo);
  PrintResult("allreduce-vs-mpi", absl::StrCat("loom_ms_", worst_mpi, "_ranks"),
              medians[worst_mpi].loom, absl::StrCat("openmpi_ms_", worst_mpi, "_ranks"),
              medians[worst_mpi].mpi);
  return 0;
}

}  // namespace
}  // namespace loom::bench

int main(int argc, char** argv) { return loom::bench::Main(argc, argv); }
