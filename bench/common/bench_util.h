#ifndef LOOM_BENCH_COMMON_BENCH_UTIL_H_
#define LOOM_BENCH_COMMON_BENCH_UTIL_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "kernels/kernel_registry.h"

namespace loom::bench {

// The median of `values` (the mean of the two middle values for an even count); 0 when empty.
double Median(std::vector<double> values);

// "1.23 4.56 7.89": the individual repetitions, for the lines above a RESULT line.
std::string JoinValues(const std::vector<double>& values, int precision);

// Prints the one line a benchmark ends with:
//   RESULT <name>: <metric>=<value> <peer_metric>=<peer_value> ratio=<value/peer_value>
void PrintResult(const std::string& name, const std::string& metric, double value,
                 const std::string& peer_metric, double peer_value);

// glog to stderr (with the benchmark's output), not to files in /tmp.
void InitLogging(const char* program);

// Prints `status` with `what` and exits the process when it is not OK.
void ExitIfError(const absl::Status& status, const std::string& what);

// Median GFLOP/s of Loom's "matmul" kernel (OpenBLAS, at its current thread count) on two
// 1024 x 1024 float32 matrices, over 10 repetitions after one warm-up.
double GemmGflops(const KernelRegistry& kernels);

// One line on the state of this (shared) machine, for the lines above a RESULT line: the load
// averages, a one-thread 1024^3 GEMM's GFLOP/s and a 32 MiB memcpy's GB/s. On the 2-core
// development machine the GEMM gives about 105-110 GFLOP/s when nothing else runs on its cores
// and about half that when another tenant's work shares them.
std::string MachineCheck();

// Registers "bench_noop" for CPU: a kernel whose Compute does nothing (any inputs and outputs),
// so that an act costs only the runtime's own work.
absl::Status RegisterNoopKernel(KernelRegistry* registry);

}  // namespace loom::bench

#endif  // LOOM_BENCH_COMMON_BENCH_UTIL_H_
