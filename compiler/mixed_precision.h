#ifndef LOOM_COMPILER_MIXED_PRECISION_H_
#define LOOM_COMPILER_MIXED_PRECISION_H_

// Mixed precision (AddMixedPrecisionCasts): the job-to-job pass that Compile (compiler/compiler.h)
// runs before autodiff when Job.matmul_data_type is set to another type than float32. With
// BFLOAT16, matmuls and causal attention compute on bfloat16 casts of their float32 inputs, and
// their consumers still read float32.

#include "absl/status/statusor.h"
#include "compiler/logical_graph.h"
#include "compiler/op_definition.h"
#include "proto/job.pb.h"

namespace loom::compiler {

// Job.matmul_data_type as a job-to-job transformation, before autodiff. With BFLOAT16, a matmul
// "N" computing y from float32 inputs a and b becomes
//   cast "N.a.bfloat16" (a -> bfloat16), cast "N.b.bfloat16" (b -> bfloat16),
//   matmul "N" (bfloat16, float32 accumulation) -> "y.bfloat16",
//   cast "N.float32" ("y.bfloat16" -> float32) -> y,
// so every consumer still reads a float32 y (the matmul's output SBP hints move to the last cast)
// and autodiff differentiates through the casts: the backward matmuls run in bfloat16 too, and the
// gradients of a and b arrive in float32. A causal_attention gets the same treatment (casts
// "N.q.bfloat16", "N.k.bfloat16", "N.v.bfloat16"): its products run on bfloat16 operands with
// float32 accumulation and its softmax in float32, as PyTorch's autocast runs attention. Each op
// gets its own casts, so no bfloat16 tensor has two consumers and gradients are summed in float32
// only; a cast of a variable (or of another once-per-step tensor) runs once a step. Ops marked
// `keep_float32`, and those whose inputs are not all float32, are left alone. Unset or FLOAT32: the
// job unchanged. INVALID_ARGUMENT for another data type or an invalid job.
absl::StatusOr<job::Job> AddMixedPrecisionCasts(const job::Job& job, const OpRegistry& registry,
                                                const DeviceSet& devices);

}  // namespace loom::compiler

#endif  // LOOM_COMPILER_MIXED_PRECISION_H_
