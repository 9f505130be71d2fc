#!/usr/bin/python3
"""loomd from Python: the gRPC API (proto/loom/v1/) through stubs generated from the protos.

    /usr/bin/python3 tests/daemon/python_client_test.py --loomd build/bin/loomd --source-dir .

Generates the Python messages and stubs with the system protoc and grpc_python_plugin (Debian's
protobuf-compiler and protobuf-compiler-grpc) into a temporary directory, starts the built loomd on
a free port, trains examples/jobs/mlp_regression.pbtxt watching it to SUCCEEDED with one step
event per step, checks the status codes of an unknown job and a malformed one, and stops loomd
with SIGTERM (exit 0). Debian's grpcio imports only under /usr/bin/python3.
"""

import argparse
import importlib
import math
import os
import re
import shutil
import signal
import subprocess
import struct
import sys
import tempfile
import threading
import unittest

import grpc
from google.protobuf import text_format

PROTOS = [
    "proto/job.proto",
    "proto/plan.proto",
    "proto/loom/v1/job_service.proto",
    "proto/loom/v1/cluster_service.proto",
]
# Every call of this test has a deadline (seconds), so that a hung daemon fails it.
CALL_TIMEOUT = 10
JOB_TIMEOUT = 120
START_TIMEOUT = 30
STOP_TIMEOUT = 60


def generate_stubs(source_dir, output_dir):
    """protoc --python_out --grpc_out for PROTOS; returns the output directory for sys.path."""
    plugin = shutil.which("grpc_python_plugin")
    if plugin is None:
        raise RuntimeError("grpc_python_plugin not found (Debian package protobuf-compiler-grpc)")
    subprocess.run(
        ["protoc", f"--proto_path={source_dir}", f"--python_out={output_dir}",
         f"--grpc_out={output_dir}", f"--plugin=protoc-gen-grpc={plugin}"] + PROTOS,
        check=True)
    # Regular packages, so that no installed package named "proto" shadows them.
    for package in ["proto", "proto/loom", "proto/loom/v1"]:
        open(os.path.join(output_dir, package, "__init__.py"), "a").close()
    return output_dir


