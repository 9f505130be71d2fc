// Register lifetimes (compiler/register_lifetimes.h) and the sharing built on them, checked
// against executions instead of the analysis' own argument: tests/compiler/act_simulator.h runs
// the plans' acts in many random orders (more than the runtime allows) and reports every two
// registers of a pool that are live at once. Compiled GPT plans of every layout never overlap;
// no pair the analysis calls disjoint is ever seen live together; hand-written plans pin the
// cases the analysis must (not) prove.

#include "compiler/register_lifetimes.h"

#include <algorithm>
#include <map>
#include <ostream>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "compiler/compiler.h"
#include "compiler/memory_sharing.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "tests/compiler/act_simulator.h"
#include "tests/compiler/compiler_test_util.h"
#include "tests/compiler/gpt_layouts.h"
#include "tests/compiler/hand_plans.h"

namespace loom::compiler::testing {
namespace {

// Seeds per compiled layout (the policies cycle with the seed: uniform, priorities, weighted).
constexpr int kSeeds = 20;
constexpr int kOracleSeeds = 6;
constexpr int kHandSeeds = 30;

// ---- Helpers ----

// Simulates `plans` with seeds [0, seeds): the first failure's description, or "" when every
// seed finished without a violation. `acts`: the acts of a run (every order does the same acts).
std::string SimulateSeeds(const std::vector<plan::Plan>& plans, int seeds, int64_t* acts = nullptr,
                          int64_t* pooled_writes = nullptr) {
  int64_t first_acts = -1;
  for (int seed = 0; seed < seeds; ++seed) {
    SimulationOptions options;
    options.seed = static_cast<uint64_t>(seed);
    options.policy = PolicyOfSeed(options.seed);
    absl::StatusOr<SimulationResult> result = SimulateActs(plans, options);
    if (!result.ok()) return result.status().ToString();
    if (!result->finished) {
      return absl::StrCat("seed ", seed, ": ",
                          result->deadlocked ? "deadlock: " + result->deadlock : "did not finish");
    }
    if (result->violation_count > 0) {
      return absl::StrCat("seed ", seed, ": ", result->violation_count, " overlaps:\n",
                          absl::StrJoin(result->violations, "\n"));
    }
    if (first_acts < 0) first_acts = result->acts;
    if (result->acts != first_acts) {
      return absl::StrCat("seed ", seed, " did ", result->acts, " acts, seed 0 ", first_acts);
    }
    if (pooled_writes != nullptr && seed == 0) *pooled_writes = result->pooled_writes;
  }
  if (acts != nullptr) *acts = first_acts;
  return "";
}

// Where a register of `plans` sits in the analysis' groups.
struct Position {
  int group = -1;
  int index = -1;
};

std::map<std::pair<int, std::string>, Position> PositionsOf(const RegisterLifetimes& lifetimes,
                                                            const std::vector<plan::Plan>& plans) {
  std::map<std::pair<int, std::string>, Position> positions;
  for (int g = 0; g < static_cast<int>(lifetimes.groups().size()); ++g) {
    const SharingGroup& group = lifetimes.groups()[g];
    for (int i = 0; i < static_cast<int>(group.registers.size()); ++i) {
      const RegisterRef& ref = group.registers[i];
      positions[{ref.plan, plans[ref.plan].registers(ref.reg).name()}] = Position{g, i};
    }
  }
  return positions;
}

// The oracle: every register of every group placed at offset 0 of one pool per group, so the
// simulator reports every two registers of a group it sees live at once; none of those pairs
// may be one the analysis calls disjoint. Returns the failures ("" when none) and counts the
// pairs seen.
std::string CheckDisjointAgainstExecutions(const std::vector<plan::Plan>& plans, int seeds,
                                           int* pairs_seen = nullptr) {
  const RegisterLifetimes lifetimes = RegisterLifetimes::Analyze(plans);
  const auto positions = PositionsOf(lifetimes, plans);
  std::vector<plan::Plan> stacked = plans;
  for (int g = 0; g < static_cast<int>(lifetimes.groups().size()); ++g) {
    for (const RegisterRef& ref : lifetimes.groups()[g].registers) {
      plan::RegisterDesc& reg = *stacked[ref.plan].mutable_registers(ref.reg);
      reg.set_pool(absl::StrCat("oracle:", g));
      reg.set_pool_offset(0);
    }
  }
  std::set<std::tuple<int, std::string, std::string>> seen;
  std::vector<std::string> failures;
  for (int seed = 0; seed < seeds; ++seed) {
    SimulationOptions options;
    options.seed = static_cast<uint64_t>(seed);
    options.policy = PolicyOfSeed(options.seed);
    options.max_described_violations = 0;
    absl::StatusOr<SimulationResult> result = SimulateActs(stacked, options);
    if (!result.ok()) return result.status().ToString();
    if (!result->finished) return absl::StrCat("seed ", seed, ": ", result->deadlock);
    for (const auto& [plan, written, live] : result->overlaps) {
      const auto first = positions.find({plan, written});
      const auto second = positions.find({plan, live});
      if (first == positions.end() || second == positions.end()) {
        failures.push_back(absl::StrCat("'", written, "' or '", live, "' is in no group"));
        continue;
      }
      if (!seen.emplace(plan, std::min(written, live), std::max(written, live)).second) continue;
      const Position a = first->second;
      const Position b = second->second;
      if (a.group != b.group) continue;  // pools are per group: cannot happen
      if (lifetimes.Disjoint(a.group, a.index, b.index) ||
          lifetimes.Disjoint(b.group, b.index, a.index)) {
        if (failures.size() < 10) {
          failures.push_back(absl::StrCat("seed ", seed, ": the analysis calls '", written,
                                          "' and '", live, "' (plan ", plan,
                                          ") disjoint, but one was written while the other was "
                                          "live"));
        }
      }
    }
  }
  if (pairs_seen != nullptr) *pairs_seen = static_cast<int>(seen.size());
  return absl::StrJoin(failures, "\n");
}

// ---- Compiled GPT plans ----

class CompiledPlansTest : public ::testing::TestWithParam<GptLayout> {};

// The plans as compiled (registers sharing by default): no order of acts ever writes a register
// over another one's live bytes, and none deadlocks.
TEST_P(CompiledPlansTest, NoOrderOfActsOverlapsLiveRegisters) {
  absl::StatusOr<CompileResult> compiled = CompileGpt(GetParam(), job::REGISTER_MEMORY_SHARED);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  int pooled = 0;
  for (const plan::Plan& plan : compiled->node_plans) {
    for (const plan::RegisterDesc& reg : plan.registers()) pooled += reg.pool().empty() ? 0 : 1;
  }
  ASSERT_GT(pooled, 0) << "no register shares: nothing to check";
  int64_t acts = 0;
  int64_t pooled_writes = 0;
  EXPECT_EQ(SimulateSeeds(compiled->node_plans, kSeeds, &acts, &pooled_writes), "");
  EXPECT_GT(pooled_writes, 0);
}

// Every pair of registers the analysis calls disjoint, checked alone (not only those the
// placement happened to overlap): none is ever seen live with the other.
TEST_P(CompiledPlansTest, NoPairCalledDisjointIsEverLiveAtOnce) {
  absl::StatusOr<CompileResult> compiled = CompileGpt(GetParam(), job::REGISTER_MEMORY_SEPARATE);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  int pairs_seen = 0;
  EXPECT_EQ(CheckDisjointAgainstExecutions(compiled->node_plans, kOracleSeeds, &pairs_seen), "");
  // Every act's input and output are live at once: the oracle can fail.
  EXPECT_GT(pairs_seen, 0);
}

INSTANTIATE_TEST_SUITE_P(Layouts, CompiledPlansTest, ::testing::ValuesIn(SharingLayouts()),
                         [](const ::testing::TestParamInfo<GptLayout>& info) {
                           return info.param.name;
                         });

// The checker can fail: an act's input and output placed on the same bytes are reported, naming
// both, on every order.
TEST(ActSimulatorTest, ReportsAnInputAndOutputOnTheSameBytes) {
  absl::StatusOr<CompileResult> compiled =
      CompileGpt(GptLayout{.name = "one_device"}, job::REGISTER_MEMORY_SHARED);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  plan::Plan& plan = compiled->node_plans[0];
  std::map<std::string, int> position;
  for (int r = 0; r < plan.registers_size(); ++r) position[plan.registers(r).name()] = r;
  std::string input;
  std::string output;
  for (const plan::Task& task : plan.tasks()) {
    if (task.kind() != plan::COMPUTE || task.inputs_size() == 0 || task.outputs_size() == 0) {
      continue;
    }
    input = task.inputs(0);
    output = task.outputs(0);
    break;
  }
  ASSERT_FALSE(input.empty());
  for (const std::string& name : {input, output}) {
    plan::RegisterDesc& reg = *plan.mutable_registers(position.at(name));
    reg.set_pool("corrupt");
    reg.set_pool_offset(0);
  }
  SimulationOptions options;
  absl::StatusOr<SimulationResult> result = SimulateActs(compiled->node_plans, options);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_GT(result->violation_count, 0);
  ASSERT_FALSE(result->violations.empty());
  EXPECT_NE(result->violations[0].find("'" + input + "'"), std::string::npos)
      << result->violations[0];
  EXPECT_NE(result->violations[0].find("'" + output + "'"), std::string::npos)
      << result->violations[0];
}

// The checker reports a plan that cannot finish: a cycle that no piece can enter.
TEST(ActSimulatorTest, ReportsADeadlock) {
  plan::Plan plan;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(
      R"pb(
        devices { device { node: 0 type: CPU index: 0 } }
        registers {
          name: "x"
          tensor {
            shape: [ 4 ]
            data_type: FLOAT32
          }
          num_slots: 1
        }
        registers {
          name: "r1"
          tensor {
            shape: [ 4 ]
            data_type: FLOAT32
          }
          num_slots: 1
        }
        registers {
          name: "r2"
          tensor {
            shape: [ 4 ]
            data_type: FLOAT32
          }
          num_slots: 1
        }
        tasks {
          name: "source"
          kind: SOURCE
          stream { device { node: 0 type: CPU index: 0 } }
          outputs: "x"
          num_pieces: 2
        }
        tasks {
          name: "a"
          kind: COMPUTE
          stream { device { node: 0 type: CPU index: 0 } }
          inputs: "x"
          inputs: "r2"
          outputs: "r1"
        }
        tasks {
          name: "b"
          kind: COMPUTE
          stream { device { node: 0 type: CPU index: 0 } }
          inputs: "r1"
          outputs: "r2"
        }
      )pb",
      &plan));
  absl::StatusOr<SimulationResult> result = SimulateActs({plan}, SimulationOptions{});
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_TRUE(result->deadlocked);
  EXPECT_FALSE(result->finished);
  EXPECT_NE(result->deadlock.find("'r2'"), std::string::npos) << result->deadlock;
  EXPECT_EQ(result->acts, 1);
}

