#ifndef LOOM_TESTS_COMPILER_ACT_SIMULATOR_H_
#define LOOM_TESTS_COMPILER_ACT_SIMULATOR_H_

// A discrete simulator of a job's node plans under the act rule, for checking register memory
// sharing (compiler/memory_sharing.h) independently of the analysis that decides it: SimulateActs
// runs every act of the plans in a seeded random order, with the ranks of a collective and the
// halves of a SEND / RECEIVE pair decoupled (more orders than the runtime allows), and reports
// every act that writes a register of a memory pool while another register overlapping it in that
// pool is live, and whether the plans deadlock.

#include <cstdint>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "proto/plan.pb.h"

namespace loom::compiler::testing {

// How the next act is chosen among those that can happen.
enum class SchedulePolicy {
  kUniform,     // any, with equal chance
  kPriorities,  // the task with the highest priority (a random permutation drawn from the seed)
  kWeighted,    // by task weights drawn from the seed (1 to 1024, log-uniform)
};

struct SimulationOptions {
  uint64_t seed = 0;
  SchedulePolicy policy = SchedulePolicy::kUniform;
  // Stops (finished = false) after this many acts: a task that never stops acting.
  int64_t max_acts = 50'000'000;
  // Violations beyond this many are counted, not described.
  int max_described_violations = 20;
};

struct SimulationResult {
  int64_t acts = 0;
  // Acts that wrote a register of a memory pool.
  int64_t pooled_writes = 0;
  // Every task did all its acts and every piece was read.
  bool finished = false;
  // Nothing could act before the plans finished; `deadlock` says what waited for what.
  bool deadlocked = false;
  std::string deadlock;
  // One line per overlap of two live registers of a pool (up to max_described_violations).
  std::vector<std::string> violations;
  int64_t violation_count = 0;
  // Every pair seen live at once, unabridged: (plan position, register written, register live).
  std::set<std::tuple<int, std::string, std::string>> overlaps;
};

// Simulates `node_plans` (one job's plans: SplitByNode's, or a one-node plan alone) to the end.
// INVALID_ARGUMENT for plans it cannot simulate (a register read or written but not declared,
// a SEND without its RECEIVE, a pooled register without a size).
absl::StatusOr<SimulationResult> SimulateActs(absl::Span<const plan::Plan> node_plans,
                                              const SimulationOptions& options);

// The policy the test seeds cycle through: seed % 3.
SchedulePolicy PolicyOfSeed(uint64_t seed);

}  // namespace loom::compiler::testing

#endif  // LOOM_TESTS_COMPILER_ACT_SIMULATOR_H_
