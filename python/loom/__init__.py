"""Loom from Python: build jobs (Job, models.gpt), run them on a cluster (Client), and move
checkpoints to and from NumPy and PyTorch (checkpoint.load / save).

    import loom
    job = loom.models.gpt(layers=2, steps=20)
    client = loom.Client("127.0.0.1:7070")
    with client.submit(job, watch=True) as run:
        for step in run.progress():
            pass
"""

from loom import sbp
from loom.errors import (AlreadyExists, Cancelled, DeadlineExceeded, FailedPrecondition,
                         Internal, InvalidArgument, JobFailed, JobInvalid, LoomError, NotFound,
                         PermissionDenied, ResourceExhausted, Unauthenticated, Unavailable,
                         Unimplemented)
from loom.fields import FieldError
from loom.job import Job
from loom.values import (adamw, attribute, constant, data_type, normal, placement,
                         random_integers, random_normal, random_uniform, sgd, token_dataset,
                         token_file, token_source, uniform)
from loom import checkpoint, events, models
from loom.client import Client
from loom.events import (CheckpointSaved, Fetched, Finished, JobStatus, NodeStatus, StateChanged,
                         Step)
from loom.local import LocalCluster
from loom.plot import plot_losses
from loom.run import JobHandle, Run
from loom.tls import TLS

__version__ = "0.1.0"