class Loomd:
    """The built loomd on a free port of 127.0.0.1, its address read from its first line."""

    def __init__(self, binary, devices):
        self.process = subprocess.Popen(
            [binary, "--listen", "127.0.0.1:0", f"--devices={devices}",
             "--node-name", "python-client-test"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.output = []
        self.address = None
        started = threading.Event()

        def read_output():
            for line in self.process.stdout:
                self.output.append(line)
                match = re.search(r"listening on (\S+)", line)
                if match and self.address is None:
                    self.address = match.group(1)
                    started.set()
            started.set()

        self.reader = threading.Thread(target=read_output, daemon=True)
        self.reader.start()
        if not started.wait(START_TIMEOUT) or self.address is None:
            self.kill()
            raise RuntimeError("loomd did not start:\n" + "".join(self.output))

    def terminate(self):
        """SIGTERM; the exit code."""
        self.process.send_signal(signal.SIGTERM)
        code = self.process.wait(STOP_TIMEOUT)
        self.reader.join(5)
        return code

    def kill(self):
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


class PythonClientTest(unittest.TestCase):
    loomd_binary = None
    source_dir = None

    @classmethod
    def setUpClass(cls):
        cls.stub_dir = tempfile.TemporaryDirectory(prefix="loom-python-stubs-")
        sys.path.insert(0, generate_stubs(cls.source_dir, cls.stub_dir.name))
        cls.job_pb2 = importlib.import_module("proto.job_pb2")
        cls.job_service_pb2 = importlib.import_module("proto.loom.v1.job_service_pb2")
        cls.job_service_pb2_grpc = importlib.import_module("proto.loom.v1.job_service_pb2_grpc")

    @classmethod
    def tearDownClass(cls):
        cls.stub_dir.cleanup()

    def setUp(self):
        self.daemon = Loomd(self.loomd_binary, "cpu:2")
        self.channel = grpc.insecure_channel(self.daemon.address)
        grpc.channel_ready_future(self.channel).result(timeout=CALL_TIMEOUT)
        self.jobs = self.job_service_pb2_grpc.JobServiceStub(self.channel)

    def tearDown(self):
        self.channel.close()
        self.daemon.kill()

    def read_job(self, relative_path):
        with open(os.path.join(self.source_dir, relative_path)) as job_file:
            return text_format.Parse(job_file.read(), self.job_pb2.Job())

    def test_trains_a_job_and_stops_on_sigterm(self):
        api = self.job_service_pb2
        job = self.read_job("examples/jobs/mlp_regression.pbtxt")
        submitted = self.jobs.SubmitJob(api.SubmitJobRequest(job=job), timeout=CALL_TIMEOUT).job
        self.assertTrue(submitted.job_id)
        self.assertEqual(submitted.name, "mlp_regression")

        events = list(self.jobs.WatchJob(api.WatchJobRequest(job_id=submitted.job_id),
                                         timeout=JOB_TIMEOUT))
        states = [event.state_change.state for event in events
                  if event.WhichOneof("kind") == "state_change"]
        steps = [event.step for event in events if event.WhichOneof("kind") == "step"]
        self.assertEqual(states[-1], api.JOB_STATE_SUCCEEDED, events)
        self.assertEqual([step.step for step in steps], list(range(1, job.num_steps + 1)))
        for step in steps:
            self.assertEqual(step.num_steps, job.num_steps)
            self.assertTrue(math.isfinite(step.loss), step)
            self.assertGreater(step.step_time_seconds, 0)
        self.assertEqual([event.sequence for event in events], list(range(len(events))))

        info = self.jobs.GetJob(api.GetJobRequest(job_id=submitted.job_id),
                                timeout=CALL_TIMEOUT).job
        self.assertEqual(info.state, api.JOB_STATE_SUCCEEDED)
        self.assertEqual(info.steps_done, job.num_steps)
        self.assertAlmostEqual(info.last_loss, steps[-1].loss)

        self.channel.close()
        self.assertEqual(self.daemon.terminate(), 0, "".join(self.daemon.output))
        self.assertIn("loomd: stopped\n", self.daemon.output)

    def test_streams_the_fetched_tensors_of_a_job(self):
        api = self.job_service_pb2
        job = self.read_job("examples/jobs/mlp_regression.pbtxt")
        job.num_steps = 2
        job.fetch.append("y")
        submitted = self.jobs.SubmitJob(api.SubmitJobRequest(job=job, stream_fetches=True),
                                        timeout=CALL_TIMEOUT).job
        self.assertTrue(submitted.streams_fetches)
        events = list(self.jobs.WatchJob(api.WatchJobRequest(job_id=submitted.job_id),
                                         timeout=JOB_TIMEOUT))
        fetched = [event.fetched for event in events if event.WhichOneof("kind") == "fetched"]
        losses = [event.step.loss for event in events if event.WhichOneof("kind") == "step"]
        self.assertEqual(sorted((piece.tensor, piece.piece) for piece in fetched),
                         [("loss", 0), ("loss", 1), ("y", 0), ("y", 1)])
        for piece in fetched:
            if piece.tensor == "y":
                self.assertEqual(list(piece.shape), [8, 2])
                self.assertEqual(len(piece.data), 8 * 2 * 4)
            else:
                # The step's loss is its one piece (no micro-batches), as float32.
                (value,) = struct.unpack("<f", piece.data)
                self.assertEqual(value, struct.unpack("<f", struct.pack("<f",
                                                                        losses[piece.piece]))[0])

    def test_unknown_job_is_not_found(self):
        api = self.job_service_pb2
        with self.assertRaises(grpc.RpcError) as raised:
            self.jobs.GetJob(api.GetJobRequest(job_id="job-404"), timeout=CALL_TIMEOUT)
        self.assertEqual(raised.exception.code(), grpc.StatusCode.NOT_FOUND)

    def test_malformed_job_is_invalid_argument_naming_the_op(self):
        api = self.job_service_pb2
        job = self.read_job("examples/jobs/mlp_regression.pbtxt")
        job.ops.add(name="mystery", type="no_such_op", inputs=["x"], outputs=["z"])
        with self.assertRaises(grpc.RpcError) as raised:
            self.jobs.SubmitJob(api.SubmitJobRequest(job=job), timeout=CALL_TIMEOUT)
        self.assertEqual(raised.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("mystery", raised.exception.details())
        listed = self.jobs.ListJobs(api.ListJobsRequest(), timeout=CALL_TIMEOUT)
        self.assertEqual(len(listed.jobs), 0)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loomd", required=True, help="the built loomd binary")
    parser.add_argument("--source-dir", required=True, help="the repository root")
    arguments, unittest_arguments = parser.parse_known_args()
    PythonClientTest.loomd_binary = os.path.abspath(arguments.loomd)
    PythonClientTest.source_dir = os.path.abspath(arguments.source_dir)
    unittest.main(argv=[sys.argv[0]] + unittest_arguments, verbosity=2)


if __name__ == "__main__":
    main()
