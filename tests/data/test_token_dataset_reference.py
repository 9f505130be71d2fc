"""Properties of the token-dataset reference (token_dataset_reference.py, docs/DATA.md): the
permutation is a bijection, blends keep their quotas, epochs visit every sample once, documents
stay whole, bad datasets are errors naming the culprit.

Run:  /usr/bin/python3 -m pytest -q tests/data/test_token_dataset_reference.py
"""

import json
import os
import random
import subprocess
import sys

import numpy
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import token_dataset_reference as reference  # noqa: E402
from token_dataset_reference import Dataset, DatasetError, Source  # noqa: E402

MASK = (1 << 64) - 1


def write_tokens(path, values, token_format="bytes"):
    """Writes `values` as a token file; returns its path as a string."""
    numpy.asarray(values, dtype=reference.FORMATS[token_format]).tofile(str(path))
    return str(path)


# --- the hash and the permutation ---------------------------------------------------------------

def test_splitmix64_known_values():
    # SplitMix64 seeded with 0 (state advanced by the gamma, then mixed): its first outputs.
    assert reference.splitmix64(0) == 0xE220A8397B1DCDAF
    assert reference.splitmix64(0x9E3779B97F4A7C15) == 0x6E789E6AA1B965F4
    assert reference.splitmix64(MASK) == reference.splitmix64(MASK & MASK)
    assert all(0 <= reference.splitmix64(v) <= MASK for v in (1, 2**63, MASK))


def test_hash_chains_splitmix_and_takes_negative_values_as_twos_complement():
    a, b = 5, 7
    assert reference.hash_values() == 0
    assert reference.hash_values(a) == reference.splitmix64(a)
    assert reference.hash_values(a, b) == reference.splitmix64(reference.splitmix64(a) ^ b)
    assert reference.hash_values(-1, 0) == reference.hash_values(MASK, 0)


@pytest.mark.parametrize("key", [0, 1, 0xDEADBEEF, MASK, reference.hash_values(-3, 0, 0, 1)])
def test_permutation_is_a_bijection_for_every_small_n(key):
    for n in range(1, 301):
        image = [reference.permutation(n, key, i) for i in range(n)]
        assert sorted(image) == list(range(n)), f"n={n} key={key}"


def test_permutation_is_one_to_one_on_samples_of_large_n():
    generator = random.Random(60)
    for n in (2**20, 2**20 + 1, 10**9 + 7, 2**40 - 3, 2**62 + 12345):
        for key in (0, 42, MASK):
            inputs = {generator.randrange(n) for _ in range(400)} | {0, n - 1}
            outputs = [reference.permutation(n, key, i) for i in inputs]
            assert all(0 <= value < n for value in outputs)
            assert len(set(outputs)) == len(inputs), f"n={n} key={key}: a collision"


def test_permutation_depends_on_the_key_and_is_not_the_identity():
    n = 1000
    first = [reference.permutation(n, 1, i) for i in range(n)]
    second = [reference.permutation(n, 2, i) for i in range(n)]
    assert first != second
    assert first != list(range(n))
    assert sum(value == i for i, value in enumerate(first)) < 20


def test_permutation_of_tiny_domains():
    assert reference.permutation(1, 99, 0) == 0
    for key in range(50):
        assert sorted(reference.permutation(2, key, i) for i in range(2)) == [0, 1]
    with pytest.raises(ValueError):
        reference.permutation(5, 0, 5)


def test_permutation_follows_the_written_feistel_network():
    # n = 5: c = 3, h = 2 (4 bits, values 0 ... 15), walking the cycle until below 5.
    key, half, half_mask = 77, 2, 3

    def feistel(x):
        left, right = x >> half, x & half_mask
        for round_number in range(4):
            mixed = reference.hash_values(key, round_number, right) & half_mask
            left, right = right, left ^ mixed
        return (left << half) | right

    for i in range(5):
        x = feistel(i)
        while x >= 5:
            x = feistel(x)
        assert reference.permutation(5, key, i) == x


