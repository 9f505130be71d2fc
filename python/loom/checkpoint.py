"""Loom checkpoints (safetensors files, core/safetensors.h) to and from NumPy and PyTorch.

    tensors = loom.checkpoint.load("/ckpt/gpt.safetensors")               # name -> np.ndarray
    model.load_state_dict(loom.checkpoint.load(path, torch=True, optimizer_state=False))
    loom.checkpoint.save("/ckpt/init.safetensors", model.state_dict())    # -> loomctl --init

A Loom checkpoint holds every variable by name at its logical shape (F32), and after training
the optimizer's state as PyTorch names it ("optimizer.exp_avg.<variable>", ...) with
"optimizer.step" (I64, shape []); its metadata has "step". save() writes the layout Loom's
writer does (tensors by descending alignment then name, compact JSON header padded to 8 bytes),
atomically (a temporary file renamed over PATH).

Data types: F32, I32, I64, U8, U16 and BF16 (Loom's six). NumPy has no bfloat16: BF16 loads as
float32 (exactly) unless torch=True; torch 1.x has no uint16: U16 loads as int32 under torch.
Reading also accepts F64, F16, I16, I8 and BOOL, which Loom itself does not use.
"""

import json
import os
import struct
import sys
import tempfile

import numpy

MAX_HEADER_BYTES = 100_000_000
OPTIMIZER_PREFIX = "optimizer."
OPTIMIZER_STEP = "optimizer.step"

# safetensors dtype -> NumPy dtype of its bytes (little-endian); BF16 is read as raw uint16.
_NUMPY_OF = {
    "F64": numpy.dtype("<f8"), "F32": numpy.dtype("<f4"), "F16": numpy.dtype("<f2"),
    "BF16": numpy.dtype("<u2"), "I64": numpy.dtype("<i8"), "I32": numpy.dtype("<i4"),
    "I16": numpy.dtype("<i2"), "I8": numpy.dtype("i1"), "U8": numpy.dtype("u1"),
    "U16": numpy.dtype("<u2"), "BOOL": numpy.dtype("?"),
}
# What save() writes: Loom's six, in the writer's order of descending alignment.
_ALIGNMENT_RANK = {"U8": 0, "U16": 1, "BF16": 2, "I32": 3, "F32": 4, "I64": 5}
_DTYPE_OF_NUMPY = {numpy.dtype("float32"): "F32", numpy.dtype("int32"): "I32",
                   numpy.dtype("int64"): "I64", numpy.dtype("uint8"): "U8",
                   numpy.dtype("uint16"): "U16"}


class CheckpointError(ValueError):
    """A file that is no valid safetensors checkpoint, or a tensor save() cannot write; the
    message names the file and the tensor."""


def _read_header(file, path):
    prefix = file.read(8)
    if len(prefix) < 8:
        raise CheckpointError(f"{path}: shorter than the 8-byte header length")
    (length,) = struct.unpack("<Q", prefix)
    if length > MAX_HEADER_BYTES:
        raise CheckpointError(f"{path}: header length {length} exceeds {MAX_HEADER_BYTES}")
    raw = file.read(length)
    if len(raw) != length:
        raise CheckpointError(f"{path}: the header is truncated ({len(raw)} of {length} bytes)")
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CheckpointError(f"{path}: the header is not UTF-8 JSON: {error}") from None
    if not isinstance(header, dict):
        raise CheckpointError(f"{path}: the header is not a JSON object")
    metadata = header.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict):
        raise CheckpointError(f"{path}: __metadata__ is not an object")
    for name, entry in header.items():
        if not isinstance(entry, dict) or set(entry) != {"dtype", "shape", "data_offsets"}:
            raise CheckpointError(f"{path}: tensor '{name}': an entry has exactly dtype, shape "
                                  f"and data_offsets, got {entry!r}")
        if entry["dtype"] not in _NUMPY_OF:
            raise CheckpointError(f"{path}: tensor '{name}': unsupported dtype "
                                  f"{entry['dtype']!r}")
    return header, metadata, 8 + length


def read_header(path):
    """(tensors, metadata): each tensor's {"dtype", "shape", "data_offsets"} by name, and the
    metadata; reads the header only."""
    path = os.fspath(path)
    with open(path, "rb") as file:
        header, metadata, _ = _read_header(file, path)
    return header, metadata


def load_metadata(path):
    """The checkpoint's metadata ({"step": "20", ...})."""
    return read_header(path)[1]


def _numpy_tensors(path, names):
    with open(path, "rb") as file:
        header, _, start = _read_header(file, path)
        buffer = file.read()
    result = {}
    for name, entry in sorted(header.items(), key=lambda item: item[1]["data_offsets"][0]):
        if names is not None and name not in names:
            continue
        dtype = _NUMPY_OF[entry["dtype"]]
        shape = entry["shape"]
        begin, end = entry["data_offsets"]
        count = 1
        for extent in shape:
            count *= extent
        if not 0 <= begin <= end <= len(buffer) or end - begin != count * dtype.itemsize:
            raise CheckpointError(f"{path}: tensor '{name}': data_offsets {[begin, end]} do not "
                                  f"hold {entry['dtype']}{shape} in a buffer of {len(buffer)} "
                                  "bytes")
        array = numpy.frombuffer(buffer, dtype=dtype, count=count, offset=begin).reshape(shape)
        result[name] = (entry["dtype"], array.copy())
    return result


