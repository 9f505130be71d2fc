#ifndef LOOM_BENCH_COMMON_COLLECTIVE_RUNS_H_
#define LOOM_BENCH_COMMON_COLLECTIVE_RUNS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/plan.pb.h"

namespace loom::bench {

// One collective of a float32 buffer of `elements` per rank, `ranks` processes on this machine,
// `warmup` + `measured` times back to back, timed the same way for every system: an iteration is
// the interval between successive completions on rank 0, a run's time the median of its measured
// iterations, in milliseconds.
// UCX's transport list for Loom's processes: the control messages over TCP (UCX's only transport
// with error handling here), and the data between processes of this host by same-host copy
// (`cma`, transport/same_host.h), as loomd does by default.
inline constexpr char kLoomTransports[] = "tcp,cma";
// For reference: every byte over TCP loopback, as between hosts.
inline constexpr char kLoomTcpOnly[] = "tcp";

struct CollectiveRun {
  plan::CollectiveKind kind = plan::ALL_REDUCE;  // ALL_REDUCE (sum) or ALL_TO_ALL (axis 0)
  int ranks = 2;
  int64_t elements = 0;
  int warmup = 3;
  int measured = 10;
  std::string loom_transports = kLoomTransports;  // UCX_TLS of Loom's processes
  // False: no process is bound, whatever RankCpus says (for reference).
  bool placed = true;
  // Loom's input and output registers' slots: 2, as the compiler gives a register that another
  // stream reads (the collective's input, filled on the compute stream, and its output, read
  // there), so that the next piece moves while the collective runs. 1 for reference: the memory
  // of a loop over one input and one output buffer, as the peers' loops are.
  int register_slots = 2;
};

// Where the ranks' processes run, the same for every system: as OpenMPI 4.1's mpirun places its
// ranks by default. With up to two ranks each is bound to a core of its own (the first CPUs this
// process may use); with more, none is bound (mpirun binds to the socket then, the whole of this
// one-socket machine, and not at all when the ranks outnumber the cores). The CPU of each rank;
// empty: unbound. mpirun is told the same explicitly (--bind-to core or none).
std::vector<int> RankCpus(int ranks);
// RankCpus(run.ranks), or none when the run is not `placed`.
std::vector<int> RunCpus(const CollectiveRun& run);
// RankCpus in words, for the benchmarks' header lines.
std::string DescribePlacement(int ranks);

// Loom: a whole-job plan with, per rank r on node r/cpu:0, a SOURCE ("bench_noop": its register
// of zeros, run.register_slots slots, is the input), the collective as a COLLECTIVE task on the
// communication stream (one communicator "world" over the nodes, out of place), and a COMPUTE
// reading the output; each node's part (compiler::SplitByNode) runs in a process of its own as a
// daemon::NodeJob, as in loomd, so the collective takes the UCX backend (UCX_TLS from the run).
absl::StatusOr<double> RunLoomCollective(const CollectiveRun& run);

// Where Loom's iterations go on rank 0, medians over the measured iterations in milliseconds:
// `iteration` as RunLoomCollective; `act` the COLLECTIVE's acts (from the act's start, its input
// ready and its stream thread running it, to its end, every transfer done: the header exchange,
// the data and the waits on the peers); `between` from one act's end to the next act's start
// (READY to the consumer, FREE back to the source, the next piece's READY, and the stream
// threads' wake-ups on the way).
struct LoomCollectiveTiming {
  double iteration = 0;
  double act = 0;
  double between = 0;
};
// `spin` replaces JobOptions::spin_before_park in every node (how long its stream threads poll
// before they park; the network collectives wait in the transport's drive) when it is not negative.
absl::StatusOr<LoomCollectiveTiming> RunLoomCollectiveTimed(
    const CollectiveRun& run, absl::Duration spin = absl::Microseconds(-1));

// Gloo over TCP on 127.0.0.1 (bench/common/gloo_collectives.h).
absl::StatusOr<double> RunGlooCollectiveRun(const CollectiveRun& run);

// OpenMPI: `mpirun -np ranks [transport_flags] collective_mpi_peer ...` with OpenMPI's defaults
// (shared memory between processes of one host) unless `transport_flags` says otherwise.
// `peer` is the collective_mpi_peer binary.
absl::StatusOr<double> RunMpiCollective(const CollectiveRun& run, const std::string& peer,
                                        const std::string& transport_flags);

// Whether Gloo, mpirun and `peer` (collective_mpi_peer) are all there; if not, says on stderr
// which are missing (as `benchmark: peer missing: ...`) and how to get them.
bool HaveCollectivePeers(const std::string& benchmark, const std::string& peer);

// The median interval, in milliseconds, between successive completion times (nanoseconds) after
// `warmup` of them.
absl::StatusOr<double> MedianIteration(const std::vector<int64_t>& ends, int warmup, int measured,
                                       const std::string& who);

}  // namespace loom::bench

#endif  // LOOM_BENCH_COMMON_COLLECTIVE_RUNS_H_
