"""Loom's `token_dataset` input against the reference (token_dataset_reference.py, docs/DATA.md):
every step's x and y that `loomctl run` fetches, for datasets of one file, a directory, a
pattern, a blend, in order and shuffled with several seeds, data parallel over 2 CPU devices; a
run resumed from a checkpoint, a first step of 10**6, micro-batches; and bad datasets failing
with an error that names the culprit.

Run:  LOOMCTL=build/bin/loomctl /usr/bin/python3 -m pytest -q \
          tests/data/test_token_dataset_batches.py
(LOOMCTL defaults to build/bin/loomctl of this checkout; the tests skip, saying why, when that
binary has no token_dataset input.)

What the tests rely on from loomctl (tools/loomctl): `run JOB --devices cpu:2 --fetch-dir DIR`
writes DIR/<tensor>_step<k>.npy, k the piece counted from 0 in each run, one piece per step and
micro-batch; a piece of a micro-batched input holds each rank's micro-batch of its rows
(rank r holds global rows [r*B/D, (r+1)*B/D), micro-batch m the m-th slice of those); `--init
CHECKPOINT` continues at the checkpoint's optimizer.step.
"""

import json
import os
import struct
import subprocess
import sys

import numpy
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from token_dataset_reference import Dataset, Source  # noqa: E402

REPOSITORY = os.path.dirname(os.path.dirname(HERE))
LOOMCTL = os.environ.get("LOOMCTL", os.path.join(REPOSITORY, "build", "bin", "loomctl"))
DEVICES = 2
TIMEOUT_SECONDS = 120
# An end-of-text token: GPT-2's, as scripts/tokenize writes it.
END_OF_TEXT = 50256


# --- files ----------------------------------------------------------------------------------------

FORMAT_TYPES = {"bytes": "<u1", "uint16": "<u2", "uint32": "<u4"}


def write_tokens(path, values, token_format="bytes"):
    numpy.asarray(values, dtype=FORMAT_TYPES[token_format]).tofile(str(path))
    return str(path)


def document_tokens(generator, documents, low, high, end_of_text=None):
    """`documents` documents of 1 to 12 tokens in [low, high), each ended by end_of_text."""
    values = []
    for _ in range(documents):
        length = int(generator.integers(1, 13))
        body = generator.integers(low, high, size=length)
        if end_of_text is not None:
            body = body[body != end_of_text]
        values += body.tolist()
        if end_of_text is not None:
            values.append(end_of_text)
    return values


# --- jobs -----------------------------------------------------------------------------------------

def dataset_text(sources, end_of_text, in_order, targets):
    """The token_dataset message of a job input; `sources` are Source objects."""
    parts = []
    for source in sources:
        paths = " ".join(f"paths: {json.dumps(path)}" for path in source.paths)
        weight = f" weight: {source.weight!r}" if source.weight else ""
        parts.append(f"sources {{ {paths} format: {json.dumps(source.format)}{weight} }}")
    if end_of_text is not None:
        parts.append(f"end_of_text: {end_of_text}")
    if in_order:
        parts.append("in_order: true")
    parts.append(f"targets: {'true' if targets else 'false'}")
    return "token_dataset { " + " ".join(parts) + " }"


def input_text(name, case, targets):
    return (f'inputs {{ name: "{name}" shape: [{case.batch}, {case.sequence}] '
            f'data_type: {case.data_type} sbp: "S(0)" seed: {case.seed} '
            f'{dataset_text(case.sources, case.end_of_text, case.in_order, targets)} }}\n')


def placement_text():
    devices = ", ".join(f'"cpu:{i}"' for i in range(DEVICES))
    return f"placement {{ devices: [{devices}] }}\n"


def reading_job_text(case, steps):
    """A job that reads x and y and copies them (identity): no training, one piece per step."""
    return (f'name: "token_dataset_{case.name}"\n' + placement_text() + f"num_steps: {steps}\n"
            + input_text("x", case, False) + input_text("y", case, True)
            + 'ops { name: "x_read" type: "identity" inputs: ["x"] outputs: "x_read" }\n'
            + 'ops { name: "y_read" type: "identity" inputs: ["y"] outputs: "y_read" }\n'
            + 'fetch: "x"\nfetch: "y"\nfetch: "x_read"\nfetch: "y_read"\n')


