#ifndef LOOM_BENCH_ALLREDUCE_GLOO_ALLREDUCE_H_
#define LOOM_BENCH_ALLREDUCE_GLOO_ALLREDUCE_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace loom::bench {

// Whether this binary was built with Gloo (libgloo-dev found by CMake).
bool HaveGloo();

// Runs `ranks` processes (forked from this one) that connect a Gloo context over TCP on
// 127.0.0.1 (a FileStore rendezvous in a fresh directory under /tmp), then, after a barrier,
// all-reduce (sum, in place, Gloo's default algorithm: the ring) a float32 buffer of `elements`
// zeros `iterations` times back to back. Returns rank 0's steady-clock time (nanoseconds) at which
// each all-reduce returned. This process must not have started threads (it forks).
absl::StatusOr<std::vector<int64_t>> RunGlooAllreduce(int ranks, int64_t elements, int iterations);

}  // namespace loom::bench

#endif  // LOOM_BENCH_ALLREDUCE_GLOO_ALLREDUCE_H_
