#!/usr/bin/python3
"""An independent safetensors writer and checker, for testing Loom's (core/safetensors*).

It uses only the standard library (json, struct), following the format as specified at
https://github.com/huggingface/safetensors and laid out as its reference implementation writes
files: tensors sorted by descending dtype alignment, then by name; compact JSON with
"__metadata__" first; the header padded with spaces to a multiple of 8 bytes.

  make_reference.py write OUT   writes the reference checkpoint below to OUT
  make_reference.py hex         prints the reference file as C++ string-literal lines of hex
  make_reference.py check IN    parses IN strictly and prints one line per metadata entry and
                                tensor, sorted ("metadata <key hex> <value hex>" and
                                "tensor <name hex> <dtype> [<shape>] <data hex>"); exits 1 with a
                                message on stderr when IN is malformed

safetensors_test_util.cc holds the same checkpoint (ReferenceCheckpoint()) and the bytes `hex` prints.
"""

import json
import struct
import sys

# The reference implementation's dtype enum, in increasing alignment order.
ALIGNMENT_ORDER = [
    "BOOL", "F4", "F6_E2M3", "F6_E3M2", "U8", "I8", "F8_E5M2", "F8_E4M3", "F8_E8M0",
    "F8_E4M3FNUZ", "F8_E5M2FNUZ", "I16", "U16", "F16", "BF16", "I32", "U32", "F32", "C64",
    "F64", "I64", "U64",
]
ELEMENT_SIZES = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "F8_E8M0": 1, "F8_E4M3FNUZ": 1,
    "F8_E5M2FNUZ": 1, "I16": 2, "U16": 2, "F16": 2, "BF16": 2, "I32": 4, "U32": 4, "F32": 4,
    "C64": 8, "F64": 8, "I64": 8, "U64": 8,
}

REFERENCE_METADATA = {
    "format": "pt",
    "step": "1200",
    "note": 'caf\u00e9 "quoted" \\ back\nslash\ttab\x01\x7f',
}

# (name, dtype, shape, little-endian data)
REFERENCE_TENSORS = [
    ("embedding.weight", "F32", [2, 3],
     struct.pack("<6f", 0.0, 1.5, -2.25, 1024.0, -0.0, float("inf"))),
    ("step", "I64", [], struct.pack("<q", 1234567890123)),
    ("token_ids", "I32", [4], struct.pack("<4i", -1, 0, 7, 2147483647)),
    ("mask", "U8", [5], bytes([0, 1, 1, 0, 255])),
    ("counts", "U16", [2, 2], struct.pack("<4H", 0, 1, 65535, 300)),
    ("bias", "BF16", [3], struct.pack("<3H", 0x3F80, 0xC000, 0x7F80)),  # 1.0, -2.0, inf
    ("empty", "F32", [0, 4], b""),
    ("gr\u00f6\u00dfe", "I64", [1, 1], struct.pack("<q", -5)),
    ('odd "name" \\', "F32", [1], struct.pack("<f", 0.5)),
]


def serialize(tensors, metadata):
    ordered = sorted(tensors, key=lambda t: (-ALIGNMENT_ORDER.index(t[1]), t[0]))
    header = {}
    if metadata:
        header["__metadata__"] = dict(sorted(metadata.items()))
    offset = 0
    for name, dtype, shape, data in ordered:
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(t[3] for t in ordered)


class Malformed(Exception):
    pass


def no_duplicates(pairs):
    result = {}
    for key, value in pairs:
        if key in result:
            raise Malformed(f"duplicate key {key!r}")
        result[key] = value
    return result


def reject(what):
    def hook(text):
        raise Malformed(f"{what} {text!r} in the header")
    return hook


def is_natural(value):
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def check(contents):
    """Parses a safetensors file strictly; returns the summary lines."""
    if len(contents) < 8:
        raise Malformed("shorter than the header length")
    (n,) = struct.unpack("<Q", contents[:8])
    if 8 + n > len(contents):
        raise Malformed("header length past the end of the file")
    if n % 8 != 0:
        raise Malformed(f"header length {n} is not a multiple of 8")
    text = contents[8:8 + n].decode("utf-8")
    stripped = text.rstrip(" ")
    if not stripped.endswith("}") or len(text) - len(stripped) >= 8:
        raise Malformed("the header is not a JSON object padded with fewer than 8 spaces")
    header = json.loads(text, object_pairs_hook=no_duplicates,
                        parse_constant=reject("constant"), parse_float=reject("float"))
    if not isinstance(header, dict):
        raise Malformed("the header is not an object")
    lines = []
    metadata = header.pop("__metadata__", {})
    if not isinstance(metadata, dict):
        raise Malformed("__metadata__ is not an object")
    for key, value in metadata.items():
        if not isinstance(value, str):
            raise Malformed(f"metadata {key!r} is not a string")
        lines.append(f"metadata {key.encode().hex()} {value.encode().hex()}")
    buffer = contents[8 + n:]
    entries = []
    for name, info in header.items():
        if not isinstance(info, dict) or sorted(info) != ["data_offsets", "dtype", "shape"]:
            raise Malformed(f"tensor {name!r}: bad entry {info!r}")
        dtype, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
        if dtype not in ELEMENT_SIZES:
            raise Malformed(f"tensor {name!r}: unknown dtype {dtype!r}")
        if not isinstance(shape, list) or not all(is_natural(d) for d in shape):
            raise Malformed(f"tensor {name!r}: bad shape {shape!r}")
        if (not isinstance(offsets, list) or len(offsets) != 2
                or not all(is_natural(o) for o in offsets)):
            raise Malformed(f"tensor {name!r}: bad data_offsets {offsets!r}")
        size = ELEMENT_SIZES[dtype]
        for dimension in shape:
            size *= dimension
        if offsets[1] - offsets[0] != size:
            raise Malformed(f"tensor {name!r}: data_offsets {offsets} do not span {size} bytes")
        entries.append((offsets[0], offsets[1], name, dtype, shape))
    entries.sort()
    position = 0
    for begin, end, name, dtype, shape in entries:
        if begin != position:
            raise Malformed(f"tensor {name!r} begins at {begin}, not {position}")
        if begin % ELEMENT_SIZES[dtype] != 0:
            raise Malformed(f"tensor {name!r} is misaligned")
        position = end
        shape_text = "[" + ",".join(str(d) for d in shape) + "]"
        lines.append(f"tensor {name.encode().hex()} {dtype} {shape_text} "
                     f"{buffer[begin:end].hex()}")
    if position != len(buffer):
        raise Malformed(f"the tensors cover {position} of {len(buffer)} data bytes")
    return sorted(lines)


def main(argv):
    if len(argv) == 3 and argv[1] == "write":
        with open(argv[2], "wb") as f:
            f.write(serialize(REFERENCE_TENSORS, REFERENCE_METADATA))
        return 0
    if len(argv) == 2 and argv[1] == "hex":
        data = serialize(REFERENCE_TENSORS, REFERENCE_METADATA).hex()
        for i in range(0, len(data), 64):
            print(f'    "{data[i:i + 64]}"')
        return 0
    if len(argv) == 3 and argv[1] == "check":
        with open(argv[2], "rb") as f:
            contents = f.read()
        try:
            lines = check(contents)
        except (Malformed, ValueError) as error:  # json and UTF-8 errors are ValueErrors
            print(f"{argv[2]}: {error}", file=sys.stderr)
            return 1
        for line in lines:
            print(line)
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