// ---- Hand-written plans ----

// Whether the analysis proves registers `a` and `b` of `plan` disjoint (both ways, the same);
// a failure when either is in no group, or they are in different ones.
bool Disjoint(const plan::Plan& plan, const std::string& a, const std::string& b) {
  const std::vector<plan::Plan> plans = {plan};
  const RegisterLifetimes lifetimes = RegisterLifetimes::Analyze(plans);
  const auto positions = PositionsOf(lifetimes, plans);
  const auto first = positions.find({0, a});
  const auto second = positions.find({0, b});
  if (first == positions.end() || second == positions.end()) {
    ADD_FAILURE() << "'" << a << "' or '" << b << "' is in no group";
    return false;
  }
  if (first->second.group != second->second.group) {
    ADD_FAILURE() << "'" << a << "' and '" << b << "' are in different groups";
    return false;
  }
  const int group = first->second.group;
  const bool forward = lifetimes.Disjoint(group, first->second.index, second->second.index);
  const bool backward = lifetimes.Disjoint(group, second->second.index, first->second.index);
  EXPECT_EQ(forward, backward) << "'" << a << "' and '" << b << "'";
  return forward;
}

bool InAGroup(const plan::Plan& plan, const std::string& name) {
  const std::vector<plan::Plan> plans = {plan};
  const RegisterLifetimes lifetimes = RegisterLifetimes::Analyze(plans);
  return PositionsOf(lifetimes, plans).count({0, name}) > 0;
}

