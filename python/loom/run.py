"""A submitted job (Run, returned by Client.submit) and a job's stream of events (EventStream).

    with client.submit(job, watch=True, fetch=True) as run:
        for step in run:                 # Step events; other events are collected on the run
            print(step.step, step.loss, step.val_loss)   # val_loss: None unless it evaluated
    run.validation_losses                # {step: validation loss} of the steps that evaluated
    run.fetched["loss"]                  # [array of piece 0, piece 1, ...]
    run.finished                         # the Finished event

Iterating a Run follows the job to its end and raises loom.JobFailed (code and message of the
job's error) when it FAILED or was CANCELLED. Leaving the `with` block stops watching; the job
goes on (run.cancel() stops it).
"""

import grpc

from loom import errors, events
from loom.progress import StepProgress


class EventStream:
    """A WatchJob call as an iterator of loom.events; cancel() ends it."""

    def __init__(self, call):
        self.call = call

    def __iter__(self):
        try:
            for message in self.call:
                yield events.from_proto(message)
        except grpc.RpcError as error:
            if error.code() == grpc.StatusCode.CANCELLED and self.call.cancelled():
                return  # cancel() was called
            raise errors.from_rpc_error(error, "WatchJob") from None

    def cancel(self):
        self.call.cancel()


class Run:
    """A submitted job: its id and first JobStatus (`submitted`), what its watch has seen
    (`states`, `steps`, `checkpoints`, `fetched` by tensor name, `finished`), and the calls on
    it (status, cancel, wait, plan, trace)."""

    def __init__(self, client, submitted):
        self.client = client
        self.submitted = submitted
        self.job_id = submitted.job_id
        self.states = []
        self.steps = []
        self.checkpoints = []
        self.fetched = {}
        self.finished = None
        self._stream = None
        self._iterator = None

    def __repr__(self):
        return f"loom.Run({self.job_id!r})"

    def __enter__(self):
        return self

    def __exit__(self, *exception):
        self.close()

    def close(self):
        """Stops watching (the job goes on)."""
        if self._stream is not None:
            self._stream.cancel()

    def watch(self):
        """Opens the job's event stream (once); returns self."""
        if self._stream is None:
            self._stream = self.client.watch(self.job_id)
            self._iterator = iter(self._stream)
        return self

    def events(self):
        """Every event until the job ends, recording each on the run; raises loom.JobFailed
        after the Finished event of a job that did not succeed."""
        self.watch()
        for event in self._iterator:
            self._record(event)
            yield event
        if self.finished is None:
            self.finished = self._finished_from_status()
        if not self.finished.succeeded:
            raise errors.JobFailed(self.job_id, self.finished.state,
                                   self.finished.error_message,
                                   self.finished.error_code or errors.LoomError.code)

    def __iter__(self):
        """The job's Step events (see events())."""
        for event in self.events():
            if isinstance(event, events.Step):
                yield event

    def progress(self, description=None, file=None, use_tqdm=None):
        """The Step events, shown as a progress display (loom.progress) meanwhile."""
        display = StepProgress(self.submitted.num_steps, description or self.submitted.name,
                               file, use_tqdm)
        with display:
            for step in self:
                display.update(step)
                yield step

    def wait(self):
        """Follows the job to its end; returns its final JobStatus (loom.JobFailed if it did
        not succeed)."""
        for _ in self.events():
            pass
        return self.status()

    @property
    def losses(self):
        return [step.loss for step in self.steps]

    @property
    def validation_losses(self):
        """{step (1-based): validation loss} of the steps seen that evaluated (Job.evaluation)."""
        return {step.step: step.validation_loss for step in self.steps
                if step.validation_loss is not None}

    def _record(self, event):
        if isinstance(event, events.Step):
            self.steps.append(event)
        elif isinstance(event, events.StateChanged):
            self.states.append(event.state)
        elif isinstance(event, events.CheckpointSaved):
            self.checkpoints.append(event)
        elif isinstance(event, events.Fetched):
            pieces = self.fetched.setdefault(event.name, [])
            pieces.extend([None] * (event.piece + 1 - len(pieces)))
            pieces[event.piece] = event.array
        elif isinstance(event, events.Finished):
            self.states.append(event.state)
            self.finished = event

    def _finished_from_status(self):
        status = self.status()
        if not status.finished:
            raise errors.Unavailable(f"the watch of job {self.job_id} ended while it is "
                                     f"{status.state}")
        return events.Finished(job_id=self.job_id, sequence=-1, time=None, state=status.state,
                               error_code=status.error_code, error_message=status.error_message)

    # Calls on the job.

    def status(self):
        return self.client.status(self.job_id)

    def cancel(self, reason=""):
        return self.client.cancel(self.job_id, reason)

    def plan(self, node=None):
        return self.client.plan(self.job_id, node)

    def trace(self, path=None):
        return self.client.trace(self.job_id, path)


JobHandle = Run
