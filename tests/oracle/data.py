"""Deterministic token batches shared by Loom and the PyTorch reference.

Token file formats:
    bytes   one token per byte (values 0..255)
    uint16  one token per 2 bytes, little-endian (values 0..65535)
    uint32  one token per 4 bytes, little-endian

Batch formula, for training step t (0-based) and global sample i (0 <= i < B),
with N tokens in the file and sequence length T:
    offset = ((t * B + i) * T) mod (N - T - 1)
    x[i] = data[offset     : offset + T]
    y[i] = data[offset + 1 : offset + T + 1]
"""

import torch

FORMATS = ("bytes", "uint16", "uint32")


def load_tokens(path, fmt="bytes"):
    """Reads a token file into a 1-D torch.int64 tensor."""
    with open(path, "rb") as f:
        blob = bytearray(f.read())
    return tokens_from_bytes(blob, fmt, path)


def tokens_from_bytes(blob, fmt="bytes", what="<bytes>"):
    blob = bytearray(blob)
    if fmt == "bytes":
        if not blob:
            return torch.empty(0, dtype=torch.int64)
        return torch.frombuffer(blob, dtype=torch.uint8).to(torch.int64)
    if fmt == "uint16":
        if len(blob) % 2:
            raise ValueError(f"{what}: uint16 token file has an odd byte count ({len(blob)})")
        if not blob:
            return torch.empty(0, dtype=torch.int64)
        # torch 1.13 has no uint16: read as int16 (host is little-endian) and unwrap.
        return torch.frombuffer(blob, dtype=torch.int16).to(torch.int64) & 0xFFFF
    if fmt == "uint32":
        if len(blob) % 4:
            raise ValueError(f"{what}: uint32 token file's byte count {len(blob)} is not a "
                             "multiple of 4")
        if not blob:
            return torch.empty(0, dtype=torch.int64)
        # No uint32 either: int32 and unwrap.
        return torch.frombuffer(blob, dtype=torch.int32).to(torch.int64) & 0xFFFFFFFF
    raise ValueError(f"unknown data format {fmt!r} (expected one of {FORMATS})")


def batch_offsets(step, batch, seq_len, num_tokens):
    """The B start offsets of step `step` (Python ints, exact)."""
    span = num_tokens - seq_len - 1
    if span <= 0:
        raise ValueError(f"need more than T + 1 = {seq_len + 1} tokens, the file has {num_tokens}")
    return [((step * batch + i) * seq_len) % span for i in range(batch)]


def get_batch(tokens, step, batch, seq_len):
    """Returns (x, y), each int64 [batch, seq_len], for training step `step`."""
    offs = torch.tensor(batch_offsets(step, batch, seq_len, tokens.numel()), dtype=torch.int64)
    idx = offs[:, None] + torch.arange(seq_len, dtype=torch.int64)[None, :]
    return tokens[idx], tokens[idx + 1]
