"""What Client.watch yields: a job's events (JobEvent of proto/loom/v1/job_service.proto) as
dataclasses, and JobStatus / NodeStatus, the typed JobInfo and NodeInfo.

  StateChanged(state)        the job entered PENDING, COMPILING, LAUNCHING or RUNNING
  Step(step, loss, ...)      a training step ended (1-based step; scalars: other fetches;
                             validation_loss: the held-out loss of the steps that evaluate,
                             Job.evaluation, else None)
  CheckpointSaved(step, path)
  Fetched(name, piece, array)  a fetched tensor's piece as a NumPy array (submit(fetch=True));
                             piece is the 0-based step, or step * micro_batches + micro_batch
  Finished(state, ...)       the job ended: SUCCEEDED, FAILED or CANCELLED (the last event)

States are the enum's names without the prefix ("RUNNING"). Every event keeps its `sequence`
and `time` (a datetime, UTC).
"""

import dataclasses
import datetime
from typing import Dict, List, Optional

import numpy

from loom.errors import status_code
from loom.protos import job_service_pb2, plan_pb2

TERMINAL_STATES = ("SUCCEEDED", "FAILED", "CANCELLED")

_NUMPY_DTYPE = {plan_pb2.FLOAT32: "<f4", plan_pb2.INT32: "<i4", plan_pb2.INT64: "<i8",
                plan_pb2.UINT8: "u1", plan_pb2.UINT16: "<u2", plan_pb2.BFLOAT16: "<u2"}


def state_name(state):
    """"RUNNING" for JOB_STATE_RUNNING (a number or name)."""
    if isinstance(state, int):
        state = job_service_pb2.JobState.Name(state)
    return state.removeprefix("JOB_STATE_")


def state_number(name):
    """JOB_STATE_RUNNING's number for "RUNNING", "running" or "JOB_STATE_RUNNING"."""
    name = name.upper()
    if not name.startswith("JOB_STATE_"):
        name = "JOB_STATE_" + name
    return job_service_pb2.JobState.Value(name)


def _time(timestamp):
    if not timestamp.seconds and not timestamp.nanos:
        return None
    return timestamp.ToDatetime(tzinfo=datetime.timezone.utc)


@dataclasses.dataclass
class Event:
    job_id: str
    sequence: int
    time: Optional[datetime.datetime]


@dataclasses.dataclass
class StateChanged(Event):
    state: str


@dataclasses.dataclass
class Step(Event):
    step: int
    num_steps: int
    loss: float
    step_time_seconds: float
    tokens_per_second: Optional[float]
    scalars: Dict[str, float]
    # Set in the steps that evaluate (Job.evaluation: step - 1 a multiple of every_steps): the
    # evaluated loss of a held-out batch on the weights the step started from.
    validation_loss: Optional[float] = None

    @property
    def val_loss(self):
        """validation_loss, by the name training logs print."""
        return self.validation_loss


@dataclasses.dataclass
class CheckpointSaved(Event):
    step: int
    path: str


@dataclasses.dataclass
class Fetched(Event):
    name: str
    piece: int
    array: numpy.ndarray

    @property
    def step(self):
        """The piece (the 0-based step of a job without micro-batches)."""
        return self.piece


@dataclasses.dataclass
class Finished(Event):
    state: str
    # Set when FAILED or CANCELLED: a grpc.StatusCode and Loom's message.
    error_code: object = None
    error_message: str = ""

    @property
    def succeeded(self):
        return self.state == "SUCCEEDED"


def fetched_array(piece):
    """A FetchedTensor's data as a NumPy array of its shape (BF16 widened to float32)."""
    dtype = _NUMPY_DTYPE.get(piece.data_type)
    if dtype is None:
        raise ValueError(f"fetched tensor '{piece.tensor}' has an unknown data type "
                         f"{piece.data_type}")
    array = numpy.frombuffer(piece.data, dtype=dtype).reshape(list(piece.shape))
    if piece.data_type == plan_pb2.BFLOAT16:
        return (array.astype(numpy.uint32) << 16).view(numpy.float32)
    return array.astype(array.dtype.newbyteorder("="))


def from_proto(event):
    """The dataclass of one JobEvent."""
    common = dict(job_id=event.job_id, sequence=event.sequence, time=_time(event.time))
    kind = event.WhichOneof("kind")
    if kind == "state_change":
        state = state_name(event.state_change.state)
        if state in TERMINAL_STATES:
            error = event.state_change.error
            return Finished(**common, state=state,
                            error_code=status_code(error.code) if error.code else None,
                            error_message=error.message)
        return StateChanged(**common, state=state)
    if kind == "step":
        step = event.step
        return Step(**common, step=step.step, num_steps=step.num_steps, loss=step.loss,
                    step_time_seconds=step.step_time_seconds,
                    tokens_per_second=step.tokens_per_second
                    if step.HasField("tokens_per_second") else None,
                    scalars={scalar.tensor: scalar.value for scalar in step.scalars},
                    validation_loss=step.validation_loss
                    if step.HasField("validation_loss") else None)
    if kind == "checkpoint":
        return CheckpointSaved(**common, step=event.checkpoint.step, path=event.checkpoint.path)
    if kind == "fetched":
        return Fetched(**common, name=event.fetched.tensor, piece=event.fetched.piece,
                       array=fetched_array(event.fetched))
    return Event(**common)


@dataclasses.dataclass
class JobStatus:
    """A job's JobInfo (proto/loom/v1/job_service.proto); `proto` is the message itself."""
    job_id: str
    name: str
    state: str
    num_steps: int
    steps_done: int
    last_loss: Optional[float]
    error_code: object
    error_message: str
    devices: List[str]
    checkpoint_path: str
    checkpoint_step: int
    owner: str
    proto: object = dataclasses.field(repr=False)

    @property
    def finished(self):
        return self.state in TERMINAL_STATES

    @classmethod
    def from_proto(cls, info):
        return cls(job_id=info.job_id, name=info.name, state=state_name(info.state),
                   num_steps=info.num_steps, steps_done=info.steps_done,
                   last_loss=info.last_loss if info.HasField("last_loss") else None,
                   error_code=status_code(info.error.code) if info.error.code else None,
                   error_message=info.error.message, devices=list(info.devices),
                   checkpoint_path=info.checkpoint_path, checkpoint_step=info.checkpoint_step,
                   owner=info.owner, proto=info)


@dataclasses.dataclass
class NodeStatus:
    """A node's NodeInfo (proto/loom/v1/cluster_service.proto); `proto` is the message."""
    name: str
    index: int
    address: str
    state: str
    coordinator: bool
    devices: List[str]
    running_job_id: str
    version: str
    proto: object = dataclasses.field(repr=False)

    @classmethod
    def from_proto(cls, node):
        from loom.protos import cluster_service_pb2

        return cls(name=node.name, index=node.index, address=node.address,
                   state=cluster_service_pb2.NodeState.Name(node.state).removeprefix(
                       "NODE_STATE_"),
                   coordinator=node.coordinator,
                   devices=[device.name for device in node.devices],
                   running_job_id=node.running_job_id, version=node.version, proto=node)
