#ifndef LOOM_KERNELS_CPU_RANDOM_KERNEL_H_
#define LOOM_KERNELS_CPU_RANDOM_KERNEL_H_

#include <memory>

#include "absl/status/statusor.h"
#include "kernels/kernel.h"

namespace loom::cpu {

// "random": no inputs, one float32 output of random values, seeded and deterministic.
// Attributes:
//   "seed" (int, required);
//   "distribution": "uniform" (default) in [low, high), or "normal";
//   "low", "high" (uniform; default 0 and 1, low <= high);
//   "mean", "std" (normal; default 0 and 1, std >= 0);
//   "offset" (int >= 0, default 0): element i of the output is element offset + i of the
//     unsliced tensor (row-major), so that a slice is generated on its own;
//   "same_every_piece" (bool, default false): when true every piece gets the same values
//     (variable initialisation); otherwise the piece index is part of the stream.
// Element i is a pure function of (seed, piece, offset + i): see counter_random.h.
absl::StatusOr<std::unique_ptr<Kernel>> CreateRandomKernel(const KernelInit& init);

}  // namespace loom::cpu

#endif  // LOOM_KERNELS_CPU_RANDOM_KERNEL_H_