// Places the registers `names` of `plan` at offset 0 of one new pool.
plan::Plan Stacked(plan::Plan plan, const std::vector<std::string>& names) {
  for (plan::RegisterDesc& reg : *plan.mutable_registers()) {
    if (std::find(names.begin(), names.end(), reg.name()) == names.end()) continue;
    reg.set_pool("stacked");
    reg.set_pool_offset(0);
  }
  return plan;
}

// Sharing as the compiler does it, then every order: no overlap.
std::string ShareAndSimulate(const plan::Plan& plan, int* pools = nullptr) {
  std::vector<plan::Plan> plans = {plan};
  ShareRegisterMemory(plans);
  if (pools != nullptr) *pools = plans[0].memory_pools_size();
  return SimulateSeeds(plans, kHandSeeds);
}

// source -> a -> b -> c -> sink, one slot each: a may write piece n + 1 while c still writes
// piece n.
plan::Plan ChainPlan() {
  return ParsePlan(
      absl::StrCat(kDevice, Register("x"), Register("ra"), Register("rb"), Register("rc"),
                   Task("source", "SOURCE", {}, {"x"}, "num_pieces: 4"),
                   Task("a", "COMPUTE", {"x"}, {"ra"}), Task("b", "COMPUTE", {"ra"}, {"rb"}),
                   Task("c", "COMPUTE", {"rb"}, {"rc"}), Task("sink", "SINK", {"rc"}, {})));
}

