"""LocalCluster: a cluster of loomd processes on this machine, started by `loomctl cluster up`
and stopped by `loomctl cluster down`; a context manager whose client() talks to it.

    with loom.LocalCluster(data_roots=["/data"]) as cluster:
        run = cluster.client().submit(job, watch=True)
"""

import os
import pathlib
import shutil
import subprocess
import tempfile

from loom.client import Client


class LocalCluster:
    """NODES loomd processes of DEVICES_PER_NODE CPU devices each. Jobs read files beneath
    DATA_ROOTS and write checkpoints beneath CHECKPOINT_ROOT (default: DIRECTORY/checkpoints).
    LOOMCTL: the loomctl binary (default: the one on PATH). DIRECTORY holds the daemons' state
    and logs (default: a new temporary directory)."""

    def __init__(self, nodes=1, devices_per_node=2, data_roots=(), checkpoint_root=None,
                 loomctl=None, directory=None, timeout=120):
        self.loomctl = os.fspath(loomctl) if loomctl is not None else shutil.which("loomctl")
        if self.loomctl is None:
            raise FileNotFoundError("loomctl is not on PATH: pass loomctl=PATH (build/bin/loomctl)")
        self.directory = pathlib.Path(directory or tempfile.mkdtemp(prefix="loom-cluster-"))
        self.state = self.directory / "state"
        self.checkpoints = pathlib.Path(checkpoint_root or self.directory / "checkpoints")
        self.checkpoints.mkdir(parents=True, exist_ok=True)
        command = [self.loomctl, "cluster", "up", "--nodes", str(nodes), "--devices-per-node",
                   str(devices_per_node), "--state-dir", str(self.state), "--checkpoint-root",
                   str(self.checkpoints), "--timeout", f"{timeout}s"]
        for root in data_roots:
            command += ["--data-root", os.fspath(root)]
        result = subprocess.run(command, capture_output=True, text=True, timeout=timeout + 30)
        if result.returncode != 0:
            raise RuntimeError(f"loomctl cluster up failed (exit {result.returncode}):\n"
                               f"{result.stderr.strip()}")
        self.address = result.stdout.strip().splitlines()[-1]
        self._clients = []

    def client(self, **options):
        """A Client of the cluster's coordinator (Client's keywords), closed with the cluster."""
        client = Client(self.address, **options)
        self._clients.append(client)
        return client

    def stop(self):
        for client in self._clients:
            client.close()
        self._clients.clear()
        subprocess.run([self.loomctl, "cluster", "down", "--state-dir", str(self.state)],
                       capture_output=True, text=True, timeout=150)

    def __enter__(self):
        return self

    def __exit__(self, *exception):
        self.stop()
        return False
