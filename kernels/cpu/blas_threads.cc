#include "kernels/cpu/blas_threads.h"

#include <cblas.h>

#include <algorithm>

namespace loom {

void SetBlasThreads(int threads) { openblas_set_num_threads(std::max(threads, 1)); }

int BlasThreads() { return openblas_get_num_threads(); }

}  // namespace loom