TEST(RegisterLifetimesTest, AChainWithoutALoopLetsTheProducerRunAhead) {
  const plan::Plan plan = ChainPlan();
  EXPECT_FALSE(Disjoint(plan, "ra", "rc"));
  EXPECT_FALSE(Disjoint(plan, "ra", "rb"));
  EXPECT_FALSE(Disjoint(plan, "rb", "rc"));
  EXPECT_FALSE(InAGroup(plan, "x")) << "a SOURCE's register";
  // Executions agree: some order writes one of ra, rc while the other is live.
  const std::vector<plan::Plan> stacked = {Stacked(plan, {"ra", "rc"})};
  EXPECT_NE(SimulateSeeds(stacked, kHandSeeds), "");
  EXPECT_EQ(CheckDisjointAgainstExecutions({plan}, kHandSeeds), "");
  int pools = -1;
  EXPECT_EQ(ShareAndSimulate(plan, &pools), "");
  EXPECT_EQ(pools, 0);
}

TEST(RegisterLifetimesTest, AnActsInputAndOutputAreNeverDisjoint) {
  const plan::Plan plan = ChainPlan();
  for (const auto& [input, output] :
       std::vector<std::pair<std::string, std::string>>{{"ra", "rb"}, {"rb", "rc"}}) {
    EXPECT_FALSE(Disjoint(plan, input, output)) << input << " -> " << output;
    const std::vector<plan::Plan> stacked = {Stacked(plan, {input, output})};
    EXPECT_NE(SimulateSeeds(stacked, 1), "") << input << " -> " << output;
  }
}

