"""loom.Client: a connection to a Loom cluster's coordinator (loomd's JobService and
ClusterService, proto/loom/v1/), what loomctl's cluster commands do, from Python.

    client = loom.Client("127.0.0.1:7070")                      # or tls=loom.TLS(...)
    run = client.submit(job, fetch=True, checkpoint="/ckpt/gpt.safetensors")
    for event in client.watch(run.job_id): ...
    client.status(run.job_id); client.jobs(); client.cancel(run.job_id); client.nodes()
    client.plan(run.job_id); client.trace(run.job_id, "trace.json")

Every call has a deadline: `timeout` seconds (60 by default) for each request, `watch_timeout`
for a whole watch (a day by default). A failed call raises the loom.LoomError subclass of its gRPC
code (loom.InvalidArgument, loom.NotFound, ...), carrying the code and Loom's message.
"""

import os

import grpc

from loom import errors, events
from loom.job import Job
from loom.protos import (cluster_service_pb2, cluster_service_pb2_grpc, job_pb2,
                         job_service_pb2, job_service_pb2_grpc)
from loom.run import EventStream, Run

DEFAULT_TIMEOUT_SECONDS = 60.0
DEFAULT_WATCH_TIMEOUT_SECONDS = 24 * 3600.0
# A trace comes in parts of at most this many bytes (GetTraceRequest.max_bytes).
TRACE_PART_BYTES = 16 << 20


