#ifndef LOOM_KERNELS_CPU_DATA_TOKEN_BATCH_KERNEL_H_
#define LOOM_KERNELS_CPU_DATA_TOKEN_BATCH_KERNEL_H_

// The CPU kernel of "token_batch" (CreateTokenBatchKernel): a source that reads this task's share
// of a language-model batch (inputs x and targets y, shifted by one token) from a token file
// opened through KernelInit::files and read with pread. Batches are a pure function of the file,
// the batch and sequence sizes, the step and the sample, so every split into ranks and
// micro-batches reads the rows of the unsplit batch.

#include <memory>

#include "absl/status/statusor.h"
#include "kernels/kernel.h"

namespace loom::cpu {

// "token_batch": no inputs; two outputs x and y, or one output, x or y (each int32 or int64),
// holding this task's share of a language-model batch read from a token file: y is x shifted by
// one token. The one-output form is what a job input with a token-file source lowers to: the
// model's tokens and its targets are then two SOURCE tasks reading the same file.
//
// The file is opened once, when the kernel is built, through KernelInit::files (null: no file may
// be opened, PERMISSION_DENIED); building fails, naming the path, if it is refused there (not
// beneath a root: PERMISSION_DENIED), cannot be opened, is not a regular file, is empty, has a
// size that is not a whole number of tokens, or holds fewer than sequence + 2 tokens. Compute reads
// the rows it needs with pread: a file truncated since it was opened fails the act with DATA_LOSS
// naming it (never SIGBUS), and a read stops with CANCELLED once KernelInit::ending is set.
//
// Attributes:
//   "path" (string, required): the token file;
//   "format" (string, default "bytes"): "bytes" (one token per byte), "uint16" or "uint32"
//     (little-endian 16- or 32-bit tokens, as nanoGPT and Megatron write them; a uint32 token
//     beyond the output's integer type fails the act naming the file and position);
//   "global_batch" B (int, required, >= 1): samples per step over all data-parallel ranks;
//   "sequence" T (int, required, >= 1): tokens per sample;
//   "sample_begin" (int, default 0) and "sample_count" (int, default B): the contiguous window
//     [sample_begin, sample_begin + sample_count) of the B samples that this task's data-parallel
//     rank produces; it must lie inside [0, B);
//   "micro_batches" M (int, default 1, >= 1): sample_count must be a multiple of M;
//   "first_step" (int, default 0, >= 0): the steps a resumed job has already taken, so that its
//     batches continue where the interrupted run's stopped;
//   "targets" (bool, default false; only in the one-output form): the output is y when true,
//     x when false.
//
// Piece p is step t = first_step + p / M, micro-batch j = p % M; it produces the
// b = sample_count / M global samples i = sample_begin + j * b + r for r in [0, b), so every
// output must be [b, T]. With N
// tokens in the file, sample i of step t starts at
//   offset = ((t * B + i) * T) mod (N - T - 1)
// (computed without overflow for any piece), and row r is x = tokens[offset, offset + T),
// y = tokens[offset + 1, offset + T + 1). Batches are thus a pure function of (file, B, T, t, i):
// every split into ranks and micro-batches yields exactly the rows of the unsplit global batch.
absl::StatusOr<std::unique_ptr<Kernel>> CreateTokenBatchKernel(const KernelInit& init);

}  // namespace loom::cpu

#endif  // LOOM_KERNELS_CPU_DATA_TOKEN_BATCH_KERNEL_H_
