#ifndef LOOM_KERNELS_CPU_BLAS_CORE_H_
#define LOOM_KERNELS_CPU_BLAS_CORE_H_

// Which OpenBLAS kernels this process runs: BlasCoreName (the core OpenBLAS chose for the CPU),
// BlasCoreWarning (what to tell the operator when those are generic kernels far older than the CPU)
// and WarnIfBlasKernelsAreGeneric, which loomd and loomctl's run commands call once at start.

#include <string>

namespace loom {

// The kernels OpenBLAS chose for this CPU when it was loaded (openblas_get_corename: "SkylakeX",
// "Haswell", "Prescott", ...).
std::string BlasCoreName();

// What to tell the operator when OpenBLAS runs kernels far older than the CPU: a CPU model that
// its build does not know (e.g. a new Xeon seen through a VM) makes it fall back to its generic
// pre-AVX kernels, whose GEMMs are several times slower (21 against 135 GFLOP/s for a 1024^3
// sgemm on one core of an AVX-512 Xeon). Empty when `core_name` suits a CPU with (`avx512`,
// `avx2`); else a warning naming the OPENBLAS_CORETYPE to set in the process's environment.
std::string BlasCoreWarning(const std::string& core_name, bool avx512, bool avx2);

// BlasCoreWarning for this process's OpenBLAS and CPU, logged as a warning when not empty. Tools
// call it once at start.
void WarnIfBlasKernelsAreGeneric();

}  // namespace loom

#endif  // LOOM_KERNELS_CPU_BLAS_CORE_H_
