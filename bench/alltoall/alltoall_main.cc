// bench_alltoall: a float32 all-to-all of 1, 4, 16 and 64 MiB per rank over 2 and 4 ranks, each
// rank a process of its own on this machine: Loom's NetworkCollectives against Gloo (TCP) and
// OpenMPI's MPI_Alltoall, in one run (bench/common/collective_runs.h has how each side runs and
// is timed). Each rank sends slice q of its buffer (size / ranks) to rank q.
//
// Loom runs over UCX with UCX_TLS=tcp,cma (messages over TCP, data by same-host copy, as loomd
// runs), and for reference once per configuration with every byte over TCP (UCX_TLS=tcp); Gloo
// over its TCP transport; OpenMPI with its defaults (shared memory between processes of one
// host), and for reference once per configuration forced onto TCP. Every system's processes are
// placed alike, as mpirun places its ranks by default (bound to a core each with two ranks, not
// bound with four: collective_runs.h's RankCpus); for reference Loom also runs once per
// configuration without it, and once with single-slot registers (the memory a loop over one input
// and one output buffer touches, as the peers' loops do; Loom's plan, as the compiler's, gives
// the collective's registers two slots each, which double what an iteration touches). Each
// configuration is run kRepetitions times, the systems interleaved; the medians of the runs are
// compared. The RESULT lines give the configuration with the worst ratio against each peer.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "bench/common/bench_util.h"
#include "bench/common/collective_runs.h"
#include "bench/common/command.h"
#include "bench/common/gloo_collectives.h"

#ifndef LOOM_COLLECTIVE_MPI_PEER
#define LOOM_COLLECTIVE_MPI_PEER ""
#endif

