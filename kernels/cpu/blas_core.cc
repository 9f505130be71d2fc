#include "kernels/cpu/blas_core.h"

#include <cblas.h>

#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace loom {

std::string BlasCoreName() {
  const char* name = openblas_get_corename();
  return name == nullptr ? "" : name;
}

std::string BlasCoreWarning(const std::string& core_name, bool avx512, bool avx2) {
  if (!avx2) return "";
  // OpenBLAS's x86-64 kernels without AVX2 (its DYNAMIC_ARCH targets below Haswell).
  static const std::set<std::string> kOlder = {
      "prescott", "core2",      "penryn",    "dunnington", "nehalem",    "sandybridge", "atom",
      "opteron",  "barcelona",  "bobcat",    "bulldozer",  "piledriver", "steamroller", "excavator",
      "katmai",   "coppermine", "northwood", "banias",     "athlon"};
  const std::string lower = absl::AsciiStrToLower(core_name);
  if (kOlder.count(lower) == 0) return "";
  const char* suggested = avx512 ? "SkylakeX" : "Haswell";
  return absl::StrCat("OpenBLAS runs its '", core_name, "' kernels on a CPU with ",
                      avx512 ? "AVX-512" : "AVX2",
                      " (it does not know this CPU model): CPU GEMMs are several times slower "
                      "than they could be. Set OPENBLAS_CORETYPE=",
                      suggested, " in this process's environment (read when OpenBLAS loads)");
}

void WarnIfBlasKernelsAreGeneric() {
  const std::string warning = BlasCoreWarning(
      BlasCoreName(), __builtin_cpu_supports("avx512f") != 0, __builtin_cpu_supports("avx2") != 0);
  if (!warning.empty()) LOG(WARNING) << warning;
}

}  // namespace loom