def training_job_text(case, steps, micro_batches):
    """A job with one variable (a bigram table, so that it checkpoints and resumes) that trains
    on x and y; it fetches them."""
    return (f'name: "token_dataset_training_{case.name}"\n' + placement_text()
            + f"num_steps: {steps}\nnum_micro_batches: {micro_batches}\n"
            + 'loss: "loss"\noptimizer { adamw { learning_rate: 0.001 } }\n'
            + input_text("x", case, False) + input_text("y", case, True)
            + 'variables { name: "table" shape: [256, 256] sbp: "B" '
              'initializer { constant: 0 } }\n'
            + 'ops { name: "logits" type: "embedding" inputs: ["table", "x"] outputs: "logits" }\n'
            + 'ops { name: "token_loss" type: "sparse_cross_entropy" inputs: ["logits", "y"] '
              'outputs: "token_loss" }\n'
            + 'ops { name: "loss" type: "reduce_mean" inputs: ["token_loss"] outputs: "loss" }\n'
            + 'fetch: "x"\nfetch: "y"\n')


class Case:
    """A dataset and the shape of the batches read from it."""

    def __init__(self, name, sources, end_of_text=None, in_order=False, seed=0, batch=4,
                 sequence=8, data_type="INT32"):
        self.name, self.sources, self.end_of_text = name, sources, end_of_text
        self.in_order, self.seed, self.batch, self.sequence = in_order, seed, batch, sequence
        self.data_type = data_type

    def reference(self):
        return Dataset(self.sources, end_of_text=self.end_of_text, in_order=self.in_order,
                       seed=self.seed)


# --- running loomctl ------------------------------------------------------------------------------

def run_loomctl(arguments, expect_success=True):
    done = subprocess.run([LOOMCTL] + arguments, capture_output=True, text=True,
                          timeout=TIMEOUT_SECONDS)
    if expect_success and done.returncode != 0:
        raise AssertionError(f"loomctl {' '.join(arguments)} exited {done.returncode}\n"
                             f"--- stdout ---\n{done.stdout[-4000:]}\n"
                             f"--- stderr ---\n{done.stderr[-4000:]}")
    return done


def run_job(job_text, work, name, *flags):
    """Writes and runs a job; returns its fetch directory."""
    job_path = os.path.join(work, f"{name}.pbtxt")
    with open(job_path, "w") as file:
        file.write(job_text)
    fetch_directory = os.path.join(work, f"{name}_fetched")
    run_loomctl(["run", job_path, "--devices", f"cpu:{DEVICES}", "--fetch-dir", fetch_directory,
                 *flags])
    return fetch_directory


def fetched(fetch_directory, tensor, piece):
    path = os.path.join(fetch_directory, f"{tensor}_step{piece}.npy")
    assert os.path.exists(path), (f"loomctl wrote no {path}; the directory holds "
                                  f"{sorted(os.listdir(fetch_directory))}")
    return numpy.load(path)


def step_batch(fetch_directory, tensor, step_index, micro_batches, batch):
    """The global [B, T] of a run's step `step_index` (counted in the run) from its pieces."""
    pieces = [fetched(fetch_directory, tensor, step_index * micro_batches + m)
              for m in range(micro_batches)]
    if micro_batches == 1:
        return pieces[0]
    local = batch // DEVICES            # rows per rank
    per_piece = local // micro_batches  # rows per rank and micro-batch
    rows = [None] * batch
    for m, piece in enumerate(pieces):
        for row in range(piece.shape[0]):
            rank, offset = divmod(row, per_piece)
            rows[rank * local + m * per_piece + offset] = piece[row]
    return numpy.stack(rows)


