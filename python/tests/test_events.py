"""loom.events from JobEvent messages (the Step event's validation loss of Job.evaluation), the
progress display of steps, and what a Run records of them; no cluster needed."""

import io

import pytest

import loom
from loom import events
from loom.progress import StepProgress
from loom.protos import job_service_pb2


def step_message(step, loss, validation_loss=None, sequence=None):
    message = job_service_pb2.JobEvent(job_id="job-1", sequence=sequence or step)
    message.step.step = step
    message.step.num_steps = 4
    message.step.loss = loss
    message.step.step_time_seconds = 0.25
    if validation_loss is not None:
        message.step.validation_loss = validation_loss
    return message


def test_a_step_carries_its_validation_loss_when_it_evaluated():
    evaluated = events.from_proto(step_message(1, 5.5, validation_loss=5.75))
    assert isinstance(evaluated, loom.Step)
    assert evaluated.validation_loss == 5.75 and evaluated.val_loss == 5.75
    plain = events.from_proto(step_message(2, 5.25))
    assert plain.validation_loss is None and plain.val_loss is None
    # 0.0 is a value, not "unset" (the field's presence decides).
    assert events.from_proto(step_message(3, 5.0, validation_loss=0.0)).validation_loss == 0.0


def test_val_loss_is_a_read_only_alias():
    step = events.from_proto(step_message(1, 5.5, validation_loss=5.75))
    with pytest.raises(AttributeError):
        step.val_loss = 1.0
    step.validation_loss = 4.0
    assert step.val_loss == 4.0
    # Built by hand, as tests and tools do, without the new field: None.
    assert loom.Step(job_id="j", sequence=1, time=None, step=1, num_steps=1, loss=1.0,
                     step_time_seconds=0.1, tokens_per_second=None,
                     scalars={}).validation_loss is None


def test_the_plain_progress_line_shows_the_validation_loss():
    output = io.StringIO()
    with StepProgress(total=4, description="gpt", file=output, use_tqdm=False) as display:
        display.update(events.from_proto(step_message(1, 5.5, validation_loss=5.75)))
        display.update(events.from_proto(step_message(2, 5.25)))
    first, second = output.getvalue().splitlines()
    assert first.startswith("gpt: step 1/4  loss 5.5000  val_loss 5.7500  0.250 s/step"), first
    assert "val_loss" not in second and second.startswith("gpt: step 2/4  loss 5.2500  0.250")


def test_the_tqdm_bar_keeps_the_last_validation_loss():
    pytest.importorskip("tqdm")
    with StepProgress(total=4, file=io.StringIO(), use_tqdm=True) as display:
        display.update(events.from_proto(step_message(1, 5.5, validation_loss=5.75)))
        assert display.bar.postfix == "loss=5.5000, val_loss=5.7500"
        display.update(events.from_proto(step_message(2, 5.25)))
        assert display.bar.postfix == "loss=5.2500, val_loss=5.7500"


def test_a_run_collects_the_validation_losses_by_step():
    submitted = loom.JobStatus(job_id="job-1", name="gpt", state="PENDING", num_steps=4,
                               steps_done=0, last_loss=None, error_code=None, error_message="",
                               devices=[], checkpoint_path="", checkpoint_step=0, owner="",
                               proto=None)
    run = loom.Run(client=None, submitted=submitted)
    for message in (step_message(1, 5.5, 5.75), step_message(2, 5.25),
                    step_message(3, 5.0, 5.5), step_message(4, 4.75)):
        run._record(events.from_proto(message))
    assert run.losses == [5.5, 5.25, 5.0, 4.75]
    assert run.validation_losses == {1: 5.75, 3: 5.5}
