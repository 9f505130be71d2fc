"""Minimal safetensors reader/writer using only json, struct, ctypes and torch.

File layout (https://github.com/huggingface/safetensors):
    8 bytes   little-endian u64 N = length of the JSON header
    N bytes   UTF-8 JSON: {"__metadata__": {str: str}, name: {"dtype": "F32",
              "shape": [..], "data_offsets": [begin, end]}, ...}
              (padded with spaces; this writer pads to a multiple of 8)
    rest      the byte buffer; data_offsets are relative to its start,
              tensors are little-endian, row-major, and must cover the
              buffer without holes or overlaps.

Supported dtypes: F64, F32, F16, BF16, I64, I32, I16, I8, U8, U16, BOOL.
torch 1.13 has no uint16, so U16 tensors are returned as torch.int32 (values
0..65535); to write U16 pass dtypes={name: "U16"} to save().
"""

import ctypes
import json
import struct
import sys

import torch

MAX_HEADER_BYTES = 100 * 1000 * 1000

# safetensors dtype -> (torch dtype used for the raw bytes, item size)
_RAW = {
    "F64": (torch.float64, 8),
    "F32": (torch.float32, 4),
    "F16": (torch.float16, 2),
    "BF16": (torch.bfloat16, 2),
    "I64": (torch.int64, 8),
    "I32": (torch.int32, 4),
    "I16": (torch.int16, 2),
    "I8": (torch.int8, 1),
    "U8": (torch.uint8, 1),
    "U16": (torch.int16, 2),  # reinterpreted, then widened to int32
    "BOOL": (torch.bool, 1),
}

_FROM_TORCH = {
    torch.float64: "F64",
    torch.float32: "F32",
    torch.float16: "F16",
    torch.bfloat16: "BF16",
    torch.int64: "I64",
    torch.int32: "I32",
    torch.int16: "I16",
    torch.int8: "I8",
    torch.uint8: "U8",
    torch.bool: "BOOL",
}


class SafetensorsError(ValueError):
    pass


def _check_little_endian():
    if sys.byteorder != "little":
        raise SafetensorsError("only little-endian hosts are supported")