def check_step(fetch_directory, tensors, step_index, dataset, step, case, micro_batches=1):
    """Compares the fetched x and y of the run's step `step_index` with the reference's batch of
    step `step` (exact, as int64)."""
    expected_x, expected_y = dataset.batch(step, case.batch, case.sequence)
    for tensor, expected in zip(tensors, (expected_x, expected_y)):
        got = step_batch(fetch_directory, tensor, step_index, micro_batches, case.batch)
        assert got.shape == (case.batch, case.sequence), (tensor, got.shape)
        assert got.dtype == (numpy.int64 if case.data_type == "INT64" else numpy.int32)
        if not numpy.array_equal(got.astype(numpy.int64), expected):
            rows = [i for i in range(case.batch) if not numpy.array_equal(got[i], expected[i])]
            raise AssertionError(
                f"{case.name}: step {step} (the run's step {step_index}), {tensor}: rows {rows} "
                f"differ from the reference (global samples "
                f"{[step * case.batch + i for i in rows]})\nloom:\n{got}\nreference:\n{expected}")


# --- whether the binary has token_dataset ---------------------------------------------------------

@pytest.fixture(scope="module")
def loomctl(tmp_path_factory):
    """Skips the module, saying why, when LOOMCTL is missing or has no token_dataset input."""
    if not os.access(LOOMCTL, os.X_OK):
        pytest.skip(f"no loomctl at {LOOMCTL} (build it, or set LOOMCTL)")
    work = tmp_path_factory.mktemp("probe")
    data = write_tokens(work / "probe.bin", list(range(100)))
    case = Case("probe", [Source(data)])
    job_path = str(work / "probe.pbtxt")
    with open(job_path, "w") as file:
        file.write(reading_job_text(case, 1))
    done = run_loomctl(["compile", job_path, "--devices", f"cpu:{DEVICES}"], expect_success=False)
    message = done.stdout + done.stderr
    if done.returncode != 0 and ('no field named "token_dataset"' in message
                                 or "TokenDataset" in message and "no field" in message):
        pytest.skip(f"{LOOMCTL} was built without the token_dataset input (its job parser: "
                    f"{message.strip().splitlines()[-1]})")
    assert done.returncode == 0, (
        f"the probe job with a token_dataset input does not compile:\n{message}")
    return LOOMCTL


# --- the datasets ---------------------------------------------------------------------------------

def make_cases(root):
    """The matrix of datasets, written under `root` (a pathlib.Path)."""
    generator = numpy.random.default_rng(60)
    cases = []

    single = write_tokens(root / "single.bin", generator.integers(0, 256, size=157).tolist())
    cases.append(Case("one_file", [Source(single)]))
    cases.append(Case("one_file_negative_seed", [Source(single)], seed=-7))
    cases.append(Case("one_file_in_order", [Source(single)], in_order=True))

    directory = root / "directory"
    directory.mkdir()
    for index, documents in enumerate((9, 4, 13)):
        write_tokens(directory / f"part-{index}.u16",
                     document_tokens(generator, documents, 1, 65536, END_OF_TEXT), "uint16")
    (directory / ".partial").write_bytes(b"\1\2\3")  # not whole tokens: must be skipped
    cases.append(Case("directory_uint16_end_of_text", [Source(str(directory), "uint16")],
                      end_of_text=END_OF_TEXT, seed=3))
    cases.append(Case("directory_in_order_int64", [Source(str(directory), "uint16")],
                      end_of_text=END_OF_TEXT, in_order=True, data_type="INT64"))

    shards = root / "shards"
    shards.mkdir()
    for index in (2, 0, 10, 1):
        write_tokens(shards / f"shard-{index}.bin",
                     document_tokens(generator, 2 + index, 11, 256, 10))
    write_tokens(shards / "other.bin", [255] * 40)
    cases.append(Case("pattern_end_of_text", [Source(str(shards / "shard-*.bin"))],
                      end_of_text=10, seed=12345))
    cases.append(Case("two_paths_negative_seed",
                      [Source([str(shards / "other.bin"), str(shards / "shard-1?.bin")])],
                      end_of_text=10, seed=-(2**63)))

    text = write_tokens(root / "text.bin", generator.integers(0, 256, size=131).tolist())
    wide = write_tokens(root / "wide.u32", generator.integers(2**16, 2**31, size=61).tolist(),
                        "uint32")
    cases.append(Case("blend_3_to_1_bytes_and_uint32",
                      [Source(text, "bytes", 3.0), Source(wide, "uint32", 1.0)]))
    cases.append(Case("blend_3_to_1_batch_8_seed_5",
                      [Source(text, "bytes", 3.0), Source(wide, "uint32", 1.0)], seed=5,
                      batch=8, sequence=5))
    return cases


