#ifndef LOOM_COMPILER_AUTODIFF_H_
#define LOOM_COMPILER_AUTODIFF_H_

// Reverse-mode autodiff (AddBackward): the job-to-job pass that adds to a training job the ops
// computing "grad/<variable>" for every variable its loss depends on, each op's part emitted by
// its definition's Gradient. Compile (compiler/compiler.h) runs it when the job names a loss,
// after the mixed-precision casts and before gradient clipping.

#include <string>

#include "absl/status/statusor.h"
#include "compiler/logical_graph.h"
#include "compiler/op_definition.h"
#include "proto/job.pb.h"

namespace loom::compiler {

// Reverse-mode autodiff as a job-to-job transformation: returns `job` with the ops computing the
// gradient of the tensor `loss` (a float32 scalar: shape [] or [1]) with respect to every variable
// the loss depends on, as a tensor named exactly "grad/<variable>". The backward pass is seeded
// with "ones_like"(loss) (scaled by 1 / num_micro_batches: the step's gradient is the sum of
// its micro-batches'), walks the ops in reverse topological order calling each op definition's
// Gradient, and sums the gradients of tensors used several times with "add". Emitted ops and
// tensors are named "grad/..." (unique in the job) and run on their forward op's placement and
// stage, marked `backward`. Integer tensors get no gradient. Errors: INVALID_ARGUMENT for an unknown or non-scalar
// loss and for an invalid job; an op type without a gradient keeps its code (UNIMPLEMENTED) and
// names the op.
absl::StatusOr<job::Job> AddBackward(const job::Job& job, const OpRegistry& registry,
                                     const DeviceSet& devices, const std::string& loss);

}  // namespace loom::compiler

#endif  // LOOM_COMPILER_AUTODIFF_H_
