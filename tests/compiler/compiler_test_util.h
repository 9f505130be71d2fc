#ifndef LOOM_TESTS_COMPILER_COMPILER_TEST_UTIL_H_
#define LOOM_TESTS_COMPILER_COMPILER_TEST_UTIL_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/compiler.h"
#include "proto/job.pb.h"

namespace loom::compiler::testing {

// Parses a job in text format (CHECK-fails on a syntax error: tests write valid text).
job::Job ParseJob(const std::string& text);

// The compiler's op registry with every standard op.
const OpRegistry& StandardOps();

absl::StatusOr<CompileResult> CompileOn(const job::Job& job, int cpus, int nodes = 1);

// Tasks of a kind, and collective tasks of a collective kind.
std::vector<const plan::Task*> TasksOfKind(const plan::Plan& plan, plan::TaskKind kind);
std::vector<const plan::Task*> Collectives(const plan::Plan& plan, plan::CollectiveKind kind);

// The task named `name`; null when there is none.
const plan::Task* TaskNamed(const plan::Plan& plan, const std::string& name);

// Every register's slot count, by register name.
std::map<std::string, int> SlotsOf(const plan::Plan& plan);

// The chosen SBP of a tensor, as text ("S(0)", "(S(0), B)").
std::string SbpOf(const CompileResult& result, const std::string& tensor);

}  // namespace loom::compiler::testing

#endif  // LOOM_TESTS_COMPILER_COMPILER_TEST_UTIL_H_
