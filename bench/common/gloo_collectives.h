#ifndef LOOM_BENCH_COMMON_GLOO_COLLECTIVES_H_
#define LOOM_BENCH_COMMON_GLOO_COLLECTIVES_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace loom::bench {

// Whether this binary was built with Gloo (libgloo-dev found by CMake).
bool HaveGloo();

enum class GlooCollective {
  // Sum, in place, Gloo's default algorithm (the ring).
  kAllreduce,
  // gloo::alltoall: each rank sends slice q of its buffer (elements / ranks) to rank q, out of
  // place.
  kAlltoall,
};

// Runs `ranks` processes (forked from this one) that connect a Gloo context over TCP on
// 127.0.0.1 (a FileStore rendezvous in a fresh directory under /tmp), then, after a barrier, run
// `collective` on a float32 buffer of `elements` zeros per rank `iterations` times back to back.
// Rank r's process is bound to CPU cpus[r] where there is one (core/cpu_affinity.h's BindToCpu).
// Returns rank 0's steady-clock time (nanoseconds) at which each call returned. This process
// must not have started threads (it forks).
absl::StatusOr<std::vector<int64_t>> RunGlooCollective(GlooCollective collective, int ranks,
                                                       int64_t elements, int iterations,
                                                       const std::vector<int>& cpus);

}  // namespace loom::bench

#endif  // LOOM_BENCH_COMMON_GLOO_COLLECTIVES_H_
