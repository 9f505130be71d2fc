#ifndef LOOM_COMPILER_JOB_NAMES_H_
#define LOOM_COMPILER_JOB_NAMES_H_

// JobNames: names not yet used in a job, for the job-to-job passes that add ops (autodiff, mixed
// precision, activation offload).

#include <string>

#include "absl/container/flat_hash_set.h"
#include "proto/job.pb.h"

namespace loom::compiler {

class JobNames {
 public:
  // Every name `job` uses is taken: its variables', inputs', ops' and their outputs'.
  explicit JobNames(const job::Job& job);

  // Takes `name` too, unused or not.
  void Reserve(const std::string& name) { taken_.insert(name); }

  // `base` when it is free, else the first free of base_1, base_2, ...; taken from then on.
  std::string Take(const std::string& base);

 private:
  absl::flat_hash_set<std::string> taken_;
};

}  // namespace loom::compiler

#endif  // LOOM_COMPILER_JOB_NAMES_H_
