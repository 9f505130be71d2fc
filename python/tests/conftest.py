"""pytest options and fixtures of the loom package's tests.

    /usr/bin/python3 -m pytest python/tests --loom-source-dir . --loom-build-dir build

--loom-source-dir: the repository root (default: the directory above python/); --loom-build-dir:
the CMake build directory with bin/loomd, bin/loomctl and bin/loom-gpt (default: SOURCE/build).
Tests that need a binary skip when the defaults do not hold it, and fail when the directory was
given. Without an installed loom package, the one in python/ is imported (its stubs generated
into a cache directory on first use).
"""

import os
import pathlib
import shutil
import subprocess
import sys

import pytest

PYTHON_DIRECTORY = pathlib.Path(__file__).resolve().parents[1]

try:
    import loom  # noqa: F401  (an installed package, when there is one)
except ImportError:
    sys.path.insert(0, str(PYTHON_DIRECTORY))

# Deadlines of the helpers below (seconds).
CLUSTER_TIMEOUT = 60


def pytest_addoption(parser):
    parser.addoption("--loom-source-dir", default=None,
                     help="the repository root (default: the directory above python/)")
    parser.addoption("--loom-build-dir", default=None,
                     help="the build directory holding bin/loomd, bin/loomctl, bin/loom-gpt "
                          "(default: SOURCE/build)")


@pytest.fixture(scope="session")
def source_dir(request):
    given = request.config.getoption("--loom-source-dir")
    return pathlib.Path(given).resolve() if given else PYTHON_DIRECTORY.parent


@pytest.fixture(scope="session")
def binary(request, source_dir):
    """binary("loomctl") -> the path of a built tool."""
    given = request.config.getoption("--loom-build-dir")
    build = pathlib.Path(given).resolve() if given else source_dir / "build"

    def find(name):
        path = build / "bin" / name
        if not os.access(path, os.X_OK):
            message = f"{path} is not built"
            if given:
                pytest.fail(message)
            pytest.skip(message)
        return str(path)

    return find


@pytest.fixture(scope="session")
def oracle(source_dir):
    """tests/oracle's PyTorch GPT (models) and the token datasets' reference (datasets: what
    loom.models.gpt's inputs read), imported from the source tree."""
    pytest.importorskip("torch")
    import importlib.util

    modules = {}
    for name, path in (("models", "oracle/models.py"),
                       ("datasets", "data/token_dataset_reference.py")):
        spec = importlib.util.spec_from_file_location(
            f"loom_oracle_{name}", source_dir / "tests" / path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        modules[name] = module
    return modules


class LocalCluster:
    """`loomctl cluster up` in a temporary directory (data/ is its data root, checkpoints/ its
    checkpoint root); stop() runs `loomctl cluster down`."""

    def __init__(self, loomctl, directory, nodes=1, devices_per_node=2, tls_flags=()):
        self.loomctl = loomctl
        self.directory = pathlib.Path(directory)
        self.state = self.directory / "state"
        self.data = self.directory / "data"
        self.checkpoints = self.directory / "checkpoints"
        self.data.mkdir(parents=True)
        self.checkpoints.mkdir()
        result = subprocess.run(
            [loomctl, "cluster", "up", "--nodes", str(nodes), "--devices-per-node",
             str(devices_per_node), "--state-dir", str(self.state), "--data-root",
             str(self.data), "--checkpoint-root", str(self.checkpoints),
             "--memory-budget-per-device", "1GiB", "--timeout", f"{CLUSTER_TIMEOUT}s",
             *tls_flags],
            capture_output=True, text=True, timeout=CLUSTER_TIMEOUT + 30)
        if result.returncode != 0:
            raise RuntimeError(f"loomctl cluster up failed:\n{result.stderr}")
        self.address = result.stdout.strip().splitlines()[-1]

    def stop(self):
        subprocess.run([self.loomctl, "cluster", "down", "--state-dir", str(self.state)],
                       capture_output=True, text=True, timeout=CLUSTER_TIMEOUT + 30)

    def log(self):
        return "".join(path.read_text(errors="replace") for path in self.state.glob("*.log"))


@pytest.fixture(scope="session")
def local_cluster(binary, tmp_path_factory):
    cluster = LocalCluster(binary("loomctl"), tmp_path_factory.mktemp("cluster"))
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def make_certs(source_dir):
    """make_certs(directory, name, *hosts, roles=[...]) runs scripts/make-certs."""
    script = source_dir / "scripts" / "make-certs"
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")

    def make(directory, name, *hosts, roles=()):
        flags = [argument for role in roles for argument in ("--role", role)]
        subprocess.run(["bash", str(script), *flags, str(directory), name, *hosts], check=True,
                       capture_output=True, timeout=60)

    return make


def pytest_report_header(config):
    import loom
    import loom.protos

    return f"loom: {loom.__file__} (stubs: {loom.protos._PACKAGE})"