TEST(RegisterLifetimesTest, TwoOutputsOfOneActAreNeverDisjoint) {
  // y2 has no reader: it lives only during the act that writes it, which also writes y1.
  const plan::Plan plan = ParsePlan(absl::StrCat(
      kDevice, Register("x"), Register("p"), Register("y1"), Register("y2"), Register("z"),
      Task("source", "SOURCE", {}, {"x"}, "num_pieces: 3"), Task("a", "COMPUTE", {"x"}, {"p"}),
      Task("split", "COMPUTE", {"p"}, {"y1", "y2"}), Task("c", "COMPUTE", {"y1"}, {"z"}),
      Task("sink", "SINK", {"z"}, {})));
  EXPECT_FALSE(Disjoint(plan, "y1", "y2"));
  EXPECT_FALSE(Disjoint(plan, "p", "y2"));
  const std::vector<plan::Plan> stacked = {Stacked(plan, {"y1", "y2"})};
  EXPECT_NE(SimulateSeeds(stacked, 1), "");
  EXPECT_EQ(CheckDisjointAgainstExecutions({plan}, kHandSeeds), "");
  EXPECT_EQ(ShareAndSimulate(plan), "");
}

TEST(RegisterLifetimesTest, ARegisterReadOnAnotherStreamOrWithTwoSlotsIsInNoGroup) {
  const plan::Plan plan = ParsePlan(absl::StrCat(
      kDevice, Register("x"), Register("across"), Register("double", 2), Register("kept"),
      Register("copied"), Task("source", "SOURCE", {}, {"x"}, "num_pieces: 3"),
      Task("a", "COMPUTE", {"x"}, {"across", "double", "kept"}),
      Task("out", "COMPUTE", {"across"}, {"copied"}, "", kCopyOut),
      Task("sink_copied", "SINK", {"copied"}, {}, "", kCopyOut),
      Task("sink_double", "SINK", {"double"}, {}), Task("sink_kept", "SINK", {"kept"}, {})));
  EXPECT_FALSE(InAGroup(plan, "across"));
  EXPECT_FALSE(InAGroup(plan, "double"));
  EXPECT_TRUE(InAGroup(plan, "kept"));
  EXPECT_EQ(ShareAndSimulate(plan), "");
}

// One step per piece: a VARIABLE feeds a forward chain whose backward chain computes its
// gradient, so step k + 1's forward starts only after step k's backward returned everything.
//   w ──> f1 (x, w) -> fa -> f2 -> fb -> loss -> l -> b1 -> ba -> b2 -> gw ──> w (next step)
plan::Plan TrainingLoopPlan() {
  return ParsePlan(absl::StrCat(
      kDevice, Register("x"), Register("w"), Register("fa"), Register("fb"), Register("l"),
      Register("ba"), Register("gw"), Task("source", "SOURCE", {}, {"x"}, "num_pieces: 3"),
      Task("variable", "VARIABLE", {"gw"}, {"w"}, "num_pieces: 3"),
      Task("f1", "COMPUTE", {"x", "w"}, {"fa"}), Task("f2", "COMPUTE", {"fa"}, {"fb"}),
      Task("loss", "COMPUTE", {"fb"}, {"l"}), Task("b1", "COMPUTE", {"l"}, {"ba"}),
      Task("b2", "COMPUTE", {"ba"}, {"gw"})));
}

