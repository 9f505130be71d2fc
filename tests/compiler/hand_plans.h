#ifndef LOOM_TESTS_COMPILER_HAND_PLANS_H_
#define LOOM_TESTS_COMPILER_HAND_PLANS_H_

// Plans written by hand in tests, in the plan's text format: a register, a task and a whole plan
// from short strings, on one CPU device of node 0 unless a stream says otherwise.

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "proto/plan.pb.h"

namespace loom::compiler::testing {

inline constexpr char kDevice[] = "devices { device { node: 0 type: CPU index: 0 } }\n";
inline constexpr char kCompute[] =
    "stream { device { node: 0 type: CPU index: 0 } kind: STREAM_COMPUTE }";
inline constexpr char kCopyOut[] =
    "stream { device { node: 0 type: CPU index: 0 } kind: STREAM_COPY_OUT }";

// A register of 16 float32 (64 bytes).
inline std::string Register(const std::string& name, int slots = 1) {
  return absl::StrCat("registers { name: \"", name,
                      "\" tensor { shape: [16] data_type: FLOAT32 } num_slots: ", slots, " }\n");
}

inline std::string Task(const std::string& name, const std::string& kind,
                        const std::vector<std::string>& inputs,
                        const std::vector<std::string>& outputs, const std::string& extra = "",
                        const std::string& stream = kCompute) {
  std::string text = absl::StrCat("tasks { name: \"", name, "\" kind: ", kind, " ", stream, "\n");
  for (const std::string& input : inputs) absl::StrAppend(&text, "  inputs: \"", input, "\"\n");
  for (const std::string& output : outputs) absl::StrAppend(&text, "  outputs: \"", output, "\"\n");
  absl::StrAppend(&text, "  ", extra, "\n}\n");
  return text;
}

inline plan::Plan ParsePlan(const std::string& text) {
  plan::Plan plan;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &plan)) << text;
  return plan;
}

}  // namespace loom::compiler::testing

#endif  // LOOM_TESTS_COMPILER_HAND_PLANS_H_