def _to_numpy(dtype, array):
    if dtype == "BF16":
        return (array.astype(numpy.uint32) << 16).view(numpy.float32)
    return array.astype(array.dtype.newbyteorder("="), copy=False)


def _to_torch(dtype, array):
    import torch

    if dtype == "BF16":
        return torch.from_numpy(array.view("<i2").astype(numpy.int16)).view(torch.bfloat16)
    if dtype == "U16":
        return torch.from_numpy(array.astype(numpy.int32))
    return torch.from_numpy(array.astype(array.dtype.newbyteorder("="), copy=False))


def load(path, torch=False, optimizer_state=True, names=None):
    """The checkpoint's tensors by name: NumPy arrays, or torch tensors with TORCH=True (an
    ImportError when torch is not installed). OPTIMIZER_STATE=False leaves out the "optimizer.*"
    tensors (what a model's load_state_dict wants); NAMES, a collection, loads only those."""
    path = os.fspath(path)
    if sys.byteorder != "little" and torch:
        raise CheckpointError("loading into torch needs a little-endian host")
    convert = _to_torch if torch else _to_numpy
    if torch:
        import torch as _  # noqa: F401  (an ImportError here says what is missing)
    tensors = {}
    for name, (dtype, array) in _numpy_tensors(path, names).items():
        if not optimizer_state and name.startswith(OPTIMIZER_PREFIX):
            continue
        tensors[name] = convert(dtype, array)
    return tensors


def optimizer_step(path):
    """The optimizer steps the checkpoint's state holds ("optimizer.step"), or None."""
    header, _ = read_header(path)
    if OPTIMIZER_STEP not in header:
        return None
    (_, array), = _numpy_tensors(os.fspath(path), {OPTIMIZER_STEP}).values()
    return int(array.reshape(-1)[0])


def _as_array(name, value):
    """(safetensors dtype, little-endian bytes, shape) of a NumPy array or torch tensor."""
    module = type(value).__module__
    if module.startswith("torch"):
        import torch

        tensor = value.detach().to("cpu").contiguous()
        if tensor.dtype == torch.bfloat16:
            return "BF16", tensor.view(torch.int16).numpy().astype("<i2").tobytes(), \
                list(tensor.shape)
        value = tensor.numpy()
    array = numpy.asarray(value)
    dtype = _DTYPE_OF_NUMPY.get(array.dtype.newbyteorder("="))
    if dtype is None:
        raise CheckpointError(f"tensor '{name}': {array.dtype} cannot be stored in a Loom "
                              "checkpoint (float32, int32, int64, uint8, uint16 or bfloat16; "
                              "convert it, e.g. with .astype(numpy.float32) or .float())")
    little = array.astype(array.dtype.newbyteorder("<"), copy=False)
    return dtype, numpy.ascontiguousarray(little).tobytes(), list(array.shape)


def save(path, tensors, metadata=None):
    """Writes TENSORS (name -> NumPy array or torch tensor) and METADATA (str -> str) to PATH
    as a Loom checkpoint, atomically. CheckpointError naming a tensor Loom cannot hold."""
    path = os.fspath(path)
    entries = []
    for name, value in tensors.items():
        if not isinstance(name, str) or not name:
            raise CheckpointError(f"tensor names are non-empty strings, got {name!r}")
        if name == "__metadata__":
            raise CheckpointError("a tensor cannot be named __metadata__: the safetensors "
                                  "header reserves that key")
        dtype, data, shape = _as_array(name, value)
        entries.append((name, dtype, data, shape))
    entries.sort(key=lambda entry: entry[0].encode("utf-8"))
    entries.sort(key=lambda entry: -_ALIGNMENT_RANK[entry[1]])
    header = "{"
    metadata = dict(metadata or {})
    for key, value in metadata.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise CheckpointError(f"metadata maps strings to strings, got {key!r}: {value!r}")
    if metadata:
        header += '"__metadata__":{' + ",".join(
            f"{json.dumps(key, ensure_ascii=False)}:{json.dumps(metadata[key], ensure_ascii=False)}"
            for key in sorted(metadata)) + "}"
    offset = 0
    for name, dtype, data, shape in entries:
        if len(header) > 1:
            header += ","
        end = offset + len(data)
        header += (f'{json.dumps(name, ensure_ascii=False)}:{{"dtype":"{dtype}","shape":['
                   f'{",".join(str(extent) for extent in shape)}],"data_offsets":[{offset},'
                   f"{end}]}}")
        offset = end
    header += "}"
    encoded = header.encode("utf-8")
    encoded += b" " * ((8 - len(encoded) % 8) % 8)
    if len(encoded) > MAX_HEADER_BYTES:
        raise CheckpointError(f"the header would have {len(encoded)} bytes, more than "
                              f"{MAX_HEADER_BYTES}")
    directory = os.path.dirname(os.path.abspath(path))
    descriptor, temporary = tempfile.mkstemp(prefix=".checkpoint-", dir=directory)
    try:
        with os.fdopen(descriptor, "wb") as file:
            file.write(struct.pack("<Q", len(encoded)))
            file.write(encoded)
            for _, _, data, _ in entries:
                file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise
