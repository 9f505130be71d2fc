#include "kernels/cpu/blas_threads.h"

#include <cblas.h>

#include <algorithm>

namespace loom {

void SetBlasThreads(int threads) {
  threads = std::max(threads, 1);
  // OpenBLAS rebuilds its thread pool on the first openblas_set_num_threads after a fork, and its
  // new workers spin on sched_yield for about 100 ms: a forked node process that keeps the count
  // would share its cores with them for nothing.
  if (openblas_get_num_threads() != threads) openblas_set_num_threads(threads);
}

int BlasThreads() { return openblas_get_num_threads(); }

}  // namespace loom
