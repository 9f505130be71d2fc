"""The one generator of Loom's Python messages and gRPC stubs from the repository's proto/ files.

setup.py runs it at install time (into the package, as loom/_proto/); loom.protos runs it when the
package is used from the source tree without the stubs (into a cache directory keyed by the
protos' contents). It imports nothing of the loom package, so setup.py can load it by path.

The protos import each other as "proto/plan.proto", so protoc writes modules named proto.*; the
generated imports are rewritten to live under a chosen package (loom._proto.proto.job_pb2, ...),
so that nothing named "proto" is added to the top level of sys.path.

protoc: the system's (Debian's protobuf-compiler, with protobuf-compiler-grpc's
grpc_python_plugin) when present, as it matches the C++ build; else grpc_tools.protoc. Debian's
python3-grpc-tools bundles protoc 3.5, which cannot read proto3 `optional` fields, so the system
protoc comes first.
"""

import hashlib
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

# Where the .proto files live, relative to the repository root (also protoc's import root).
PROTO_DIRECTORY = "proto"


class StubGenerationError(RuntimeError):
    """protoc is missing or failed; the message says which and what to install."""


def proto_files(repository_root):
    """Every .proto file under REPOSITORY_ROOT/proto, relative to the root, sorted."""
    root = pathlib.Path(repository_root)
    files = sorted(path.relative_to(root).as_posix()
                   for path in (root / PROTO_DIRECTORY).rglob("*.proto"))
    if not files:
        raise StubGenerationError(f"no .proto files under {root / PROTO_DIRECTORY}")
    return files


def protos_digest(repository_root):
    """A short hash of the proto files' names and contents (a cache key)."""
    digest = hashlib.sha256()
    for relative in proto_files(repository_root):
        digest.update(relative.encode())
        digest.update((pathlib.Path(repository_root) / relative).read_bytes())
    return digest.hexdigest()[:16]


def _protoc_command(output_directory):
    """The protoc invocation's head: the system protoc with grpc_python_plugin, else grpc_tools."""
    protoc = shutil.which("protoc")
    plugin = shutil.which("grpc_python_plugin")
    if protoc and plugin:
        return [protoc, f"--python_out={output_directory}", f"--grpc_out={output_directory}",
                f"--plugin=protoc-gen-grpc={plugin}"]
    try:
        import grpc_tools  # noqa: F401  (only to see whether it is installed)
    except ImportError:
        raise StubGenerationError(
            "cannot generate Loom's gRPC stubs: neither protoc with grpc_python_plugin (Debian: "
            "protobuf-compiler, protobuf-compiler-grpc) nor grpc_tools (python3-grpc-tools) "
            "is installed") from None
    include = pathlib.Path(grpc_tools.__file__).parent / "_proto"
    return [sys.executable, "-m", "grpc_tools.protoc", f"-I{include}",
            f"--python_out={output_directory}", f"--grpc_python_out={output_directory}"]


def _rewrite_imports(directory, package):
    """`from proto... import` -> `from PACKAGE.proto... import` in every generated module."""
    pattern = re.compile(r"^(from|import) proto(\.|\s)", re.MULTILINE)
    for module in pathlib.Path(directory).rglob("*.py"):
        text = module.read_text()
        module.write_text(pattern.sub(rf"\1 {package}.proto\2", text))


def generate(repository_root, package_directory, package):
    """Generates the messages and stubs of every proto into PACKAGE_DIRECTORY (which becomes the
    Python package PACKAGE: PACKAGE.proto.job_pb2, PACKAGE.proto.loom.v1.job_service_pb2_grpc,
    ...). Writes into a temporary directory beside it first and renames it into place, so that a
    concurrent reader sees the whole package or none. StubGenerationError when protoc fails."""
    repository_root = os.path.abspath(repository_root)
    package_directory = pathlib.Path(package_directory).resolve()
    package_directory.parent.mkdir(parents=True, exist_ok=True)
    staging = pathlib.Path(tempfile.mkdtemp(prefix=".stubs-", dir=package_directory.parent))
    try:
        command = _protoc_command(staging) + [f"-I{repository_root}"] + proto_files(
            repository_root)
        result = subprocess.run(command, cwd=repository_root, capture_output=True, text=True,
                                timeout=120)
        if result.returncode != 0:
            raise StubGenerationError(f"protoc failed ({' '.join(command[:1])}):\n"
                                      f"{result.stderr.strip()}")
        for directory in [staging] + [path for path in staging.rglob("*") if path.is_dir()]:
            (directory / "__init__.py").touch()
        _rewrite_imports(staging, package)
        if package_directory.exists():
            shutil.rmtree(package_directory)
        try:
            staging.rename(package_directory)
        except OSError:
            # Another process put it there first: theirs is the same.
            if not package_directory.exists():
                raise
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return package_directory