# --- blends ---------------------------------------------------------------------------------------

def test_blend_three_to_one_quotas_and_pattern_counts():
    quotas, pattern = reference.blend_pattern([3, 1])
    assert quotas == [7500, 2500]
    assert len(pattern) == 10000
    assert pattern.count(0) == 7500 and pattern.count(1) == 2500


def test_blend_pattern_never_runs_more_than_one_sample_from_its_share():
    for weights in ([3, 1], [1, 1, 1], [0.5, 0.25, 0.125, 0.125], [7, 2, 1], [1, 0]):
        quotas, pattern = reference.blend_pattern(weights)
        counts = [0] * len(quotas)
        for r, j in enumerate(pattern):
            counts[j] += 1
            for source, quota in enumerate(quotas):
                share = quota * (r + 1) / 10000
                assert abs(counts[source] - share) <= 1.0 + 1e-9, (weights, r, source)
        assert counts == quotas


def test_blend_remainders_go_to_the_largest_fractions_lower_source_first():
    quotas, pattern = reference.blend_pattern([1, 1, 1])  # 3333.33 each: one left over
    assert quotas == [3334, 3333, 3333]
    assert pattern[:3] == [0, 1, 2]
    quotas, _ = reference.blend_pattern([2, 1, 0])  # 0 means 1: 5000, 2500, 2500
    assert quotas == [5000, 2500, 2500]


def test_blend_three_to_one_over_whole_steps_of_a_dataset(tmp_path):
    first = write_tokens(tmp_path / "a.bin", [1] * 200)
    second = write_tokens(tmp_path / "b.bin", [2] * 200)
    dataset = Dataset([Source(first, weight=3), Source(second, weight=1)])
    sources = [dataset.source_of(g) for g in range(10000)]
    assert sources.count(0) == 7500 and sources.count(1) == 2500
    for batch in (8, 1):
        steps = 1000
        count = sum(dataset.source_of(step * batch + i) == 0
                    for step in range(steps) for i in range(batch))
        assert abs(count / (steps * batch) - 0.75) <= 0.02, (batch, count)
    # The rows themselves come from the source the pattern names.
    x, y = dataset.batch(3, 8, 5)
    for i in range(8):
        assert set(x[i]) == {1 + dataset.source_of(3 * 8 + i)}


def test_blend_source_sample_numbers_count_each_source_separately():
    dataset_weights = [3, 1]
    quotas, pattern = reference.blend_pattern(dataset_weights)
    seen = [0, 0]

    class Stub(Dataset):
        def __init__(self):  # the pattern only, no files
            self.quotas, self.pattern = quotas, pattern
            self.before, counts = [], [0, 0]
            for j in pattern:
                self.before.append(counts[j])
                counts[j] += 1

    stub = Stub()
    for g in range(25000):
        j, k = stub.source_sample(g)
        assert k == seen[j], g
        seen[j] += 1


@pytest.mark.parametrize("weights, culprit", [([1, -1], "source 1"),
                                              ([1, float("nan")], "source 1"),
                                              ([float("inf"), 1], "source 0"),
                                              ([1, 1e-5], "source 1")])
def test_bad_weights_are_errors_naming_the_source(weights, culprit):
    with pytest.raises(DatasetError, match=culprit):
        reference.blend_pattern(weights)


# --- epochs and samples ---------------------------------------------------------------------------

def test_in_order_one_source_reads_consecutive_samples_and_wraps_by_epoch(tmp_path):
    values = [(v * 7) % 251 for v in range(103)]
    path = write_tokens(tmp_path / "t.bin", values)
    T = 10
    dataset = Dataset(Source(path), in_order=True)
    S = (103 - 1) // T
    assert dataset.samples_per_epoch(0, T) == S == 10
    for g in range(3 * S):
        k = g % S
        assert dataset.sample(g, T).tolist() == values[k * T:k * T + T + 1]
    x, y = dataset.batch(2, 4, T)  # rows 8, 9, 10 (epoch 1, sample 0), 11
    assert x.shape == y.shape == (4, T) and x.dtype == numpy.int64
    assert x[2].tolist() == values[0:T] and y[2].tolist() == values[1:T + 1]
    assert x[0].tolist() == values[80:90] and y[1].tolist() == values[91:101]


