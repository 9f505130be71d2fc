#!/usr/bin/python3
"""The token datasets of docs/DATA.md, written from that page alone: the reference the kernel
`token_dataset` (kernels/cpu/data/) and the PyTorch oracle (tests/oracle/reference.py) are
checked against.

It holds the paths of a source (file, directory, pattern), its tokens and documents, the per-epoch
permutations (splitmix64, a Feistel network), the samples of an epoch, and the blend of several
sources by a fixed pattern of 10000 samples. All 64-bit arithmetic is on Python ints masked to
2**64, so it is exact.

    dataset = Dataset([Source("/data/web/shard-*.bin", "uint16", 3),
                       Source("/data/code", "uint16")], end_of_text=50256, seed=0)
    x, y = dataset.batch(step, batch, sequence)        # numpy int64 [batch, sequence] each

Command line (one JSON object per step, {"step": t, "x": [[...]], "y": [[...]]}):

    token_dataset_reference.py --data PATH [--data PATH ...] [--weights 3,1] [--format uint16]
        [--eot-token N] [--in-order] [--seed S] --batch B --sequence T --steps FIRST:LAST
"""

import argparse
import fnmatch
import json
import math
import os
import stat
import sys

import numpy

MASK = (1 << 64) - 1
PATTERN_LENGTH = 10000
# The token formats: numpy's little-endian unsigned type of each.
FORMATS = {"bytes": "<u1", "uint16": "<u2", "uint32": "<u4"}
# A key's purposes (docs/DATA.md): the order of an epoch's documents, of its samples.
DOCUMENT_ORDER = 1
SAMPLE_ORDER = 2


class DatasetError(ValueError):
    """A bad dataset: a path that matches nothing, a file named twice, an empty file, a file that
    is not whole tokens, a source too short for one sample, a bad weight or format."""


# --- the hash and the permutation ---------------------------------------------------------------

def splitmix64(x):
    """SplitMix64's finalizer of x + the golden gamma, modulo 2**64."""
    z = (x + 0x9E3779B97F4A7C15) & MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def hash_values(*values):
    """h = 0; for each v: h = splitmix64(h ^ v). Negative values count as two's complement."""
    h = 0
    for value in values:
        h = splitmix64(h ^ (value & MASK))
    return h


def key(seed, source, epoch, purpose):
    """The key of source `source`'s epoch `epoch` for `purpose` (DOCUMENT_ORDER, SAMPLE_ORDER)."""
    return hash_values(seed, source, epoch, purpose)


def permutation(n, permutation_key, i):
    """perm(n, key, i): where a one-to-one map of 0 ... n-1 onto itself sends i."""
    if n < 1 or not 0 <= i < n:
        raise ValueError(f"permutation: index {i} outside 0 ... {n - 1}")
    if n == 1:
        return 0
    bits = (n - 1).bit_length()  # the least c with 2**c >= n
    half = max(1, (bits + 1) // 2)
    half_mask = (1 << half) - 1

    def feistel(x):
        left, right = x >> half, x & half_mask
        for round_number in range(4):
            left, right = right, left ^ (hash_values(permutation_key, round_number, right)
                                         & half_mask)
        return (left << half) | right

    x = feistel(i)
    while x >= n:
        x = feistel(x)
    return x


# --- blends ---------------------------------------------------------------------------------------

def blend_quotas(weights):
    """The samples of each source in every PATTERN_LENGTH (weights: 0 means 1)."""
    if not weights:
        raise DatasetError("a dataset needs at least one source")
    values = []
    for j, weight in enumerate(weights):
        weight = float(weight)
        if weight == 0.0:
            weight = 1.0
        if not math.isfinite(weight) or weight < 0.0:
            raise DatasetError(f"source {j}: weight {weight!r} is not a finite number > 0")
        values.append(weight)
    total = 0.0
    for weight in values:
        total += weight
    shares = [(weight / total) * PATTERN_LENGTH for weight in values]
    quotas = [math.floor(share) for share in shares]
    left = PATTERN_LENGTH - sum(quotas)
    by_remainder = sorted(range(len(values)), key=lambda j: (-(shares[j] - quotas[j]), j))
    for j in by_remainder[:left]:
        quotas[j] += 1
    for j, quota in enumerate(quotas):
        if quota == 0:
            raise DatasetError(f"source {j}: weight {values[j]!r} is under 1/{PATTERN_LENGTH} of "
                               f"the total {total!r}: it would get no sample")
    return quotas


def blend_pattern(weights):
    """(quotas, pattern): pattern[r] is the source of sample r of every PATTERN_LENGTH."""
    quotas = blend_quotas(weights)
    counts = [0] * len(quotas)
    pattern = []
    for r in range(PATTERN_LENGTH):
        best = max(range(len(quotas)),
                   key=lambda j: (quotas[j] * (r + 1) - counts[j] * PATTERN_LENGTH, -j))
        pattern.append(best)
        counts[best] += 1
    return quotas, pattern


# --- paths ----------------------------------------------------------------------------------------

def _byte_order(names):
    return sorted(names, key=os.fsencode)


def _is_pattern(component):
    return any(character in component for character in "*?[")


def _regular_files_of(directory, names, path):
    """The regular files among `names` of `directory`; a symbolic link is an error."""
    files = []
    for name in names:
        full = os.path.join(directory, name)
        mode = os.lstat(full).st_mode
        # Symbolic links, directories and the like are left out, as Loom's listing does.
        if stat.S_ISREG(mode):
            files.append(full)
    return files


def resolve_path(path):
    """The files `path` names, in order: a file, a directory's regular files whose names do not
    start with '.', or the regular files matching a pattern in the last component."""
    directory, last = os.path.split(path)
    if _is_pattern(last):
        directory = directory or "."
        if not os.path.isdir(directory):
            raise DatasetError(f"{path}: the pattern's directory {directory} is not a directory")
        names = [name for name in os.listdir(directory)
                 if fnmatch.fnmatchcase(name, last)
                 and (not name.startswith(".") or last.startswith("."))]
        files = _regular_files_of(directory, _byte_order(names), path)
        if not files:
            raise DatasetError(f"{path}: no file matches the pattern")
        return files
    if os.path.islink(path):
        raise DatasetError(f"{path}: a symbolic link (refused)")
    if os.path.isdir(path):
        names = [name for name in os.listdir(path) if not name.startswith(".")]
        files = _regular_files_of(path, _byte_order(names), path)
        if not files:
            raise DatasetError(f"{path}: the directory holds no token file")
        return files
    if os.path.isfile(path):
        return [path]
    raise DatasetError(f"{path}: no such file or directory")


def read_tokens(path, token_format):
    """A token file's tokens as numpy int64."""
    with open(path, "rb") as file:
        blob = file.read()
    width = numpy.dtype(FORMATS[token_format]).itemsize
    if not blob:
        raise DatasetError(f"{path}: the file is empty")
    if len(blob) % width:
        raise DatasetError(f"{path}: {len(blob)} bytes are not a whole number of {token_format} "
                           f"tokens ({width} bytes each)")
    return numpy.frombuffer(blob, dtype=FORMATS[token_format]).astype(numpy.int64)


# --- sources and datasets -------------------------------------------------------------------------

class Source:
    """One dataset of a blend: the token files of `paths` (a path or a list), their format, and
    the weight in the blend (0 means 1)."""

    def __init__(self, paths, format="bytes", weight=0.0):  # noqa: A002 (the proto's name)
        self.paths = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
        self.paths = [os.fspath(path) for path in self.paths]
        self.format = format or "bytes"
        self.weight = weight

    def __repr__(self):
        return f"Source({self.paths!r}, {self.format!r}, {self.weight!r})"


class OpenSource:
    """A source read: its files, tokens, and documents (start, end) in token offsets."""

    def __init__(self, index, source, end_of_text):
        self.index = index
        self.source = source
        if source.format not in FORMATS:
            raise DatasetError(f"source {index}: unknown format {source.format!r} (expected one "
                               f"of {', '.join(FORMATS)})")
        if not source.paths:
            raise DatasetError(f"source {index}: no paths")
        self.files = []
        seen = {}
        for path in source.paths:
            for file in resolve_path(path):
                identity = os.path.realpath(file)
                if identity in seen:
                    raise DatasetError(f"source {index}: {file} is named twice (by "
                                       f"{seen[identity]} and by {path})")
                seen[identity] = path
                self.files.append(file)
        pieces, documents, offset = [], [], 0
        for file in self.files:
            tokens = read_tokens(file, source.format)
            pieces.append(tokens)
            ends = [] if end_of_text is None else (numpy.nonzero(tokens == end_of_text)[0] + 1)
            start = 0
            for end in list(ends) + [len(tokens)]:
                if end > start:
                    documents.append((offset + start, offset + int(end)))
                start = int(end)
            offset += len(tokens)
        self.tokens = numpy.concatenate(pieces)
        self.documents = documents
        self._epoch = None  # (epoch, its tokens) of the last epoch read

    def describe(self):
        return f"source {self.index} ({', '.join(self.source.paths)})"


class Dataset:
    """The samples of docs/DATA.md over `sources` (a Source or a list of them). Opens the sources
    when constructed (DatasetError naming the culprit)."""

    def __init__(self, sources, end_of_text=None, in_order=False, seed=0):
        if isinstance(sources, Source):
            sources = [sources]
        if end_of_text is not None and end_of_text < 0:
            raise DatasetError(f"end_of_text {end_of_text} is negative")
        self.end_of_text = end_of_text
        self.in_order = bool(in_order)
        self.seed = seed & MASK
        self.quotas, self.pattern = blend_pattern([source.weight for source in sources])
        self.sources = [OpenSource(j, source, end_of_text) for j, source in enumerate(sources)]
        # before[r]: how often pattern[r] occurs in pattern[0 ... r-1].
        counts = [0] * len(self.sources)
        self.before = []
        for j in self.pattern:
            self.before.append(counts[j])
            counts[j] += 1

    @classmethod
    def open(cls, sources, **options):
        return cls(sources, **options)

    # The structure of an epoch.

    def document_count(self, j):
        return len(self.sources[j].documents)

    def token_count(self, j):
        return len(self.sources[j].tokens)

    def samples_per_epoch(self, j, sequence):
        """S = floor((N - 1) / T); DatasetError when the source holds no sample."""
        count = (self.token_count(j) - 1) // sequence
        if count < 1:
            raise DatasetError(f"{self.sources[j].describe()}: {self.token_count(j)} tokens hold "
                               f"no sample of {sequence} + 1 tokens")
        return count

    def epoch_document_order(self, j, epoch):
        """The indices of source j's documents in epoch `epoch`'s order."""
        count = self.document_count(j)
        if self.in_order:
            return list(range(count))
        document_key = key(self.seed, j, epoch, DOCUMENT_ORDER)
        return [permutation(count, document_key, q) for q in range(count)]

    def epoch_tokens(self, j, epoch):
        """Source j's N tokens of epoch `epoch`: its documents in the epoch's order."""
        source = self.sources[j]
        if source._epoch is None or source._epoch[0] != epoch:
            order = self.epoch_document_order(j, epoch)
            tokens = numpy.concatenate([source.tokens[slice(*source.documents[d])] for d in order])
            source._epoch = (epoch, tokens)
        return source._epoch[1]

    def epoch_sample(self, j, epoch, k, sequence):
        """The sample index s at position k of source j's epoch `epoch`."""
        count = self.samples_per_epoch(j, sequence)
        if self.in_order:
            return k
        return permutation(count, key(self.seed, j, epoch, SAMPLE_ORDER), k)

    # Samples.

    def source_of(self, g):
        """j: the source of global sample g."""
        return self.pattern[g % PATTERN_LENGTH]

    def source_sample(self, g):
        """(j, k): global sample g is source j's k-th sample."""
        if g < 0:
            raise ValueError(f"global sample {g} is negative")
        r = g % PATTERN_LENGTH
        j = self.pattern[r]
        return j, (g // PATTERN_LENGTH) * self.quotas[j] + self.before[r]

    def source_tokens(self, j, k, sequence):
        """Source j's k-th sample: sequence + 1 tokens (numpy int64)."""
        count = self.samples_per_epoch(j, sequence)
        epoch, position = divmod(k, count)
        s = self.epoch_sample(j, epoch, position, sequence)
        return self.epoch_tokens(j, epoch)[s * sequence:s * sequence + sequence + 1].copy()

    def sample(self, g, sequence):
        """Global sample g: sequence + 1 tokens (numpy int64); x is the first T, y the last T."""
        if sequence < 1:
            raise ValueError(f"sequence {sequence} must be >= 1")
        j, k = self.source_sample(g)
        return self.source_tokens(j, k, sequence)

    def batch(self, step, batch, sequence):
        """(x, y) of step `step`: numpy int64 [batch, sequence] each, rows g = step*batch + i."""
        rows = numpy.stack([self.sample(step * batch + i, sequence) for i in range(batch)])
        return rows[:, :-1].copy(), rows[:, 1:].copy()

    def largest_token(self):
        return max(int(source.tokens.max()) for source in self.sources)


# --- command line ---------------------------------------------------------------------------------

def parse_arguments(argv=None):
    parser = argparse.ArgumentParser(
        description="Prints the batches of docs/DATA.md's token dataset, one JSON line per step.")
    parser.add_argument("--data", action="append", required=True, metavar="PATH",
                        help="a source: a token file, directory or pattern (repeat for a blend)")
    parser.add_argument("--weights", help="the sources' weights, e.g. 3,1 (default: equal)")
    parser.add_argument("--format", choices=sorted(FORMATS), default="bytes",
                        help="the token format of every source (default bytes)")
    parser.add_argument("--eot-token", type=int, default=None, help="the end-of-text token")
    parser.add_argument("--in-order", action="store_true", help="documents and samples in order")
    parser.add_argument("--seed", type=int, default=0, help="Input.seed (default 0)")
    parser.add_argument("--batch", type=int, required=True, help="global batch B")
    parser.add_argument("--sequence", type=int, required=True, help="sequence length T")
    parser.add_argument("--steps", required=True, metavar="FIRST:LAST",
                        help="the steps to print, FIRST to LAST inclusive (or one step)")
    arguments = parser.parse_args(argv)
    weights = [0.0] * len(arguments.data)
    if arguments.weights:
        try:
            weights = [float(value) for value in arguments.weights.split(",")]
        except ValueError:
            parser.error(f"--weights {arguments.weights!r}: not a list of numbers")
        if len(weights) != len(arguments.data):
            parser.error(f"--weights has {len(weights)} values for {len(arguments.data)} --data")
    arguments.weight_values = weights
    first, _, last = arguments.steps.partition(":")
    try:
        arguments.first_step = int(first)
        arguments.last_step = int(last) if last else arguments.first_step
    except ValueError:
        parser.error(f"--steps {arguments.steps!r}: expected FIRST:LAST")
    if arguments.first_step < 0 or arguments.last_step < arguments.first_step:
        parser.error(f"--steps {arguments.steps!r}: expected 0 <= FIRST <= LAST")
    if arguments.batch < 1 or arguments.sequence < 1:
        parser.error("--batch and --sequence must be >= 1")
    return arguments


def main(argv=None):
    arguments = parse_arguments(argv)
    try:
        dataset = Dataset([Source(path, arguments.format, weight)
                           for path, weight in zip(arguments.data, arguments.weight_values)],
                          end_of_text=arguments.eot_token, in_order=arguments.in_order,
                          seed=arguments.seed)
        for step in range(arguments.first_step, arguments.last_step + 1):
            x, y = dataset.batch(step, arguments.batch, arguments.sequence)
            print(json.dumps({"step": step, "x": x.tolist(), "y": y.tolist()}), flush=True)
    except (DatasetError, OSError) as error:
        print(f"token_dataset_reference.py: error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
