"""loom.checkpoint: Loom's safetensors checkpoints to and from NumPy and PyTorch, byte for byte
the layout of Loom's writer."""

import struct

import numpy
import pytest

import loom


def sample_tensors():
    generator = numpy.random.default_rng(0)
    return {
        "w": generator.standard_normal((3, 4)).astype(numpy.float32),
        "ids": numpy.arange(6, dtype=numpy.int32).reshape(2, 3),
        "optimizer.step": numpy.array(7, dtype=numpy.int64),
        "bytes": numpy.arange(5, dtype=numpy.uint8),
        "tokens": numpy.array([0, 65535, 300], dtype=numpy.uint16),
        "empty": numpy.zeros((0, 2), dtype=numpy.float32),
    }


def test_numpy_round_trip(tmp_path):
    path = tmp_path / "a.safetensors"
    tensors = sample_tensors()
    loom.checkpoint.save(path, tensors, {"step": "7"})
    loaded = loom.checkpoint.load(path)
    assert set(loaded) == set(tensors)
    for name, array in tensors.items():
        assert loaded[name].dtype == array.dtype and loaded[name].shape == array.shape
        numpy.testing.assert_array_equal(loaded[name], array)
    assert loom.checkpoint.load_metadata(path) == {"step": "7"}
    assert loom.checkpoint.optimizer_step(path) == 7
    assert "optimizer.step" not in loom.checkpoint.load(path, optimizer_state=False)
    assert set(loom.checkpoint.load(path, names={"w"})) == {"w"}


def test_layout_is_loom_writers(tmp_path):
    path = tmp_path / "a.safetensors"
    loom.checkpoint.save(path, sample_tensors(), {"step": "7", "a": "b"})
    blob = path.read_bytes()
    (length,) = struct.unpack("<Q", blob[:8])
    assert length % 8 == 0
    header = blob[8:8 + length].decode().rstrip(" ")
    # Metadata first (keys sorted), then descending alignment (I64, F32, I32, U16, U8), by name.
    assert header.startswith('{"__metadata__":{"a":"b","step":"7"},"optimizer.step":{"dtype":'
                             '"I64","shape":[],"data_offsets":[0,8]},"empty":{"dtype":"F32"')
    order = [header.index(f'"{name}"') for name in ["optimizer.step", "empty", "w", "ids",
                                                    "tokens", "bytes"]]
    assert order == sorted(order)


def test_resaves_a_file_loom_wrote_byte_for_byte(binary, tmp_path):
    import subprocess

    written = tmp_path / "init.safetensors"
    subprocess.run([binary("loom-gpt"), "--write-init", str(written), "--layers", "1",
                    "--width", "32", "--heads", "2", "--mlp-width", "64", "--context", "16"],
                   check=True, capture_output=True, timeout=60)
    copy = tmp_path / "copy.safetensors"
    loom.checkpoint.save(copy, loom.checkpoint.load(written),
                         loom.checkpoint.load_metadata(written))
    assert copy.read_bytes() == written.read_bytes()


def test_torch_round_trip(tmp_path):
    torch = pytest.importorskip("torch")
    path = tmp_path / "t.safetensors"
    tensors = {"w": torch.randn(2, 3), "half": torch.randn(4).to(torch.bfloat16),
               "i": torch.arange(3, dtype=torch.int64)}
    loom.checkpoint.save(path, tensors)
    loaded = loom.checkpoint.load(path, torch=True)
    for name, tensor in tensors.items():
        assert loaded[name].dtype == tensor.dtype
        assert torch.equal(loaded[name], tensor)
    # NumPy has no bfloat16: the exact float32 values.
    as_numpy = loom.checkpoint.load(path)["half"]
    assert as_numpy.dtype == numpy.float32
    numpy.testing.assert_array_equal(as_numpy, tensors["half"].float().numpy())


def test_errors_name_the_tensor_and_file(tmp_path):
    with pytest.raises(loom.checkpoint.CheckpointError, match="tensor 'd': float64"):
        loom.checkpoint.save(tmp_path / "x.safetensors", {"d": numpy.zeros(2)})
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"\x04\x00")
    with pytest.raises(loom.checkpoint.CheckpointError, match="bad.safetensors: shorter"):
        loom.checkpoint.load(bad)