CASE_NAMES = ["one_file", "one_file_negative_seed", "one_file_in_order",
              "directory_uint16_end_of_text", "directory_in_order_int64", "pattern_end_of_text",
              "two_paths_negative_seed", "blend_3_to_1_bytes_and_uint32",
              "blend_3_to_1_batch_8_seed_5"]
STEPS = 16  # several epochs of every dataset above


@pytest.fixture(scope="module")
def cases(tmp_path_factory):
    made = make_cases(tmp_path_factory.mktemp("datasets"))
    assert [case.name for case in made] == CASE_NAMES
    return {case.name: case for case in made}


@pytest.mark.parametrize("name", CASE_NAMES)
def test_every_step_matches_the_reference(loomctl, cases, tmp_path, name):
    case = cases[name]
    dataset = case.reference()
    # The run covers more than two epochs of every source (a test of the test).
    last = {}
    for g in range(STEPS * case.batch):
        j, k = dataset.source_sample(g)
        last[j] = k
    for j in range(len(case.sources)):
        assert last[j] >= 2 * dataset.samples_per_epoch(j, case.sequence), (name, j, last)
    fetch_directory = run_job(reading_job_text(case, STEPS), str(tmp_path), "read",
                              "--steps", str(STEPS))
    for step in range(STEPS):
        check_step(fetch_directory, ("x", "y"), step, dataset, step, case)
        check_step(fetch_directory, ("x_read", "y_read"), step, dataset, step, case)


# --- training: resumed, a late first step, micro-batches -----------------------------------------

def training_case(root):
    directory = root / "documents"
    directory.mkdir()
    generator = numpy.random.default_rng(61)
    for index in range(3):
        write_tokens(directory / f"{index:02d}.bin", document_tokens(generator, 11, 0, 255, 255))
    return Case("training", [Source(str(directory))], end_of_text=255, seed=-3)


def with_first_step(checkpoint, first_step, path):
    """A copy of a safetensors checkpoint whose optimizer.step (and metadata) is `first_step`."""
    with open(checkpoint, "rb") as file:
        blob = file.read()
    header_length = struct.unpack("<Q", blob[:8])[0]
    header = json.loads(blob[8:8 + header_length])
    data = bytearray(blob[8 + header_length:])
    entry = header["optimizer.step"]
    assert entry["dtype"] == "I64" and entry["shape"] == [], entry
    begin, end = entry["data_offsets"]
    data[begin:end] = struct.pack("<q", first_step)
    metadata = header.get("__metadata__", {})
    for field in ("step", "next_step"):
        if field in metadata:
            metadata[field] = str(first_step)
    encoded = json.dumps(header).encode()
    encoded += b" " * (-len(encoded) % 8)
    with open(path, "wb") as file:
        file.write(struct.pack("<Q", len(encoded)) + encoded + bytes(data))
    return path