TEST(RegisterLifetimesTest, ATrainingLoopKeepsForwardAndBackwardTemporariesApart) {
  const plan::Plan plan = TrainingLoopPlan();
  EXPECT_TRUE(Disjoint(plan, "fa", "ba"));
  EXPECT_TRUE(Disjoint(plan, "fb", "ba"));
  EXPECT_TRUE(Disjoint(plan, "fa", "l"));
  EXPECT_FALSE(Disjoint(plan, "fa", "fb"));
  EXPECT_FALSE(Disjoint(plan, "l", "ba"));
  // The gradient: read by the VARIABLE within the act that applies it, which step k + 1's
  // forward waits for.
  EXPECT_TRUE(InAGroup(plan, "gw"));
  EXPECT_TRUE(Disjoint(plan, "fa", "gw"));
  EXPECT_FALSE(Disjoint(plan, "ba", "gw")) << "b2 reads one and writes the other";
  EXPECT_FALSE(InAGroup(plan, "w")) << "written by a VARIABLE";
  // The same answer from executions: fa and ba on the same bytes never overlap.
  const std::vector<plan::Plan> stacked = {Stacked(plan, {"fa", "ba"})};
  EXPECT_EQ(SimulateSeeds(stacked, kHandSeeds), "");
  EXPECT_EQ(CheckDisjointAgainstExecutions({plan}, kHandSeeds), "");
  int pools = 0;
  EXPECT_EQ(ShareAndSimulate(plan, &pools), "");
  EXPECT_EQ(pools, 1);
}

// The loop with two micro-batches a step. The step-level forward temporary xp (made from the
// variable) and the accumulated gradient gs are never live at once in fact, but the analysis'
// rounding to ticks need not prove it: only soundness is asserted here.
std::string MicroBatchLoopText(bool pieces_per_step) {
  const std::string per_micro_batch = pieces_per_step ? "pieces_per_step: 2" : "";
  return absl::StrCat(
      kDevice, Register("x"), Register("w"), Register("xp"), Register("xm"), Register("wm"),
      Register("fa"), Register("ba"), Register("gm"), Register("gs"), Register("gw"),
      Task("source", "SOURCE", {}, {"x"}, "num_pieces: 3"),
      Task("variable", "VARIABLE", {"gw"}, {"w"}, "num_pieces: 3"),
      Task("pre", "COMPUTE", {"x", "w"}, {"xp"}),
      Task("unpack", "UNPACK", {"xp"}, {"xm"}, "factor: 2 " + per_micro_batch),
      Task("repeat", "REPEAT", {"w"}, {"wm"}, "factor: 2 " + per_micro_batch),
      Task("f1", "COMPUTE", {"xm", "wm"}, {"fa"}, per_micro_batch),
      Task("b1", "COMPUTE", {"fa"}, {"ba"}, per_micro_batch),
      Task("b2", "COMPUTE", {"ba"}, {"gm"}, per_micro_batch),
      Task("accumulate", "ACCUMULATE", {"gm"}, {"gs"}, "factor: 2 " + per_micro_batch),
      Task("clip", "COMPUTE", {"gs"}, {"gw"}));
}

TEST(RegisterLifetimesTest, AMicroBatchedLoopIsSharedSoundly) {
  const plan::Plan plan = ParsePlan(MicroBatchLoopText(/*pieces_per_step=*/true));
  EXPECT_FALSE(Disjoint(plan, "xp", "xm"));
  EXPECT_FALSE(Disjoint(plan, "gm", "gs"));
  // f1 may write micro-batch 1 before the accumulation took micro-batch 0's gradient.
  EXPECT_FALSE(Disjoint(plan, "fa", "gm"));
  EXPECT_EQ(CheckDisjointAgainstExecutions({plan}, kHandSeeds), "");
  EXPECT_EQ(ShareAndSimulate(plan), "");
}

// The same plan without Task.pieces_per_step (a hand-written plan may leave it unset): the
// UNPACK / REPEAT / ACCUMULATE factors still make two micro-batches a step, and no claim of the
// analysis may rest on the missing counts.
TEST(RegisterLifetimesTest, AMicroBatchedLoopWithoutPiecesPerStepIsSharedSoundly) {
  const plan::Plan plan = ParsePlan(MicroBatchLoopText(/*pieces_per_step=*/false));
  EXPECT_EQ(CheckDisjointAgainstExecutions({plan}, kHandSeeds), "");
  EXPECT_EQ(ShareAndSimulate(plan), "");
}

}  // namespace
}  // namespace loom::compiler::testing
