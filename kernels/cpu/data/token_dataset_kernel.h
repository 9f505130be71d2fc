#ifndef LOOM_KERNELS_CPU_DATA_TOKEN_DATASET_KERNEL_H_
#define LOOM_KERNELS_CPU_DATA_TOKEN_DATASET_KERNEL_H_

// The CPU kernel of "token_dataset" (CreateTokenDatasetKernel): a source that reads this task's
// share of a language-model batch from a token dataset (TokenDataset, docs/DATA.md): many files,
// documents, per-epoch shuffles, weighted blends.

#include <memory>

#include "absl/status/statusor.h"
#include "kernels/kernel.h"

namespace loom::cpu {

// "token_dataset": no inputs; two outputs x and y, or one (x, or y with "targets"), each int32 or
// int64 [sample_count / micro_batches, sequence], as "token_batch" (the batch window attributes
// of kernels/cpu/data/batch_window.h). Row r of piece p is global sample
// g = (first_step + p / M) * global_batch + sample_begin + (p % M) * (sample_count / M) + r;
// x is its tokens [0, T), y its tokens [1, T + 1).
//
// Attributes of the dataset (job.proto's TokenDataset, flattened):
//   "paths" (string list): every source's paths, source after source;
//   "path_counts" (int list): how many of them each source has (>= 1 each; sums to their number);
//   "formats" (string list, one per source): "bytes", "uint16" or "uint32";
//   "weights" (float list, one per source, default all 1): each finite and > 0;
//   "end_of_text" (int, optional, >= 0): the token that ends a document;
//   "in_order" (bool, default false): no shuffle;
//   "seed" (int, default 0).
// The files are listed, opened and scanned for documents when the kernel is built, through
// KernelInit::files (null: PERMISSION_DENIED); errors name the source and the path.
absl::StatusOr<std::unique_ptr<Kernel>> CreateTokenDatasetKernel(const KernelInit& init);

}  // namespace loom::cpu

#endif  // LOOM_KERNELS_CPU_DATA_TOKEN_DATASET_KERNEL_H_