namespace loom::bench {
namespace {

constexpr int kWarmup = 3;
constexpr int kMeasured = 10;
constexpr int kRepetitions = 3;
constexpr double kGoalVersusGloo = 1.0;
constexpr double kGoalVersusMpi = 1.2;

struct Medians {
  double loom = 0, gloo = 0, mpi = 0, mpi_tcp = 0, loom_tcp = 0, loom_unbound = 0,
         loom_single_slot = 0;
};

// `bench_alltoall --only loom|loom-tcp|loom-single-slot|gloo|mpi[-unbound] RANKS KIB [SPIN_US]`:
// one side alone, kRepetitions runs of KiB per rank, no RESULT line (for profiling it, or for its
// fixed cost at a few KiB); "-unbound": no process bound to a core, whatever the placement says;
// "loom-single-slot": Loom with single-slot registers (CollectiveRun::register_slots). For
// Loom it also prints where rank 0's iterations go (LoomCollectiveTiming: the collective's act and
// the time between acts), and SPIN_US replaces the nodes' stream threads' spin before parking
// (default 50; the collective's wait on its transfers is the transport's drive, which polls its own
// 20 us where the host has a core per process).
int OnlyOne(absl::string_view named, int ranks, int64_t kibibytes, int64_t spin_microseconds) {
  CollectiveRun run;
  run.placed = !absl::ConsumeSuffix(&named, "-unbound");
  const std::string system(named);
  run.kind = plan::ALL_TO_ALL;
  run.ranks = ranks;
  run.elements = std::max<int64_t>(kibibytes * 1024 / 4 / ranks, 1) * ranks;
  run.warmup = kWarmup;
  run.measured = kMeasured;
  if (system == "loom-tcp") run.loom_transports = kLoomTcpOnly;
  if (system == "loom-single-slot") run.register_slots = 1;
  const bool loom = system == "loom" || system == "loom-tcp" || system == "loom-single-slot";
  std::vector<double> times, acts, betweens;
  for (int repetition = 0; repetition < kRepetitions; ++repetition) {
    absl::StatusOr<double> time;
    if (loom) {
      absl::StatusOr<LoomCollectiveTiming> timing =
          RunLoomCollectiveTimed(run, absl::Microseconds(spin_microseconds));
      ExitIfError(timing.status(), "loom's all-to-all");
      acts.push_back(timing->act);
      betweens.push_back(timing->between);
      time = timing->iteration;
    } else {
      time = system == "gloo" ? RunGlooCollectiveRun(run)
             : system == "mpi"
                 ? RunMpiCollective(run, LOOM_COLLECTIVE_MPI_PEER, "")
                 : absl::InvalidArgumentError(absl::StrCat("unknown system ", system));
    }
    ExitIfError(time.status(), absl::StrCat(system, "'s all-to-all"));
    times.push_back(*time);
  }
  std::printf("%s%s, %d ranks, %lld KiB per rank: %s (median %.3f ms)\n", system.c_str(),
              run.placed ? "" : " (unbound)", ranks, static_cast<long long>(kibibytes),
              JoinValues(times, 3).c_str(), Median(times));
  if (loom) {
    std::printf("  rank 0, medians per run: collective act %s ms, between acts %s ms\n",
                JoinValues(acts, 3).c_str(), JoinValues(betweens, 3).c_str());
  }
  return 0;
}

int Main(int argc, char** argv) {
  if ((argc == 5 || argc == 6) && std::string(argv[1]) == "--only") {
    return OnlyOne(argv[2], std::atoi(argv[3]), std::atoll(argv[4]),
                   argc == 6 ? std::atoll(argv[5]) : -1);
  }
  if (argc != 1) {
    std::fprintf(stderr,
                 "usage: bench_alltoall [--only loom|loom-tcp|loom-single-slot|gloo|mpi[-unbound] "
                 "RANKS KIB [SPIN_US]]\n");
    return 2;
  }
  if (!HaveCollectivePeers("alltoall", LOOM_COLLECTIVE_MPI_PEER)) return 2;
  std::printf(
      "alltoall: float32, MiB per rank, one process per rank; Loom NetworkCollectives (UCX "
      "tcp,cma: data by same-host copy) vs Gloo (tcp) vs OpenMPI (defaults); %d warm-up + %d "
      "measured iterations per run, %d "
      "runs; ms per all-to-all (median iteration of each run, then the median of the runs)\n",
      kWarmup, kMeasured, kRepetitions);
  std::printf("machine at start: %s\n", MachineCheck().c_str());
  std::printf("placement, the same for every system (OpenMPI's default): %s; %s\n",
              DescribePlacement(2).c_str(), DescribePlacement(4).c_str());
  std::printf("%6s %4s %10s %10s %10s %10s %10s %13s %14s %10s %10s\n", "MiB", "ranks", "loom",
              "gloo", "openmpi", "loom(tcp)", "mpi(tcp)", "loom(unbound)", "loom(1 slot)",
              "loom/gloo", "loom/mpi");
  std::map<std::pair<int, int>, Medians> results;  // (MiB, ranks)
  for (int ranks : {2, 4}) {
    for (int mebibytes : {1, 4, 16, 64}) {
      CollectiveRun run;
      run.kind = plan::ALL_TO_ALL;
      run.ranks = ranks;
      run.elements = (int64_t{mebibytes} << 20) / 4;
      run.warmup = kWarmup;
      run.measured = kMeasured;
      std::vector<double> loom, gloo, mpi;
      for (int repetition = 0; repetition < kRepetitions; ++repetition) {
        absl::StatusOr<double> ours = RunLoomCollective(run);
        ExitIfError(ours.status(), "Loom's all-to-all");
        loom.push_back(*ours);
        absl::StatusOr<double> gloo_run = RunGlooCollectiveRun(run);
        ExitIfError(gloo_run.status(), "Gloo's all-to-all");
        gloo.push_back(*gloo_run);
        absl::StatusOr<double> mpi_run = RunMpiCollective(run, LOOM_COLLECTIVE_MPI_PEER, "");
        ExitIfError(mpi_run.status(), "OpenMPI's all-to-all");
        mpi.push_back(*mpi_run);
      }
      absl::StatusOr<double> mpi_tcp =
          RunMpiCollective(run, LOOM_COLLECTIVE_MPI_PEER, "--mca pml ob1 --mca btl tcp,self");
      CollectiveRun tcp_run = run;
      tcp_run.loom_transports = kLoomTcpOnly;
      absl::StatusOr<double> loom_tcp = RunLoomCollective(tcp_run);
      // Loom's processes without the placement, where there is one: what binding is worth.
      CollectiveRun unbound_run = run;
      unbound_run.placed = false;
      absl::StatusOr<double> loom_unbound =
          RunCpus(run).empty() ? Median(loom) : RunLoomCollective(unbound_run);
      CollectiveRun single_slot_run = run;
      single_slot_run.register_slots = 1;
      absl::StatusOr<double> loom_single_slot = RunLoomCollective(single_slot_run);
      Medians& result = results[{mebibytes, ranks}];
      result = {Median(loom),
                Median(gloo),
                Median(mpi),
                mpi_tcp.ok() ? *mpi_tcp : -1,
                loom_tcp.ok() ? *loom_tcp : -1,
                loom_unbound.ok() ? *loom_unbound : -1,
                loom_single_slot.ok() ? *loom_single_slot : -1};
      std::printf("%6d %4d %10.2f %10.2f %10.2f %10.2f %10.2f %13.2f %14.2f %10.3f %10.3f\n",
                  mebibytes, ranks, result.loom, result.gloo, result.mpi, result.loom_tcp,
                  result.mpi_tcp, result.loom_unbound, result.loom_single_slot,
                  result.loom / result.gloo, result.loom / result.mpi);
      std::printf("       runs: loom %s | gloo %s | openmpi %s\n", JoinValues(loom, 2).c_str(),
                  JoinValues(gloo, 2).c_str(), JoinValues(mpi, 2).c_str());
      std::fflush(stdout);
    }
  }
  std::printf("machine at end: %s\n", MachineCheck().c_str());
  std::pair<int, int> worst_gloo = results.begin()->first, worst_mpi = worst_gloo;
  for (const auto& [key, result] : results) {
    if (result.loom / result.gloo > results[worst_gloo].loom / results[worst_gloo].gloo) {
      worst_gloo = key;
    }
    if (result.loom / result.mpi > results[worst_mpi].loom / results[worst_mpi].mpi) {
      worst_mpi = key;
    }
  }
  std::printf(
      "GOALS alltoall: loom/gloo < %.1f; loom/openmpi <= %.1f (lower is better); RESULT lines "
      "name the configuration with the worst ratio\n",
      kGoalVersusGloo, kGoalVersusMpi);
  auto name = [](const std::string& system, std::pair<int, int> key) {
    return absl::StrCat(system, "_ms_", key.first, "MiB_", key.second, "_ranks");
  };
  PrintResult("alltoall-vs-gloo", name("loom", worst_gloo), results[worst_gloo].loom,
              name("gloo", worst_gloo), results[worst_gloo].gloo);
  PrintResult("alltoall-vs-mpi", name("loom", worst_mpi), results[worst_mpi].loom,
              name("openmpi", worst_mpi), results[worst_mpi].mpi);
  return 0;
}

}  // namespace
}  // namespace loom::bench

int main(int argc, char** argv) { return loom::bench::Main(argc, argv); }
