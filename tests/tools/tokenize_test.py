"""Tests of scripts/tokenize, the corpus tokenizer: byte tokens with end-of-text separation, a
hand-made GPT-2 byte-level BPE (vocab.json + merges.txt written here), GPT-2's pre-tokenizer,
format selection and overflow refusal, the validation split, directory order, bad arguments, and
the PyTorch reference's loader (tests/oracle/data.py) reading the output.

    /usr/bin/python3 -m pytest -q tests/tools/tokenize_test.py
    /usr/bin/python3 tests/tools/tokenize_test.py"""

import contextlib
import importlib.machinery
import importlib.util
import io
import json
import os
import subprocess
import tempfile
import unittest

import numpy

SOURCE_DIRECTORY = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(SOURCE_DIRECTORY, "scripts", "tokenize")


def load_module(name, path):
    loader = importlib.machinery.SourceFileLoader(name, path)
    spec = importlib.util.spec_from_loader(name, loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


tokenize = load_module("tokenize_script", SCRIPT)


def gpt2_byte_characters():
    """GPT-2's byte -> character map, written out independently of the script's."""
    kept = [b for b in range(256) if 33 <= b <= 126 or 161 <= b <= 172 or 174 <= b <= 255]
    moved = [b for b in range(256) if b not in kept]
    table = {b: chr(b) for b in kept}
    table.update({b: chr(256 + n) for n, b in enumerate(moved)})
    return table


BYTE = gpt2_byte_characters()
# The hand-made BPE: ids 0..255 are the bytes (token BYTE[b] has id b), then these merges in
# priority order, each adding the merged token with the next id, then <|endoftext|>.
MERGES = ["Ġ t", "h e", "Ġt he", "1 2", "Ã ©", "c a", "ca f", "caf Ã©", "! !", "Ġ Ġ"]
SPACE_T, HE, SPACE_THE, TWELVE, E_ACUTE, CA, CAF, CAFE, BANGS, TWO_SPACES = range(256, 266)
END_OF_TEXT = 266


def write_bpe(directory, merges=MERGES, extra=None):
    vocabulary = {BYTE[b]: b for b in range(256)}
    for merge in merges:
        vocabulary[merge.replace(" ", "")] = len(vocabulary)
    vocabulary["<|endoftext|>"] = len(vocabulary)
    vocabulary.update(extra or {})
    vocabulary_path = os.path.join(directory, "vocab.json")
    merges_path = os.path.join(directory, "merges.txt")
    with open(vocabulary_path, "w", encoding="utf-8") as file:
        json.dump(vocabulary, file, ensure_ascii=False)
    with open(merges_path, "w", encoding="utf-8") as file:
        file.write("#version: 0.2\n" + "\n".join(merges) + "\n")
    return vocabulary_path, merges_path


def run_tokenize(*arguments):
    """Runs the command in this process: (exit status, stderr)."""
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr):
        try:
            status = tokenize.main([str(argument) for argument in arguments])
        except SystemExit as exit:  # argparse's usage errors
            status = exit.code
    return status, stderr.getvalue()


