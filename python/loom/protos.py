"""Loom's protobuf messages and gRPC stubs as Python modules.

    from loom.protos import job_pb2, plan_pb2, job_service_pb2, job_service_pb2_grpc
    from loom.protos import cluster_service_pb2, cluster_service_pb2_grpc

An installed package (pip install ./python) holds them in loom/_proto/, generated at install time.
Used from the source tree (python/ on sys.path), they are generated on first use from the
repository's proto/ into a cache directory named by the protos' hash (regenerated when a proto
changes), by the same generator (loom/_stub_generator.py).
"""

import importlib
import os
import pathlib
import sys
import tempfile

from loom import _stub_generator

# The package the installed stubs live in (setup.py generates it under this name).
INSTALLED_PACKAGE = "loom._proto"


def _source_tree_root():
    """The repository root when this file is python/loom/protos.py in a checkout, else None."""
    root = pathlib.Path(__file__).resolve().parents[2]
    return root if (root / _stub_generator.PROTO_DIRECTORY).is_dir() else None


def _cache_directory():
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    try:
        os.makedirs(base, exist_ok=True)
        if os.access(base, os.W_OK):
            return pathlib.Path(base) / "loom-python"
    except OSError:
        pass
    return pathlib.Path(tempfile.gettempdir()) / f"loom-python-{os.getuid()}"


def _stub_package():
    """The name of an importable package holding the stubs, generating them if needed."""
    if (pathlib.Path(__file__).parent / "_proto" / "proto" / "job_pb2.py").exists():
        return INSTALLED_PACKAGE
    root = _source_tree_root()
    if root is None:
        raise ImportError("loom's generated protobuf modules (loom/_proto) are missing and no "
                          "proto/ directory is beside python/: install the package with "
                          "`pip install --no-build-isolation ./python`")
    package = "loom_proto_" + _stub_generator.protos_digest(root)
    cache = _cache_directory()
    if not (cache / package / "proto" / "job_pb2.py").exists():
        _stub_generator.generate(root, cache / package, package)
    if str(cache) not in sys.path:
        sys.path.append(str(cache))
    return package


_PACKAGE = _stub_package()


def _module(relative):
    return importlib.import_module(f"{_PACKAGE}.proto.{relative}")


job_pb2 = _module("job_pb2")
plan_pb2 = _module("plan_pb2")
job_service_pb2 = _module("loom.v1.job_service_pb2")
job_service_pb2_grpc = _module("loom.v1.job_service_pb2_grpc")
cluster_service_pb2 = _module("loom.v1.cluster_service_pb2")
cluster_service_pb2_grpc = _module("loom.v1.cluster_service_pb2_grpc")
