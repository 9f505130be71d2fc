#ifndef LOOM_COMPILER_TOKEN_GAME_H_
#define LOOM_COMPILER_TOKEN_GAME_H_

// The token game behind compiler/step_proof.h: TokenGame holds a plan's tasks as players, its
// registers' produced and returned pieces and its communicators' turns, plays the act rule for
// one step, and says what a task that cannot finish waits for. Only step_proof.cc uses it.

#include <algorithm>
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "proto/plan.pb.h"

namespace loom::compiler::step_proof_internal {

// A task's place among the readers of one register: how many pieces it has returned.
struct Reader {
  int task = 0;
  int reg = 0;
  int64_t returned = 0;
  int32_t lookahead = 0;  // Task.input_lookahead
};

struct Register {
  const plan::RegisterDesc* desc = nullptr;
  int producer = -1;
  int64_t slots = 1;
  int64_t produced = 0;
};

// A task in the game. A RECEIVE plays no part of its own: its SEND writes the RECEIVE's register
// directly (the slots of that register are the credits the RECEIVE grants).
struct Player {
  const plan::Task* task = nullptr;
  int64_t target = 0;  // acts in one step
  int64_t acts = 0;
  int64_t phase = 0;  // UNPACK, REPEAT, ACCUMULATE: acts since the last whole piece
  // Its inputs are readers [first_input, first_input + num_inputs) of TokenGame::readers_, in
  // the task's input order; its outputs outputs_[first_output, first_output + num_outputs).
  int first_input = 0;
  int num_inputs = 0;
  int first_output = 0;
  int num_outputs = 0;
  int collective = -1;  // position in TokenGame::collectives_
};

// One collective of a communicator: the task of each rank, which act together.
struct Collective {
  int communicator = 0;
  std::vector<int> members;  // one task per rank
};

struct Communicator {
  std::string name;
  int size = 0;                  // ranks
  std::vector<int> collectives;  // by sequence; -1 until found
  // The order in which the collectives take turns (positions in TokenGame::collectives_): by
  // sequence, or, while the game chooses the order, as their first acts come; `turn` is a position
  // in it once it is fixed.
  std::vector<int> order;
  bool order_fixed = true;
  int64_t turn = 0;
};

inline std::string Quoted(absl::string_view name) { return absl::StrCat("'", name, "'"); }

class TokenGame {
 public:
  absl::Status Build(absl::Span<const plan::Plan> plans, int threads);
  // Lets each communicator's collectives take their turns, in the first piece, in the order their
  // ranks become ready; later pieces keep that order. Call before Play.
  void ChooseOrder();
  void Play();
  absl::Status Verdict() const;
  // After a Play that chose the order: each collective task's position in its communicator's
  // order, by task name; empty when the game ended before every communicator's order was fixed.
  absl::flat_hash_map<std::string, int64_t> ChosenSequences() const;

 private:
  struct Wait {
    int from = -1;  // who waits
    int task = -1;  // whom it waits for
    std::string why;
    bool data = false;  // for a register its producer has not written yet
  };
  // The links of a path of waits, with each run of more than kShownDataLinks data waits told
  // as one link ("waits for data from X through N tasks").
  std::string DescribeLinks(absl::Span<const Wait> links) const;

  // The registers a task writes, and the readers of a register (positions in readers_).
  absl::Span<const int> Outputs(int task) const {
    return absl::MakeConstSpan(outputs_).subspan(players_[task].first_output,
                                                 players_[task].num_outputs);
  }
  int Output(int task) const { return outputs_[players_[task].first_output]; }
  int Input(int task) const { return players_[task].first_input; }
  absl::Span<const int> ReadersOf(int reg) const {
    return absl::MakeConstSpan(register_readers_)
        .subspan(first_register_reader_[reg],
                 first_register_reader_[reg + 1] - first_register_reader_[reg]);
  }

  bool Ready(int reader) const {
    return registers_[readers_[reader].reg].produced > readers_[reader].returned;
  }
  // Ready, and with a lookahead k the pieces after the next, up to k more or to the step's end.
  bool Holds(int reader) const {
    const Reader& r = readers_[reader];
    const Player& player = players_[r.task];
    const int64_t ahead = std::clamp<int64_t>(r.lookahead, 0, player.target - player.acts - 1);
    return registers_[r.reg].produced > r.returned + ahead;
  }
  // The pieces of `reg` every reader returned.
  int64_t Released(int reg) const;
  bool Free(int reg) const {
    return registers_[reg].produced - Released(reg) < registers_[reg].slots;
  }
  int64_t Factor(int task) const { return std::max(1, players_[task].task->factor()); }
  bool Enabled(int task) const;
  bool CollectiveEnabled(int collective) const;
  void Fire(int task);
  void Produce(int reg);
  void Return(int reader);
  void Push(int task);
  // Fires the collective whose turn it is on `communicator` when all its ranks can act.
  void TryCollective(int communicator);

  // What stuck task `task` waits for, or task -1 when it waits for nothing (it can act).
  Wait WaitOf(int task) const;
  Wait InputWait(int task, int reader) const;
  Wait OutputWait(int task, int reg) const;
  std::string Describe(int task) const;
  // Each task's acts in one step, from the rates of its inputs (Task.pieces_per_step where set
  // must agree; a hand-written plan may leave it unset).
  absl::Status SetTargets();

  std::vector<Player> players_;
  std::vector<Register> registers_;
  std::vector<Reader> readers_;
  std::vector<int> outputs_;
  std::vector<int> register_readers_;       // grouped by register
  std::vector<int> first_register_reader_;  // by register, and one past the last
  std::vector<Collective> collectives_;
  std::vector<Communicator> communicators_;
  std::deque<int> queue_;
  std::vector<bool> queued_;
};

}  // namespace loom::compiler::step_proof_internal

#endif  // LOOM_COMPILER_TOKEN_GAME_H_