class TokenizeTest(unittest.TestCase):

    def setUp(self):
        self.temporary = tempfile.TemporaryDirectory()
        self.directory = self.temporary.name

    def tearDown(self):
        self.temporary.cleanup()

    def path(self, *parts):
        return os.path.join(self.directory, *parts)

    def write(self, relative, text):
        path = self.path(relative)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as file:
            file.write(text.encode("utf-8") if isinstance(text, str) else text)
        return path

    def read(self, path, dtype="<u2"):
        return numpy.fromfile(path, dtype=dtype).tolist()

    def tokenize_ok(self, *arguments):
        status, stderr = run_tokenize(*arguments)
        self.assertEqual(status, 0, stderr)
        return stderr

    def tokenize_fails(self, status, message, *arguments):
        actual, stderr = run_tokenize(*arguments)
        self.assertEqual(actual, status, stderr)
        self.assertIn(message, stderr)

    # Byte tokens.

    def test_bytes_round_trip_with_end_of_text_after_each_document(self):
        first = self.write("a.txt", "héllo\n")
        second = self.write("b.txt", "wörld")
        empty = self.write("c.txt", "")
        output = self.path("out.bin")
        stderr = self.tokenize_ok(first, empty, second, "--output", output)
        tokens = self.read(output)
        self.assertEqual(tokens,
                         list("héllo\n".encode()) + [256] + list("wörld".encode()) + [256])
        pieces, current = [], []
        for token in tokens:
            if token == 256:
                pieces.append(bytes(current).decode("utf-8"))
                current = []
            else:
                current.append(token)
        self.assertEqual(pieces, ["héllo\n", "wörld"])
        self.assertIn("2 documents", stderr)
        self.assertIn("loom-gpt --vocab 257", stderr)
        self.assertIn("--data-format uint16", stderr)

    def test_bytes_format_without_end_of_text(self):
        source = self.write("a.txt", "abc")
        output = self.path("out.bin")
        stderr = self.tokenize_ok(source, "--output", output, "--format", "bytes", "--no-eot")
        with open(output, "rb") as file:
            self.assertEqual(file.read(), b"abc")
        self.assertIn("loom-gpt --vocab 256", stderr)

    def test_documents_per_line(self):
        source = self.write("lines.txt", "one\r\n\n   \ntwo\nthree")
        output = self.path("out.bin")
        self.tokenize_ok(source, "--output", output, "--documents-per-line", "--eot-token", 300)
        self.assertEqual(self.read(output), list(b"one") + [300] + list(b"two") + [300] +
                         list(b"three") + [300])

    # GPT-2 byte-level BPE.

    def test_byte_characters_are_gpt2s(self):
        self.assertEqual(tokenize.bytes_to_unicode(), BYTE)
        self.assertEqual(BYTE[ord(" ")], "Ġ")
        self.assertEqual(BYTE[ord("\n")], "Ċ")

    def test_pre_tokenizer_splits_as_gpt2(self):
        cases = {
            "Hello world's  123 foo!!\n\n": ["Hello", " world", "'s", " ", " 123", " foo", "!!",
                                             "\n\n"],
            "it's they'll I'M": ["it", "'s", " they", "'ll", " I", "'", "M"],
            "naïve café ½ ٣ 日本語": ["naïve", " café", " ½", " ٣", " 日本語"],
            "a\u3000b  \tc": ["a", "\u3000", "b", "  ", "\t", "c"],
            # U+001C is whitespace to Python's \s but not to Unicode's White_Space (GPT-2).
            "x\x1cy": ["x", "\x1c", "y"],
            "x2y_z": ["x", "2", "y", "_", "z"],
        }
        for text, words in cases.items():
            self.assertEqual(tokenize.pre_tokenize(text), words, repr(text))

    def test_bpe_ids_of_words(self):
        vocabulary, merges = write_bpe(self.directory)
        tokenizer = tokenize.Gpt2BpeTokenizer(vocabulary, merges)
        cases = {
            "the": [ord("t"), HE],
            " the": [SPACE_THE],
            "café": [CAFE],
            " café": [ord(" "), CAFE],
            "é": [E_ACUTE],
            "12345": [TWELVE, ord("3"), ord("4"), ord("5")],
            "Hello!!  12": [ord("H"), ord("e"), ord("l"), ord("l"), ord("o"), BANGS, ord(" "),
                            ord(" "), TWELVE],
            "it's": [ord("i"), ord("t"), ord("'"), ord("s")],
            "a   b\n": [ord("a"), TWO_SPACES, ord(" "), ord("b"), ord("\n")],
            "日本": list("日本".encode("utf-8")),
            "<|endoftext|>": [ord(c) for c in "<|"] + [ord(c) for c in "endoftext"] +
                             [ord(c) for c in "|>"],
        }
        for text, expected in cases.items():
            ids = [i for chunk in tokenizer.encode(text.encode("utf-8"), "test") for i in chunk]
            self.assertEqual(ids, expected, repr(text))
        self.assertEqual(tokenizer.default_end_of_text, END_OF_TEXT)
        self.assertEqual(tokenizer.vocabulary_size, END_OF_TEXT + 1)

    def test_bpe_command_and_oracle_loader(self):
        vocabulary, merges = write_bpe(self.directory)
        self.write("docs/1.txt", " the café")
        self.write("docs/2.txt", "12!!")
        output = self.path("out.bin")
        stderr = self.tokenize_ok(self.path("docs"), "--output", output, "--vocab", vocabulary,
                                  "--merges", merges)
        expected = [SPACE_THE, ord(" "), CAFE, END_OF_TEXT, TWELVE, BANGS, END_OF_TEXT]
        self.assertEqual(self.read(output), expected)
        self.assertIn(f"loom-gpt --vocab {END_OF_TEXT + 1}", stderr)
        if importlib.util.find_spec("torch") is None:  # the reference's loader needs it
            self.skipTest("torch is not importable: the oracle loader is not checked")
        data = load_module("oracle_data", os.path.join(SOURCE_DIRECTORY, "tests", "oracle",
                                                       "data.py"))
        self.assertEqual(data.load_tokens(output, "uint16").tolist(), expected)

    def test_bpe_refuses_text_that_is_not_utf8(self):
        vocabulary, merges = write_bpe(self.directory)
        source = self.write("bad.txt", b"ok\xff")
        self.tokenize_fails(1, f"{source}: not UTF-8 at byte 2", source, "--output",
                            self.path("out.bin"), "--vocab", vocabulary, "--merges", merges)
        self.assertFalse(os.path.exists(self.path("out.bin")))

    def test_bad_vocabularies(self):
        vocabulary, merges = write_bpe(self.directory, merges=["Ġ t", "x y z"])
        self.tokenize_fails(1, f"{merges}:3: expected two tokens", self.write("a.txt", "a"),
                            "--output", self.path("o.bin"), "--vocab", vocabulary,
                            "--merges", merges)
        vocabulary, merges = write_bpe(self.directory, merges=[])
        with open(merges, "a", encoding="utf-8") as file:
            file.write("q z\n")
        self.tokenize_fails(1, "merges into 'qz', which", self.path("a.txt"), "--output",
                            self.path("o.bin"), "--vocab", vocabulary, "--merges", merges)
        with open(vocabulary, "w", encoding="utf-8") as file:
            json.dump({"a": 0}, file)
        with open(merges, "w", encoding="utf-8") as file:
            file.write("")
        self.tokenize_fails(1, "not a byte-level vocabulary", self.path("a.txt"), "--output",
                            self.path("o.bin"), "--vocab", vocabulary, "--merges", merges)

    # Formats.

    def test_format_selection_and_overflow(self):
        source = self.write("a.txt", "abc")
        output = self.path("out.bin")
        stderr = self.tokenize_ok(source, "--output", output, "--eot-token", 65535)
        self.assertIn("uint16", stderr)
        self.assertEqual(os.path.getsize(output), 8)
        stderr = self.tokenize_ok(source, "--output", output, "--eot-token", 65536, "--force")
        self.assertIn("--data-format uint32", stderr)
        self.assertEqual(self.read(output, "<u4"), [97, 98, 99, 65536])
        self.tokenize_fails(2, "end-of-text token 65536 does not fit --format uint16", source,
                            "--output", output, "--force", "--eot-token", 65536,
                            "--format", "uint16")
        self.tokenize_fails(2, "--format bytes has no room for the end-of-text token 256",
                            source, "--output", output, "--force", "--format", "bytes")
        vocabulary, merges = write_bpe(self.directory, extra={"big": 70000})
        self.tokenize_fails(2, "token 'big' (id 70000", source, "--output", output, "--force",
                            "--vocab", vocabulary, "--merges", merges, "--format", "uint16")
        self.tokenize_fails(2, "--format bytes holds only the byte tokenizer's ids", source,
                            "--output", output, "--force", "--vocab", vocabulary,
                            "--merges", merges, "--format", "bytes", "--no-eot")
        stderr = self.tokenize_ok(source, "--output", output, "--force", "--vocab", vocabulary,
                                  "--merges", merges)
        self.assertIn("loom-gpt --vocab 70001", stderr)
        self.assertEqual(self.read(output, "<u4"), [97, 98, 99, END_OF_TEXT])

    # Validation split and inputs.

    def test_validation_split(self):
        source = self.write("lines.txt", "".join(f"d{index}\n" for index in range(10)))
        output, validation = self.path("train.bin"), self.path("val.bin")
        stderr = self.tokenize_ok(source, "--documents-per-line", "--output", output,
                                  "--split-validation", "0.2", "--validation-output", validation)

        def documents(path):
            return bytes(t for t in self.read(path) if t != 256).decode().split("d")[1:]

        self.assertEqual(documents(validation), ["2", "7"])
        self.assertEqual(documents(output), ["0", "1", "3", "4", "5", "6", "8", "9"])
        self.assertIn("validation: 2 documents", stderr)
        single = self.write("one.txt", "only one")
        self.tokenize_fails(1, "no training documents", single, "--output", self.path("x.bin"),
                            "--split-validation", "0.9", "--validation-output",
                            self.path("y.bin"))
        self.assertFalse(os.path.exists(self.path("x.bin")))
        self.assertEqual(sorted(os.listdir(self.directory)),
                         ["lines.txt", "one.txt", "train.bin", "val.bin"])

    def test_validation_documents_are_round_n_times_fraction(self):
        for count, fraction, expected in ((10, "0.1", 1), (5, "0.1", 1), (4, "0.1", 0),
                                          (1000, "0.01", 10), (7, "1/3", 2)):
            fraction = tokenize.fractions.Fraction(fraction)
            chosen = sum(tokenize.is_validation_document(i, fraction) for i in range(count))
            self.assertEqual(chosen, expected, (count, fraction))

    def test_directory_order(self):
        for name in ("b/2.txt", "a.txt", "b/1.txt", "b/10.txt", "a-z.txt", "c/notes.md"):
            self.write(f"corpus/{name}", name)
        output = self.path("out.bin")
        self.tokenize_ok(self.path("corpus"), "--output", output)
        names = bytes(t if t != 256 else ord(",") for t in self.read(output)).decode()
        self.assertEqual(names, "a-z.txt,a.txt,b/1.txt,b/10.txt,b/2.txt,")

    # Bad arguments and failures.

    def test_bad_arguments(self):
        source = self.write("a.txt", "abc")
        vocabulary, merges = write_bpe(self.directory)
        output = self.path("out.bin")
        self.tokenize_fails(2, "--vocab", source, "--output", output, "--vocab", vocabulary)
        self.tokenize_fails(2, "needs --vocab", source, "--output", output, "--merges", merges)
        for fraction in ("0", "1", "1.5", "-0.1", "abc", "1/0"):
            self.tokenize_fails(2, f"--split-validation {fraction}: expected a fraction",
                                source, "--output", output, "--split-validation", fraction,
                                "--validation-output", self.path("v.bin"))
        self.tokenize_fails(2, "go together", source, "--output", output,
                            "--split-validation", "0.1")
        self.tokenize_fails(2, "is --output too", source, "--output", output,
                            "--split-validation", "0.1", "--validation-output", output)
        self.tokenize_fails(2, "--eot-token -1", source, "--output", output, "--eot-token", -1)
        self.tokenize_fails(2, "not allowed with argument", source, "--output", output,
                            "--eot-token", 3, "--no-eot")
        self.tokenize_fails(2, "required", source)
        self.tokenize_fails(1, "cannot read the input missing.txt: no such file", "missing.txt",
                            "--output", output)
        os.makedirs(self.path("empty"))
        self.tokenize_fails(1, "a directory without *.txt files", self.path("empty"), "--output",
                            output)
        self.tokenize_fails(1, "does not exist", source, "--output", self.path("no", "o.bin"))
        self.tokenize_fails(1, "cannot read the vocabulary", source, "--output", output,
                            "--vocab", self.path("none.json"), "--merges", merges)
        self.tokenize_ok(source, "--output", output)
        self.tokenize_fails(1, f"{output} exists: pass --force", source, "--output", output)
        self.tokenize_fails(1, "inputs hold 0 non-empty documents",
                            self.write("empty.txt", ""), "--output", output, "--force")
        without_end = self.path("noend.json")
        with open(vocabulary, encoding="utf-8") as file:
            entries = json.load(file)
        del entries["<|endoftext|>"]
        with open(without_end, "w", encoding="utf-8") as file:
            json.dump(entries, file)
        self.tokenize_fails(2, "has no '<|endoftext|>' token", source, "--output", output,
                            "--force", "--vocab", without_end, "--merges", merges)

    def test_progress_lines(self):
        source = self.write("lines.txt", "a\nb\n")
        stderr = self.tokenize_ok(source, "--documents-per-line", "--output",
                                  self.path("o.bin"), "--progress-interval", 0)
        self.assertIn("tokenize: 100.0% of 4 bytes read, 2 documents, 4 tokens", stderr)

    def test_executable_and_exit_statuses(self):
        source = self.write("a.txt", "abc")
        done = subprocess.run([SCRIPT, source, "--output", self.path("o.bin")],
                              capture_output=True, text=True, timeout=60)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertIn("vocabulary 257 (end-of-text 256)", done.stderr)
        usage = subprocess.run([SCRIPT, source], capture_output=True, text=True, timeout=60)
        self.assertEqual(usage.returncode, 2)
        self.assertIn("usage: tokenize", usage.stderr)


if __name__ == "__main__":
    unittest.main()