class Client:
    """See the module's docstring. Usable as a context manager (closes the channel)."""

    def __init__(self, address, tls=None, timeout=DEFAULT_TIMEOUT_SECONDS,
                 watch_timeout=DEFAULT_WATCH_TIMEOUT_SECONDS):
        if not address or ":" not in address:
            raise ValueError(f"a coordinator address is HOST:PORT, got {address!r}")
        self.address = address
        self.timeout = timeout
        self.watch_timeout = watch_timeout
        options = [("grpc.max_receive_message_length", -1),
                   ("grpc.max_send_message_length", -1)]
        if tls is not None:
            self.channel = grpc.secure_channel(address, tls.channel_credentials(),
                                               options + tls.channel_options())
        else:
            self.channel = grpc.insecure_channel(address, options)
        self.jobs_stub = job_service_pb2_grpc.JobServiceStub(self.channel)
        self.cluster_stub = cluster_service_pb2_grpc.ClusterServiceStub(self.channel)

    def close(self):
        self.channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exception):
        self.close()

    def __repr__(self):
        return f"loom.Client({self.address!r})"

    def _call(self, method, request, name, timeout=None):
        try:
            return method(request, timeout=timeout or self.timeout)
        except grpc.RpcError as error:
            raise errors.from_rpc_error(error, name) from None

    def wait_until_ready(self, timeout=None):
        """Waits until the channel connects (Unavailable after TIMEOUT seconds)."""
        try:
            grpc.channel_ready_future(self.channel).result(timeout=timeout or self.timeout)
        except grpc.FutureTimeoutError:
            raise errors.Unavailable(f"no daemon answered at {self.address} within "
                                     f"{timeout or self.timeout} s") from None
        return self

    # Jobs.

    def submit(self, job, *, steps=None, fetch=False, checkpoint=None, checkpoint_every=0,
               overwrite_checkpoint=False, init=None, trace=False, trace_steps=None,
               watch=False, validate=True):
        """Submits JOB (a loom.Job, a job_pb2.Job or a job file's path) and returns its Run.

        steps: run this many steps instead of the job's num_steps. fetch: stream the job's
        fetched tensors to watchers (Fetched events). checkpoint: an absolute path (a relative
        one is made absolute here) ending in .safetensors, beneath a --checkpoint-root of the
        daemons, where the job's variables are saved when it succeeds (and every
        checkpoint_every steps). init: start from this checkpoint (Job.start_from). trace:
        record every act (trace_steps: (first, last), 1-based). watch: open the event stream
        now (`with client.submit(job, watch=True) as run: for step in run: ...`).
        validate: check the job locally first (loom.JobInvalid naming the op)."""
        if isinstance(job, (str, os.PathLike)):
            job = Job.from_file(job)
        elif isinstance(job, job_pb2.Job):
            job = Job.from_proto(job)
        else:
            job = job.copy()
        if steps is not None:
            job.steps = steps
        if init is not None:
            job.start_from(os.path.abspath(os.fspath(init)))
        request = job_service_pb2.SubmitJobRequest(
            job=job.to_proto(validate=validate), trace=trace, stream_fetches=fetch,
            checkpoint_every_steps=checkpoint_every, overwrite_checkpoint=overwrite_checkpoint)
        if checkpoint is not None:
            request.checkpoint_path = os.path.abspath(os.fspath(checkpoint))
        if trace_steps is not None:
            first, last = trace_steps
            request.trace_steps.first, request.trace_steps.last = first, last
        response = self._call(self.jobs_stub.SubmitJob, request, "SubmitJob")
        run = Run(self, events.JobStatus.from_proto(response.job))
        if watch:
            run.watch()
        return run

    def watch(self, job_id, timeout=None):
        """The job's events (loom.events) from the first the daemon holds until it ends: an
        iterable EventStream (cancel() stops it). Deadline: TIMEOUT or watch_timeout."""
        call = self.jobs_stub.WatchJob(job_service_pb2.WatchJobRequest(job_id=job_id),
                                       timeout=timeout or self.watch_timeout)
        return EventStream(call)

    def status(self, job_id):
        """The job's JobStatus (state, steps done, last loss, error)."""
        response = self._call(self.jobs_stub.GetJob,
                              job_service_pb2.GetJobRequest(job_id=job_id), "GetJob")
        return events.JobStatus.from_proto(response.job)

    def jobs(self, states=None, page_size=100):
        """Every job the daemon knows (oldest first), or those in STATES ("RUNNING", ...)."""
        request = job_service_pb2.ListJobsRequest(
            states=[events.state_number(state) for state in states or []], page_size=page_size)
        result = []
        while True:
            response = self._call(self.jobs_stub.ListJobs, request, "ListJobs")
            result.extend(events.JobStatus.from_proto(info) for info in response.jobs)
            if not response.next_page_token:
                return result
            request.page_token = response.next_page_token

    def cancel(self, job_id, reason=""):
        """Cancels a pending or running job; returns its JobStatus once it ended."""
        response = self._call(self.jobs_stub.CancelJob,
                              job_service_pb2.CancelJobRequest(job_id=job_id, reason=reason),
                              "CancelJob")
        return events.JobStatus.from_proto(response.job)

    def plan(self, job_id, node=None):
        """The physical plan (a plan_pb2.Plan) the job was compiled into: the whole plan, or
        node NODE's part."""
        request = job_service_pb2.GetPlanRequest(job_id=job_id)
        if node is not None:
            request.node = node
        response = self._call(self.jobs_stub.GetPlan, request, "GetPlan")
        return response.node_plans[0] if node is not None else response.plan

    def trace(self, job_id, path=None):
        """The Chrome trace (JSON text) of a job submitted with trace=True that has ended,
        fetched in parts; also written to PATH when given."""
        parts = []
        offset = 0
        while True:
            response = self._call(self.jobs_stub.GetTrace, job_service_pb2.GetTraceRequest(
                job_id=job_id, offset=offset, max_bytes=TRACE_PART_BYTES), "GetTrace")
            parts.append(response.chrome_trace_json)
            offset += len(response.chrome_trace_json.encode("utf-8"))
            if offset >= response.total_bytes or not response.chrome_trace_json:
                break
        document = "".join(parts)
        if path is not None:
            with open(os.fspath(path), "w", encoding="utf-8") as file:
                file.write(document)
        return document

    # The cluster.

    def nodes(self):
        """Every node of the cluster (NodeStatus), the coordinator first."""
        response = self._call(self.cluster_stub.ListNodes,
                              cluster_service_pb2.ListNodesRequest(), "ListNodes")
        return [events.NodeStatus.from_proto(node) for node in response.nodes]
