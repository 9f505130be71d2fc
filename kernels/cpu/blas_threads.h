#ifndef LOOM_KERNELS_CPU_BLAS_THREADS_H_
#define LOOM_KERNELS_CPU_BLAS_THREADS_H_

// OpenBLAS's thread count per GEMM, process-wide, for the CPU kernels' GEMMs (matmul, attention):
// SetBlasThreads, which loomd, loomctl's run commands and the benchmarks call once at start, and
// BlasThreads, the count in use.

namespace loom {

// Sets how many threads OpenBLAS uses for each GEMM (process-wide). Tools call it once at start,
// for example with 1 when every stream thread runs its own kernels. Values below 1 mean 1. A
// count that is already set changes nothing (in a forked child: starts no OpenBLAS threads).
void SetBlasThreads(int threads);

// The number of threads OpenBLAS currently uses.
int BlasThreads();

}  // namespace loom

#endif  // LOOM_KERNELS_CPU_BLAS_THREADS_H_
