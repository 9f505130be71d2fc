#ifndef LOOM_COMPILER_TOKEN_INPUTS_H_
#define LOOM_COMPILER_TOKEN_INPUTS_H_

// Job inputs that read token ids (Input.token_file, Input.token_dataset): their checks when the
// job is read, and the attributes of the source kernel ("token_batch", "token_dataset") a rank's
// window of the batch lowers to.

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "proto/job.pb.h"
#include "proto/plan.pb.h"

namespace loom::compiler {

// Whether the input reads tokens (from a file or a dataset).
bool IsTokenInput(const job::Input& input);

// The checks of a token input beyond its shape: INT32 or INT64, rank 2, and its source's fields
// (paths, formats, weights, end_of_text); errors start with `who` ("input 'x'").
absl::Status CheckTokenInput(const job::Input& input, const std::string& who);

// The kernel of a token input: op type and the dataset's (or file's) attributes, without the batch
// window (the caller sets global_batch, sequence, sample_begin, sample_count).
plan::KernelConf TokenInputKernel(const job::Input& input);

}  // namespace loom::compiler

#endif  // LOOM_COMPILER_TOKEN_INPUTS_H_