@pytest.mark.parametrize("seed", [0, 1, -5])
def test_shuffled_epochs_visit_every_sample_exactly_once(tmp_path, seed):
    values = list(range(200)) + list(range(50))
    path = write_tokens(tmp_path / "t.bin", values)
    T = 7
    dataset = Dataset(Source(path), seed=seed)
    S = dataset.samples_per_epoch(0, T)
    assert S == (250 - 1) // T
    orders = []
    for epoch in range(3):
        epoch_tokens = dataset.epoch_tokens(0, epoch).tolist()
        starts = []
        for k in range(S):
            sample = dataset.sample(epoch * S + k, T).tolist()
            s = dataset.epoch_sample(0, epoch, k, T)
            assert sample == epoch_tokens[s * T:s * T + T + 1]
            starts.append(s)
        assert sorted(starts) == list(range(S))
        orders.append(starts)
    assert orders[0] != orders[1] != orders[2]
    assert orders[0] != list(range(S))


def test_the_seed_changes_the_shuffle_and_twos_complement_seeds_agree(tmp_path):
    path = write_tokens(tmp_path / "t.bin", list(range(250)))
    batches = {seed: Dataset(Source(path), seed=seed).batch(0, 8, 5)[0].tolist()
               for seed in (0, 1, -1)}
    assert batches[0] != batches[1] != batches[-1]
    assert Dataset(Source(path), seed=MASK).batch(0, 8, 5)[0].tolist() == batches[-1]