@pytest.mark.parametrize("micro_batches", [1, 2])
def test_a_resumed_run_and_a_late_first_step_read_the_reference_batches(loomctl, tmp_path,
                                                                         micro_batches):
    case = training_case(tmp_path)
    dataset = case.reference()
    work = str(tmp_path)
    job = training_job_text(case, 6, micro_batches)
    tensors = ("x", "y")

    # Unbroken, and checkpointed every 3 steps (two segments in one run).
    whole = run_job(job, work, "whole", "--steps", "6")
    save_directory = os.path.join(work, "saved")
    segments = run_job(job, work, "segments", "--steps", "6", "--save-dir", save_directory,
                       "--save-every", "3")
    for step in range(6):
        check_step(whole, tensors, step, dataset, step, case, micro_batches)
        check_step(segments, tensors, step, dataset, step, case, micro_batches)

    # A new run from the checkpoint of step 3: its steps are steps 3, 4 and 5.
    checkpoint = os.path.join(save_directory, "step-3.safetensors")
    assert os.path.exists(checkpoint), sorted(os.listdir(save_directory))
    resumed = run_job(job, work, "resumed", "--init", checkpoint, "--steps", "3")
    for index in range(3):
        check_step(resumed, tensors, index, dataset, 3 + index, case, micro_batches)
        for tensor in tensors:
            assert numpy.array_equal(
                step_batch(resumed, tensor, index, micro_batches, case.batch),
                step_batch(whole, tensor, 3 + index, micro_batches, case.batch)), (tensor, index)

    # A run that starts at step 10**6 (global samples 4 * 10**6 on: many epochs in).
    late = with_first_step(checkpoint, 10**6, os.path.join(work, "late.safetensors"))
    late_run = run_job(job, work, "late", "--init", late, "--steps", "2")
    for index in range(2):
        check_step(late_run, tensors, index, dataset, 10**6 + index, case, micro_batches)


# --- errors ---------------------------------------------------------------------------------------

def error_cases(root):
    """(name, sources, the strings one of which the error must hold)."""
    good = write_tokens(root / "good.bin", list(range(100)))
    other = write_tokens(root / "other.bin", list(range(100)))
    (root / "empty.bin").write_bytes(b"")
    (root / "odd.u16").write_bytes(b"\0\0\0")
    short = write_tokens(root / "short.bin", list(range(5)))
    # A source named by its place in the blend ("source 1", "sources[1]") or by its paths.
    second_source = ["source 1", "sources[1]", "source #1"]
    return [
        ("missing_file", [Source(str(root / "missing.bin"))], ["missing.bin"]),
        ("pattern_matching_nothing", [Source(str(root / "none-*.bin"))], ["none-*.bin"]),
        ("empty_file", [Source(str(root / "empty.bin"))], ["empty.bin"]),
        ("not_whole_tokens", [Source(str(root / "odd.u16"), "uint16")], ["odd.u16"]),
        ("file_named_twice", [Source([good, str(root / "good*.bin")])], ["good.bin"]),
        ("too_short_for_a_sample", [Source(good), Source(short)], ["short.bin"]),
        ("weight_under_a_ten_thousandth", [Source(good, weight=1.0), Source(other, weight=1e-5)],
         ["other.bin"] + second_source),
        ("negative_weight", [Source(good, weight=1.0), Source(other, weight=-2.0)],
         ["other.bin"] + second_source),
    ]


ERROR_NAMES = ["missing_file", "pattern_matching_nothing", "empty_file", "not_whole_tokens",
               "file_named_twice", "too_short_for_a_sample", "weight_under_a_ten_thousandth",
               "negative_weight"]


@pytest.mark.parametrize("name", ERROR_NAMES)
def test_a_bad_dataset_fails_naming_the_culprit(loomctl, tmp_path, name):
    found = {case_name: (sources, culprit)
             for case_name, sources, culprit in error_cases(tmp_path)}
    assert sorted(found) == sorted(ERROR_NAMES)
    sources, culprits = found[name]
    case = Case(name, sources)
    job_path = str(tmp_path / "bad.pbtxt")
    with open(job_path, "w") as file:
        file.write(reading_job_text(case, 1))
    done = run_loomctl(["run", job_path, "--devices", f"cpu:{DEVICES}", "--fetch-dir",
                        str(tmp_path / "fetched")], expect_success=False)
    assert done.returncode != 0, f"{name}: loomctl run succeeded:\n{done.stdout[-2000:]}"
    message = done.stdout + done.stderr
    assert any(culprit in message for culprit in culprits), (
        f"{name}: the error names none of {culprits}:\n{message[-3000:]}")
