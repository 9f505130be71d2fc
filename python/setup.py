"""Installs the loom package, generating its protobuf messages and gRPC stubs from the
repository's proto/ (next to this directory) into loom/_proto/ of the build, with the package's
own generator (loom/_stub_generator.py, loaded by path: the package cannot be imported before its
stubs exist). The stubs are never committed.

    python3 -m venv --system-site-packages venv
    venv/bin/pip install --no-build-isolation ./python
"""

import importlib.util
import os

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
REPOSITORY_ROOT = os.path.dirname(HERE)


def load_generator():
    spec = importlib.util.spec_from_file_location(
        "loom_stub_generator", os.path.join(HERE, "loom", "_stub_generator.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class BuildWithStubs(build_py):
    """build_py, then the stubs into BUILD_LIB/loom/_proto (package loom._proto)."""

    def run(self):
        super().run()
        generator = load_generator()
        if not os.path.isdir(os.path.join(REPOSITORY_ROOT, generator.PROTO_DIRECTORY)):
            raise SystemExit(f"loom: {REPOSITORY_ROOT}/proto is missing: install from the "
                             "repository's python/ directory (pip install --no-build-isolation "
                             "./python)")
        target = os.path.join(self.build_lib, "loom", "_proto")
        generator.generate(REPOSITORY_ROOT, target, "loom._proto")
        self.announce(f"generated Loom's protobuf stubs into {target}", level=2)


setup(cmdclass={"build_py": BuildWithStubs})
