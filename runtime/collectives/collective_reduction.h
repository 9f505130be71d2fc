#ifndef LOOM_RUNTIME_COLLECTIVES_COLLECTIVE_REDUCTION_H_
#define LOOM_RUNTIME_COLLECTIVES_COLLECTIVE_REDUCTION_H_

// CombineInto: the element-wise float32 reduction (sum or max) of the CPU collective backends
// (shared memory, network). Both reduce with this one function, in rank order, so that their
// results are bit-identical.

#include <cmath>
#include <cstdint>

#include "proto/plan.pb.h"

namespace loom {

// accumulator[i] = accumulator[i] (op) values[i], for the reductions of every collective backend.
// Backends must give bit-identical results (a multi-node run equals the single-process run), so
// they all reduce with this one function, each element starting from rank 0's value and combining
// ranks 1, 2, ... in order. Max propagates NaN, like PyTorch.
inline void CombineInto(plan::ReduceOperation operation, float* accumulator, const float* values,
                        int64_t count) {
  if (operation == plan::REDUCE_MAX) {
    for (int64_t i = 0; i < count; ++i) {
      const float value = values[i];
      accumulator[i] =
          (std::isnan(accumulator[i]) || accumulator[i] >= value) ? accumulator[i] : value;
    }
  } else {
    for (int64_t i = 0; i < count; ++i) accumulator[i] += values[i];
  }
}

}  // namespace loom

#endif  // LOOM_RUNTIME_COLLECTIVES_COLLECTIVE_REDUCTION_H_