def _numel(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def parse_header(blob, path="<bytes>"):
    """Returns (header dict without __metadata__, metadata dict, data start)."""
    if len(blob) < 8:
        raise SafetensorsError(f"{path}: file shorter than the 8-byte header length")
    (n,) = struct.unpack("<Q", bytes(blob[:8]))
    if n > MAX_HEADER_BYTES or 8 + n > len(blob):
        raise SafetensorsError(f"{path}: invalid header length {n} (file is {len(blob)} bytes)")
    try:
        header = json.loads(bytes(blob[8:8 + n]).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise SafetensorsError(f"{path}: header is not valid UTF-8 JSON: {e}") from None
    if not isinstance(header, dict):
        raise SafetensorsError(f"{path}: header is not a JSON object")
    metadata = header.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
        raise SafetensorsError(f"{path}: __metadata__ must map strings to strings")
    return header, metadata, 8 + n


def load(path, strict=True):
    """Reads a safetensors file. Returns (dict name -> tensor, metadata dict).

    Tensors come back in file-buffer order, as fresh (owning) tensors.
    With strict=True (default) the buffer must be covered exactly, as the
    format requires.
    """
    _check_little_endian()
    with open(path, "rb") as f:
        blob = bytearray(f.read())
    header, metadata, start = parse_header(blob, path)
    buf_len = len(blob) - start
    entries = []
    for name, info in header.items():
        if not isinstance(info, dict) or set(info) - {"dtype", "shape", "data_offsets"} \
                or not {"dtype", "shape", "data_offsets"} <= set(info):
            raise SafetensorsError(f"{path}: tensor {name!r}: entry must have exactly "
                                   f"dtype, shape, data_offsets; got {info!r}")
        dtype, shape, offs = info["dtype"], info["shape"], info["data_offsets"]
        if dtype not in _RAW:
            raise SafetensorsError(f"{path}: tensor {name!r}: unsupported dtype {dtype!r}")
        if not isinstance(shape, list) or not all(isinstance(s, int) and s >= 0 for s in shape):
            raise SafetensorsError(f"{path}: tensor {name!r}: bad shape {shape!r}")
        if (not isinstance(offs, list) or len(offs) != 2
                or not all(isinstance(o, int) for o in offs)
                or not 0 <= offs[0] <= offs[1] <= buf_len):
            raise SafetensorsError(f"{path}: tensor {name!r}: bad data_offsets {offs!r} "
                                   f"(buffer is {buf_len} bytes)")
        raw_dtype, size = _RAW[dtype]
        want = _numel(shape) * size
        if offs[1] - offs[0] != want:
            raise SafetensorsError(f"{path}: tensor {name!r}: {dtype}{shape} needs {want} bytes, "
                                   f"data_offsets {offs} give {offs[1] - offs[0]}")
        entries.append((offs[0], offs[1], name, dtype, shape))
    entries.sort()
    if strict:
        pos = 0
        for b, e, name, _, _ in entries:
            if b != pos:
                raise SafetensorsError(f"{path}: tensor {name!r} starts at {b}, expected {pos} "
                                       f"(hole or overlap in the buffer)")
            pos = e
        if pos != buf_len:
            raise SafetensorsError(f"{path}: buffer is {buf_len} bytes but tensors cover {pos}")
    out = {}
    for b, e, name, dtype, shape in entries:
        raw_dtype, size = _RAW[dtype]
        n = _numel(shape)
        if n == 0:
            t = torch.empty(shape, dtype=raw_dtype)
        else:
            t = torch.frombuffer(blob, dtype=raw_dtype, count=n, offset=start + b).clone()
            t = t.reshape(shape)
        if dtype == "U16":
            t = t.to(torch.int32) & 0xFFFF
        out[name] = t
    return out, dict(metadata)


def _tensor_bytes(t):
    t = t.detach().to("cpu").contiguous()
    nbytes = t.numel() * t.element_size()
    if nbytes == 0:
        return b""
    return ctypes.string_at(t.data_ptr(), nbytes)


def save(path, tensors, metadata=None, dtypes=None):
    """Writes tensors (a mapping name -> torch.Tensor, written in its order).

    metadata: optional {str: str} stored as __metadata__.
    dtypes: optional {name: safetensors dtype} to override the dtype derived
    from the tensor (needed for "U16"; other overrides cast the values).
    """
    _check_little_endian()
    dtypes = dtypes or {}
    header = {}
    if metadata:
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
            raise SafetensorsError("metadata must map strings to strings")
        header["__metadata__"] = dict(metadata)
    chunks = []
    pos = 0
    for name, t in tensors.items():
        if name == "__metadata__":
            raise SafetensorsError("'__metadata__' is not a valid tensor name")
        if not isinstance(t, torch.Tensor):
            raise SafetensorsError(f"tensor {name!r}: not a torch.Tensor")
        dt = dtypes.get(name)
        if dt is None:
            if t.dtype not in _FROM_TORCH:
                raise SafetensorsError(f"tensor {name!r}: unsupported torch dtype {t.dtype}")
            dt = _FROM_TORCH[t.dtype]
            data = t
        elif dt == "U16":
            v = t.detach().to(torch.int64)
            if v.numel() and (int(v.min()) < 0 or int(v.max()) > 0xFFFF):
                raise SafetensorsError(f"tensor {name!r}: values out of U16 range")
            data = torch.where(v > 0x7FFF, v - 0x10000, v).to(torch.int16)
        elif dt in _RAW:
            data = t.detach().to(_RAW[dt][0])
        else:
            raise SafetensorsError(f"tensor {name!r}: unsupported dtype {dt!r}")
        b = _tensor_bytes(data)
        header[name] = {"dtype": dt, "shape": list(t.shape), "data_offsets": [pos, pos + len(b)]}
        chunks.append(b)
        pos += len(b)
    hjson = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hjson += b" " * ((-len(hjson)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hjson)))
        f.write(hjson)
        for b in chunks:
            f.write(b)