def test_a_sample_is_a_pure_function_of_the_global_index(tmp_path):
    path = write_tokens(tmp_path / "t.bin", [(v * 13) % 256 for v in range(999)])
    dataset = Dataset(Source(path), seed=3)
    late = dataset.sample(10**6 + 5, 16).tolist()
    assert dataset.sample(0, 16).tolist() == Dataset(Source(path), seed=3).sample(0, 16).tolist()
    assert dataset.sample(10**6 + 5, 16).tolist() == late
    x, _ = dataset.batch(10**6 // 4, 4, 16)
    assert x[1].tolist() == dataset.sample(10**6 + 1, 16)[:16].tolist()


# --- documents ------------------------------------------------------------------------------------

def split_documents(values, end_of_text):
    documents, current = [], []
    for value in values:
        current.append(value)
        if value == end_of_text:
            documents.append(current)
            current = []
    if current:
        documents.append(current)
    return documents


def test_documents_stay_whole_and_are_permuted_each_epoch(tmp_path):
    E = 0
    generator = random.Random(7)
    files, expected = [], []
    for f in range(3):
        values = []
        for d in range(6 + f):
            values += [generator.randrange(1, 60000) for _ in range(generator.randrange(1, 9))]
            values.append(E)
        if f == 1:
            values += [11, 12, 13]  # a last document without E: ends with the file
        files.append(write_tokens(tmp_path / f"shard-{f}.bin", values, "uint16"))
        expected += split_documents(values, E)
    dataset = Dataset(Source(str(tmp_path), "uint16"), end_of_text=E, seed=9)
    assert dataset.document_count(0) == len(expected)
    source = dataset.sources[0]
    assert [source.tokens[a:b].tolist() for a, b in source.documents] == expected
    previous = None
    for epoch in range(3):
        order = dataset.epoch_document_order(0, epoch)
        assert sorted(order) == list(range(len(expected)))
        assert order != list(range(len(expected))) and order != previous
        previous = order
        stream = dataset.epoch_tokens(0, epoch).tolist()
        assert stream == [token for d in order for token in expected[d]]
        assert len(stream) == dataset.token_count(0)


def test_a_file_is_never_joined_to_the_next_inside_a_document(tmp_path):
    write_tokens(tmp_path / "a.bin", [5, 6, 0, 7])       # documents [5 6 0] [7]
    write_tokens(tmp_path / "b.bin", [8, 9, 0])          # [8 9 0]; the empty tail does not count
    write_tokens(tmp_path / "c.bin", [1, 2])             # [1 2]
    dataset = Dataset(Source(str(tmp_path)), end_of_text=0, in_order=True)
    source = dataset.sources[0]
    assert [source.tokens[a:b].tolist() for a, b in source.documents] == [
        [5, 6, 0], [7], [8, 9, 0], [1, 2]]
    without = Dataset(Source(str(tmp_path)))
    assert without.document_count(0) == 3  # each file one document


def test_in_order_keeps_the_documents_in_file_order(tmp_path):
    values = [3, 4, 0, 5, 0, 6, 7, 8, 0]
    write_tokens(tmp_path / "t.bin", values)
    dataset = Dataset(Source(str(tmp_path / "t.bin")), end_of_text=0, in_order=True)
    assert dataset.epoch_tokens(0, 4).tolist() == values


# --- paths ----------------------------------------------------------------------------------------

def test_a_directory_is_its_regular_files_in_byte_order_without_dot_files(tmp_path):
    directory = tmp_path / "d"
    directory.mkdir()
    write_tokens(directory / "b.bin", [2])
    write_tokens(directory / "B.bin", [1])   # 'B' < 'b' in bytes
    write_tokens(directory / "a.bin", [3])
    write_tokens(directory / "a0.bin", [4])
    write_tokens(directory / ".hidden", [9])
    (directory / "sub").mkdir()
    write_tokens(directory / "sub" / "deep.bin", [8])
    dataset = Dataset(Source(str(directory)), in_order=True)
    assert [os.path.basename(f) for f in dataset.sources[0].files] == [
        "B.bin", "a.bin", "a0.bin", "b.bin"]
    assert dataset.sources[0].tokens.tolist() == [1, 3, 4, 2]


def test_a_pattern_matches_in_its_last_component_and_dots_only_explicitly(tmp_path):
    for name, value in (("shard-2.bin", 2), ("shard-10.bin", 10), ("shard-1.bin", 1),
                        ("other.bin", 7), (".shard-0.bin", 0)):
        write_tokens(tmp_path / name, [value])
    dataset = Dataset(Source(str(tmp_path / "shard-*.bin")), in_order=True)
    assert dataset.sources[0].tokens.tolist() == [1, 10, 2]
    dataset = Dataset(Source(str(tmp_path / "*")), in_order=True)
    assert dataset.sources[0].tokens.tolist() == [7, 1, 10, 2]
    dataset = Dataset(Source(str(tmp_path / ".shard-?.bin")), in_order=True)
    assert dataset.sources[0].tokens.tolist() == [0]
    dataset = Dataset(Source(str(tmp_path / "shard-[12].bin")), in_order=True)
    assert dataset.sources[0].tokens.tolist() == [1, 2]


def test_paths_of_a_source_join_in_their_order(tmp_path):
    first = write_tokens(tmp_path / "z.bin", [1, 2], "uint32")
    second = write_tokens(tmp_path / "a.bin", [70000, 4], "uint32")
    dataset = Dataset(Source([first, second], "uint32"), in_order=True)
    assert dataset.sources[0].tokens.tolist() == [1, 2, 70000, 4]


def test_formats_are_little_endian(tmp_path):
    (tmp_path / "u16").write_bytes(bytes([1, 2, 0xFF, 0xFF]))
    (tmp_path / "u32").write_bytes(bytes([1, 2, 3, 4]))
    assert Dataset(Source(str(tmp_path / "u16"), "uint16")).sources[0].tokens.tolist() == [
        0x0201, 0xFFFF]
    assert Dataset(Source(str(tmp_path / "u32"), "uint32")).sources[0].tokens.tolist() == [
        0x04030201]


# --- errors ---------------------------------------------------------------------------------------

def test_errors_name_the_culprit(tmp_path):
    good = write_tokens(tmp_path / "good.bin", list(range(100)))
    (tmp_path / "empty.bin").write_bytes(b"")
    (tmp_path / "odd.bin").write_bytes(b"\0\0\0")
    (tmp_path / "nothing").mkdir()
    cases = [
        (Source(str(tmp_path / "missing.bin")), "missing.bin"),
        (Source(str(tmp_path / "none-*.bin")), "none-*.bin"),
        (Source(str(tmp_path / "nothing")), "nothing"),
        (Source(str(tmp_path / "empty.bin")), "empty.bin"),
        (Source(str(tmp_path / "odd.bin"), "uint16"), "odd.bin"),
        (Source([good, str(tmp_path / "good.bin")]), "named twice"),
        (Source([good, str(tmp_path / "good*")]), "good.bin"),
        (Source(good, "int8"), "int8"),
        (Source([]), "no paths"),
    ]
    for source, culprit in cases:
        with pytest.raises(DatasetError, match=culprit.replace("*", r"\*")):
            Dataset(source)


def test_a_symbolic_link_is_left_out_of_a_listing_and_refused_by_name(tmp_path):
    directory = tmp_path / "d"
    directory.mkdir()
    target = write_tokens(tmp_path / "target.bin", [7, 8, 9])
    write_tokens(directory / "a.bin", [1, 2, 3])
    os.symlink(target, directory / "link.bin")
    assert Dataset(Source(str(directory)), in_order=True).sample(0, 2).tolist() == [1, 2, 3]
    with pytest.raises(DatasetError, match="link.bin"):
        Dataset(Source(str(directory / "link.bin")))


def test_a_source_too_short_for_one_sample_is_an_error_naming_it(tmp_path):
    short = write_tokens(tmp_path / "short.bin", list(range(8)))
    dataset = Dataset([Source(write_tokens(tmp_path / "long.bin", list(range(100)))),
                       Source(short)])
    assert dataset.samples_per_epoch(1, 7) == 1
    with pytest.raises(DatasetError, match="source 1.*short.bin"):
        dataset.samples_per_epoch(1, 8)


def test_a_blend_weight_under_one_ten_thousandth_is_an_error(tmp_path):
    path = write_tokens(tmp_path / "t.bin", list(range(100)))
    with pytest.raises(DatasetError, match="source 1"):
        Dataset([Source(path, weight=1), Source(path, weight=1e-5)])


# --- the command line -----------------------------------------------------------------------------

def test_the_command_line_prints_the_batches(tmp_path):
    first = write_tokens(tmp_path / "a.bin", [(v * 3) % 256 for v in range(300)])
    second = write_tokens(tmp_path / "b.bin", [(v * 5) % 256 for v in range(300)])
    done = subprocess.run(
        [sys.executable, os.path.join(HERE, "token_dataset_reference.py"), "--data", first,
         "--data", second, "--weights", "3,1", "--seed", "-2", "--batch", "3", "--sequence", "4",
         "--steps", "5:7"], capture_output=True, text=True, check=True)
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    dataset = Dataset([Source(first, weight=3), Source(second, weight=1)], seed=-2)
    assert [line["step"] for line in lines] == [5, 6, 7]
    for line in lines:
        x, y = dataset.batch(line["step"], 3, 4)
        assert line["x"] == x.tolist() and line["y"] == y.tolist()
    failed = subprocess.run(
        [sys.executable, os.path.join(HERE, "token_dataset_reference.py"), "--data",
         str(tmp_path / "absent.bin"), "--batch", "1", "--sequence", "4", "--steps", "0"],
        capture_output=True, text=True)
    assert failed.returncode == 2 and "absent.bin" in failed.stderr
