#ifndef LOOM_KERNELS_CPU_RANDOM_KERNEL_H_
#define LOOM_KERNELS_CPU_RANDOM_KERNEL_H_

// The CPU kernels of seeded random tensors: "random" (float32, uniform or normal) and
// "random_integers" (int32 or int64 in [0, high)). Every element is a pure function of the seed,
// the step and its place in the logical tensor (counter_random.h), so every slice or split holds
// the unsplit tensor's values. The CUDA random kernels run these factories' checks first.

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
//   "logical_shape" (int list, optional) and "slice_begin" (int list, default all zeros; only with
//     logical_shape): the output is the window [slice_begin, slice_begin + output shape) of a
//     logical tensor of logical_shape (same rank as the output), and each element takes the value
//     of its logical element: the counter is offset + that element's row-major index in the
//     logical tensor. Every split of a tensor, along any axes and however uneven, thus generates
//     exactly the values the unsplit tensor has there;
//   "same_every_piece" (bool, default false): when true every piece gets the same values
//     (variable initialisation); otherwise the step is part of the stream;
//   "first_step" (int >= 0, default 0): piece p is step first_step + p, so that a job resumed
//     after first_step steps draws exactly the values the uninterrupted run drew at each step
//     (ignored with same_every_piece).
// Element i is a pure function of (seed, step, counter): see counter_random.h.
absl::StatusOr<std::unique_ptr<Kernel>> CreateRandomKernel(const KernelInit& init);

// "random_integers": no inputs, one int32 or int64 output of integers uniform in [0, high)
// (token ids, labels), seeded and deterministic. Attributes "seed" (int, required), "high" (int,
// required, >= 1, at most 2^31 for int32), and "offset", "logical_shape", "slice_begin",
// "same_every_piece" and "first_step" as for "random". The value of element counter c is
// floor(RandomBits(key, c, 0) * high / 2^64).
absl::StatusOr<std::unique_ptr<Kernel>> CreateRandomIntegersKernel(const KernelInit& init);

}  // namespace loom::cpu

#endif  // LOOM_KERNELS_CPU_RANDOM_KERNEL_H_
