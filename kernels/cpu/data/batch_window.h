#ifndef LOOM_KERNELS_CPU_DATA_BATCH_WINDOW_H_
#define LOOM_KERNELS_CPU_DATA_BATCH_WINDOW_H_

// BatchWindow: which rows of a language-model batch a token source task produces (its
// data-parallel rank's window of the global batch, its micro-batches, the steps before a resumed
// run), parsed from the attributes the "token_batch" and "token_dataset" kernels share, and the
// check of their outputs x and y against it.

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/kernel.h"

namespace loom::cpu {

// Attributes: "global_batch" B (>= 1), "sequence" T (>= 1), "sample_begin" and "sample_count"
// (default 0 and B: the window of the B samples this task produces), "micro_batches" M (default 1;
// divides sample_count), "first_step" (default 0, >= 0), "steps_per_batch" (default 1, >= 1),
// "targets" (bool, one-output form only).
struct BatchWindow {
  int64_t global_batch = 0;
  int64_t sequence = 0;
  int64_t sample_begin = 0;
  int64_t sample_count = 0;
  int64_t micro_batches = 1;
  // The steps taken before piece 0 (a resumed job): piece p is step first_step + p / M.
  int64_t first_step = 0;
  // The steps that read one batch (an evaluation's input: the n-th evaluation, in step
  // n * steps_per_batch, reads batch n).
  int64_t steps_per_batch = 1;
  // The one-output form: true when its output is y (the targets), false when it is x.
  bool targets = false;
  // sample_count / micro_batches: the rows of each output.
  int64_t samples_per_piece = 0;

  // Piece p's batch and its first global sample: batch t = (first_step + p / M) / steps_per_batch
  // (below 2^64 for every piece), samples i = sample_begin + (p % M) * samples_per_piece + r for
  // rows r.
  uint64_t BatchOf(int64_t piece) const {
    const unsigned __int128 step =
        static_cast<unsigned __int128>(first_step) + static_cast<uint64_t>(piece / micro_batches);
    return static_cast<uint64_t>(step / static_cast<uint64_t>(steps_per_batch));
  }
  int64_t MicroBatchOf(int64_t piece) const { return piece % micro_batches; }
  int64_t FirstSampleOf(int64_t piece) const {
    return sample_begin + MicroBatchOf(piece) * samples_per_piece;
  }
};

// The window of `conf` for a task with `num_outputs` (1 or 2) outputs; errors name `op_type` and
// the attribute.
absl::StatusOr<BatchWindow> ParseBatchWindow(const char* op_type, const plan::KernelConf& conf,
                                             int num_outputs);

// The outputs (1 or 2, from the arity) of a token source task: each int32 or int64 and
// [samples_per_piece, sequence]; errors name `op_type` and the output (x or y).
absl::Status CheckBatchOutputs(const char* op_type, const KernelInit& init,
                               const BatchWindow& window);

// 1 or 2: the outputs a token source task has (CheckArity with this many).
inline int NumBatchOutputs(const KernelInit& init) { return init.outputs.size() == 1 ? 1 : 2; }

}  // namespace loom::cpu

#endif  // LOOM_KERNELS_CPU_DATA_BATCH_WINDOW_H_
