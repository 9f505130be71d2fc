#ifndef LOOM_COMPILER_PARALLEL_FOR_H_
#define LOOM_COMPILER_PARALLEL_FOR_H_

// The threads of the compile passes that work node by node (the split per node and the memory
// check): ParallelFor runs a loop body over [0, count) on up to a given number of threads, and
// DefaultCompileThreads is the number a compile uses when CompileOptions::threads is 0.

#include "absl/functional/function_ref.h"

namespace loom::compiler {

// The threads a compile uses by default: the machine's hardware threads (at least 1).
int DefaultCompileThreads();

// Calls `body(i)` once for every i in [0, count), on up to `threads` threads (the caller's among
// them: threads <= 1 runs the loop on the caller's thread alone), and returns when every call has
// returned. Calls for different i may run at the same time, in any order; `body` must not throw.
void ParallelFor(int count, int threads, absl::FunctionRef<void(int)> body);

}  // namespace loom::compiler

#endif  // LOOM_COMPILER_PARALLEL_FOR_H_
