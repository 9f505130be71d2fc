#ifndef LOOM_COMPILER_GRADIENT_CLIPPING_H_
#define LOOM_COMPILER_GRADIENT_CLIPPING_H_

// Gradient clipping by global L2 norm (AddGradientClipping): the job-to-job pass that Compile
// (compiler/compiler.h) runs after autodiff when the job sets max_grad_norm. It puts the
// "squared_norm", "clip_coefficient" and "scale_by" ops of compiler/ops/clip_ops.h between the
// variables' gradients and the optimizer.

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/job.pb.h"

namespace loom::compiler {

// Gradient clipping by global L2 norm (torch.nn.utils.clip_grad_norm_) as a job-to-job
// transformation, after autodiff: every variable gradient "grad/<v>" (renamed
// "grad/<v>/unclipped") gets a "squared_norm" op; an "add" chain sums them on the job's
// placement into "clip/total_squared_norm"; "clip_coefficient" turns that into
// min(1, max_norm / (norm + 1e-6)); and "scale_by" writes the clipped "grad/<v>" that the
// optimizer reads. All these ops run once per step, on gradients summed over the step's
// micro-batches. Boxing supplies the reductions: a split gradient's squared norm is partial
// over its ranks. INVALID_ARGUMENT when max_norm is not positive or no variable has a gradient.
absl::StatusOr<job::Job> AddGradientClipping(const job::Job& job, double max_norm);

// The name the pass gives a gradient before clipping: "grad/<v>/unclipped" for "grad/<v>".
std::string UnclippedGradientName(absl::string_view gradient);

}  // namespace loom::compiler

#endif  // LOOM_COMPILER_GRADIENT_CLIPPING_H_
