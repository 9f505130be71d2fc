#ifndef LOOM_ACTORS_MICRO_BATCH_ACTORS_H_
#define LOOM_ACTORS_MICRO_BATCH_ACTORS_H_

// The actors of micro-batching (UNPACK, REPEAT and ACCUMULATE tasks) with factor M: UnpackActor
// splits each piece along axis 0 into M pieces, RepeatActor emits each piece M times, and
// AccumulateActor sums M consecutive pieces into one (a step's gradients).

#include <cstdint>

#include "runtime/actor.h"

namespace loom {

// The micro-batching trio (DESIGN.md §3). With factor M:
//  - UnpackActor splits each input piece along axis 0 into M pieces (input piece p yields pieces
//    p*M .. p*M+M-1) and returns the input slot after the last one;
//  - RepeatActor emits each input piece M times (a variable read by every micro-batch);
//  - AccumulateActor sums M consecutive input pieces into one output piece (gradients), so the
//    optimizer acts once per step. It fails the job if its input ends in the middle of a group.

class UnpackActor final : public Actor {
 public:
  using Actor::Actor;

 protected:
  bool CanAct() const override { return InputReady(0) && OutputFree(0); }
  absl::Status DoAct() override;

 private:
  int32_t next_part_ = 0;
};

class RepeatActor final : public Actor {
 public:
  using Actor::Actor;

 protected:
  bool CanAct() const override { return InputReady(0) && OutputFree(0); }
  absl::Status DoAct() override;

 private:
  int32_t emitted_ = 0;
};

class AccumulateActor final : public Actor {
 public:
  using Actor::Actor;
  ~AccumulateActor() override;
  absl::Status Initialize() override;

 protected:
  // The output slot is needed only for the last piece of a group.
  bool CanAct() const override {
    return InputReady(0) && (accumulated_ + 1 < task().factor() || OutputFree(0));
  }
  absl::Status DoAct() override;
  absl::Status OnExhausted() override;

 private:
  float* sum_ = nullptr;
  int32_t accumulated_ = 0;
};

}  // namespace loom

#endif  // LOOM_ACTORS_MICRO_BATCH_ACTORS_H_
