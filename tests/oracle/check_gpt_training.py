#!/usr/bin/python3
"""Oracle test: Loom trains a model as PyTorch does (tests/oracle/README.md).

In a temporary directory:
  1. initial weights: `loom-gpt --write-init` (GPT) or `reference.py --write-init` (MLP);
  2. the job: `loom-gpt --emit` with the parallel layout asked for (GPT), or the MLP job
     written here (data parallel over --dp devices);
  3. Loom:    loomctl run JOB --devices cpu:N (or cuda:0,..) --steps S --init INIT --output json
              --save-dir DIR
  4. PyTorch: reference.py --model M --init INIT --data DATA --steps S --output ref.json
              --save-final ref.safetensors [--max-norm X]
     The GPT jobs read DATA as loom-gpt emits it, a token_dataset (docs/DATA.md: shuffled each
     epoch with --data-seed, or --data-in-order; documents end at --eot-token), and reference.py
     reads the same batches through tests/data/token_dataset_reference.py; the MLP job reads DATA
     with token_file, in order (data.py).
  5. checks: every step's loss within relative --loss-tolerance (1e-4), every final parameter
     within --weight-tolerance (1e-3) of its scale: max|loom - torch| <= tol * max|torch|.
     With --eval-every K --eval-data PATH (gpt, moe-gpt: loom-gpt's Job.evaluation), exactly
     the steps t + 1 with t % K == 0 carry a "validation_loss", each within --loss-tolerance of
     reference.py's (held-out batch t // K before step t's update; the MoE GPT's cross-entropy).

Exit status 0 when everything matches, 1 on a mismatch (with a table of the differences), 2
when a step could not run (the failing command and its output are printed).

  check_gpt_training.py --loom-gpt build/bin/loom-gpt --loomctl build/bin/loomctl --dp 2 --tp 2
"""

import argparse
import glob
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REFERENCE = os.path.join(HERE, "reference.py")
DEFAULT_DATA = "/usr/share/common-licenses/GPL-3"


class StepFailed(Exception):
    pass


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=("gpt", "moe-gpt", "mlp"), default="gpt")
    ap.add_argument("--loom-gpt", help="the loom-gpt binary (needed for --model gpt)")
    ap.add_argument("--loomctl", required=True, help="the loomctl binary")
    ap.add_argument("--data", default=DEFAULT_DATA,
                    help="gpt / moe-gpt: a token file, directory or pattern (one source); mlp: "
                         "a token file")
    ap.add_argument("--data-seed", type=int, default=0,
                    help="gpt / moe-gpt: the seed of the dataset's per-epoch shuffles (loom-gpt "
                         "and reference.py --data-seed)")
    ap.add_argument("--data-in-order", action="store_true",
                    help="gpt / moe-gpt: documents and samples in file order, not shuffled")
    ap.add_argument("--eot-token", type=int, default=None,
                    help="gpt / moe-gpt: the end-of-text token that ends a document")
    ap.add_argument("--eval-every", type=int, default=0, metavar="K",
                    help="gpt / moe-gpt: evaluate on --eval-data every K steps (loom-gpt and "
                         "reference.py --eval-every; 0: no evaluation)")
    ap.add_argument("--eval-data", action="append", metavar="PATH",
                    help="gpt / moe-gpt: the held-out token data (a file, directory or pattern; "
                         "repeat for an equal blend), read with the training data's flags")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--dp", type=int, default=1)
    ap.add_argument("--tp", type=int, default=1)
    ap.add_argument("--pp", type=int, default=1)
    ap.add_argument("--micro-batches", type=int, default=1)
    ap.add_argument("--schedule", choices=("1f1b", "gpipe", "zero-bubble", "zb-h2", "interleaved", "zb-v"),
                    default="1f1b")
    ap.add_argument("--virtual-stages", type=int, default=1,
                    help="gpt / moe-gpt: loom-gpt's stages per device group (--schedule "
                         "interleaved)")
    ap.add_argument("--zero-stage", type=int, choices=(0, 1, 2, 3), default=0,
                    help="gpt / moe-gpt: loom-gpt's ZeRO stage (variables and optimizer states "
                         "split over the data-parallel ranks; the reference is replicated)")
    ap.add_argument("--recompute", choices=("none", "selective", "full"), default="none",
                    help="gpt / moe-gpt: loom-gpt's activation recomputation (the reference "
                         "keeps every activation: the losses must not change)")
    ap.add_argument("--max-grad-norm", type=float, default=None)
    ap.add_argument("--ep", type=int, default=1,
                    help="moe-gpt: expert-parallel degree (divides --dp: experts split over "
                         "groups of --ep data-parallel ranks)")
    ap.add_argument("--matmul-data-type", choices=("float32", "bfloat16"), default="float32",
                    help="gpt / moe-gpt: mixed precision, every matmul in bfloat16 with float32 "
                         "accumulation (loom-gpt --matmul-data-type, reference.py --matmul-dtype)")
    ap.add_argument("--contrast-float32", action="store_true",
                    help="with --matmul-data-type bfloat16: also train the float32 reference "
                         "and require Loom's losses to be nearer the bfloat16 reference than the "
                         "float32 one (median over steps): the loss check then could not pass "
                         "with the casts missing")
    ap.add_argument("--device-type", choices=("cpu", "cuda"), default="cpu",
                    help="gpt / moe-gpt: where Loom trains: cpu:N, or cuda:0..N-1 (token batches "
                         "read on the GPUs' hosts; the PyTorch reference runs on the CPU)")
    ap.add_argument("--lr-warmup", type=int, default=0,
                    help="loom-gpt and reference.py: steps of linear learning-rate warmup")
    ap.add_argument("--lr-decay", choices=("constant", "linear", "cosine"), default="constant")
    ap.add_argument("--lr-decay-steps", type=int, default=0)
    ap.add_argument("--min-lr", type=float, default=0.0)
    ap.add_argument("--weight-decay-on", choices=("all", "matrices"), default="all",
                    help="matrices: a parameter group without weight decay for biases, LayerNorm "
                         "weights and embeddings (AdamW with two groups in PyTorch)")
    ap.add_argument("--no-decay-lr-scale", type=float, default=1.0)
    ap.add_argument("--save-every", type=int, default=0,
                    help="loomctl run --save-every K: Loom trains in segments of K steps, each "
                         "resumed from the previous one's checkpoint (optimizer state and step); "
                         "PyTorch trains straight through")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--loss-tolerance", type=float, default=1e-4)
    ap.add_argument("--weight-tolerance", type=float, default=1e-3,
                    help="relative to each parameter's max |torch| (default 1e-3)")
    ap.add_argument("--absolute-tolerance", type=float, default=2.5e-4,
                    help="added to the weight tolerance (default 2.5e-4 = lr / 4): AdamW's "
                         "update lr * g / (|g| + eps) of an element whose gradient is near eps "
                         "(1e-8) turns the gradient's last-bit rounding into differences of a "
                         "fraction of lr, in any two correct implementations (see the README)")
    ap.add_argument("--timeout", type=float, default=900, help="seconds per command")
    ap.add_argument("--keep", metavar="DIR", help="work in DIR and keep it (default: a temp dir)")
    args = ap.parse_args(argv)
    if args.model != "mlp" and not args.loom_gpt:
        ap.error(f"--model {args.model} needs --loom-gpt")
    if args.model == "mlp" and (args.tp > 1 or args.pp > 1 or args.micro_batches > 1):
        ap.error("the MLP job here is data parallel only")
    if args.device_type != "cpu" and args.model == "mlp":
        ap.error("--device-type cuda is for the gpt and moe-gpt models")
    if args.contrast_float32 and args.matmul_data_type != "bfloat16":
        ap.error("--contrast-float32 needs --matmul-data-type bfloat16")
    if args.model == "mlp" and args.matmul_data_type != "float32":
        ap.error("--matmul-data-type bfloat16 is for the gpt and moe-gpt models")
    if args.model == "mlp" and (args.data_seed or args.data_in_order or args.eot_token is not None):
        ap.error("--data-seed, --data-in-order and --eot-token are for the gpt and moe-gpt models "
                 "(token_dataset); the MLP job reads a token_file in order")
    if args.eval_every < 0:
        ap.error(f"--eval-every must be >= 0, got {args.eval_every}")
    if (args.eval_every > 0) != bool(args.eval_data):
        ap.error("--eval-every K and --eval-data PATH go together")
    if args.eval_every > 0 and args.model == "mlp":
        ap.error("--eval-every and --eval-data are for the gpt and moe-gpt models")
    return args


def run(command, what, timeout, cwd=None):
    """Runs `command`; returns its stdout. Raises StepFailed with its output on failure."""
    print(f"$ {' '.join(command)}", flush=True)
    start = time.monotonic()
    try:
        done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        raise StepFailed(f"{what}: timed out after {timeout:.0f} s\n"
                         f"--- stdout ---\n{e.stdout or ''}\n--- stderr ---\n{e.stderr or ''}")
    print(f"  ({what}: {time.monotonic() - start:.1f} s, exit {done.returncode})", flush=True)
    if done.returncode != 0:
        raise StepFailed(f"{what} failed with exit status {done.returncode}\n"
                         f"command: {' '.join(command)}\n"
                         f"--- stdout (tail) ---\n{done.stdout[-4000:]}\n"
                         f"--- stderr (tail) ---\n{done.stderr[-4000:]}")
    return done.stdout


def mlp_job_text(args, devices):
    """The MLP of models.py as a data-parallel Loom job (width 64, MLP 128, vocab 256)."""
    V, D, F, B, T = 256, 64, 128, 16, 64
    names = ", ".join(f'"cpu:{i}"' for i in range(devices))
    data = json.dumps(args.data)

    def token_input(name, targets):
        return (f'inputs {{ name: "{name}" shape: [{B}, {T}] data_type: INT32 sbp: "S(0)" '
                f'token_file {{ path: {data} format: "bytes" targets: {str(targets).lower()} }} }}\n')

    def variable(name, shape):
        dims = ", ".join(str(d) for d in shape)
        return (f'variables {{ name: "{name}" shape: [{dims}] sbp: "B" '
                f'initializer {{ constant: 0 }} }}\n')

    def op(name, kind, inputs):
        ins = ", ".join(f'"{i}"' for i in inputs)
        return f'ops {{ name: "{name}" type: "{kind}" inputs: [{ins}] outputs: "{name}" }}\n'

    text = (f'# The oracle MLP (tests/oracle/models.py), written by check_gpt_training.py\n'
            f'name: "mlp" placement {{ devices: [{names}] }} num_steps: {args.steps}\n'
            f'loss: "loss" fetch: "loss"\n'
            f'optimizer {{ adamw {{ learning_rate: 0.001 beta1: 0.9 beta2: 0.95 '
            f'epsilon: 1e-08 weight_decay: 0.1 }} }}\n')
    if args.max_grad_norm is not None:
        text += f"max_grad_norm: {args.max_grad_norm}\n"
    text += token_input("x", False) + token_input("y", True)
    text += (variable("wte", [V, D]) + variable("fc1.weight", [D, F]) + variable("fc1.bias", [F])
             + variable("fc2.weight", [F, V]) + variable("fc2.bias", [V]))
    text += (op("e", "embedding", ["wte", "x"]) + op("h1", "matmul", ["e", "fc1.weight"])
             + op("h1b", "bias_add", ["h1", "fc1.bias"]) + op("g", "gelu", ["h1b"])
             + op("logits0", "matmul", ["g", "fc2.weight"])
             + op("logits", "bias_add", ["logits0", "fc2.bias"])
             + op("token_loss", "sparse_cross_entropy", ["logits", "y"])
             + op("loss", "reduce_mean", ["token_loss"]))
    return text


def step_records(stdout):
    """The objects of `loomctl run --output json` with "step" and "loss", by step (other lines
    are ignored)."""
    records = {}
    for line in stdout.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict) and "step" in record and "loss" in record:
            records[int(record["step"])] = record
    if not records:
        raise StepFailed("loomctl run --output json printed no {\"step\", \"loss\"} objects; "
                         f"its stdout was:\n{stdout[-4000:]}")
    return records


def read_step_losses(stdout):
    """Losses from `loomctl run --output json`, in step order, and the first step's number."""
    records = step_records(stdout)
    return [float(records[k]["loss"]) for k in sorted(records)], min(records)


def read_validation_losses(stdout):
    """{step: validation loss} of the step lines of `loomctl run --output json` that carry one
    ("validation_loss" absent: the step did not evaluate; null: it evaluated a non-finite
    value, read as NaN so that it fails the comparison)."""
    records = step_records(stdout)
    return {step: float("nan") if record["validation_loss"] is None
            else float(record["validation_loss"])
            for step, record in records.items() if "validation_loss" in record}


def compare_validation_losses(loom, ref, every, first_step, steps, tolerance):
    """Exactly the steps t + 1 with t % EVERY == 0 (t from FIRST_STEP over STEPS) carry a
    validation loss, each within relative TOLERANCE of the reference's (REF: {"t + 1": v})."""
    expected = [t + 1 for t in range(first_step, first_step + steps) if t % every == 0]
    problems, rows = [], []
    unexpected = sorted(set(loom) - set(expected))
    if unexpected:
        problems.append(f"steps {unexpected} carry a validation loss, but only the steps "
                        f"t + 1 with t % {every} == 0 evaluate ({expected})")
    for step in expected:
        b = ref.get(str(step))
        if b is None:
            problems.append(f"step {step}: PyTorch has no validation loss (its steps: "
                            f"{sorted(ref, key=int)})")
            continue
        if step not in loom:
            problems.append(f"step {step}: Loom's step line has no validation_loss")
            rows.append(f"  step {step:3d}  loom (none)     torch {b:.7f}  <-- MISSING")
            continue
        a = loom[step]
        rel = abs(a - b) / max(abs(b), 1e-30)
        bad = not (rel <= tolerance)
        rows.append(f"  step {step:3d}  loom {a:.7f}  torch {b:.7f}  rel {rel:.2e}"
                    f"{'  <-- MISMATCH' if bad else ''}")
        if bad:
            problems.append(f"step {step}: validation loss {a!r} vs torch {b!r} (relative "
                            f"{rel:.3e} > {tolerance:g})")
    return problems, rows


def read_step_scalar(stdout, name):
    """A scalar fetch's value per step from `loomctl run --output json` ("scalars")."""
    records = step_records(stdout)
    values = []
    for step in sorted(records):
        scalars = records[step].get("scalars", {})
        if name not in scalars:
            raise StepFailed(f"the step line of step {step} has no scalar '{name}': "
                             f"{json.dumps(records[step])}")
        values.append(float(scalars[name]))
    return values


def read_step_counts(fetch_dir, name, steps):
    """A fetched count per step from `loomctl run --fetch-dir`: the files <name>_step<k>.npy
    hold one piece (micro-batch) each, a step's pieces in order; a step's count is their sum."""
    import numpy
    paths = sorted(glob.glob(os.path.join(fetch_dir, f"{name}_step*.npy")),
                   key=lambda p: int(p.rsplit("_step", 1)[1][:-4]))
    if not paths or len(paths) % steps:
        raise StepFailed(f"loomctl run --fetch-dir {fetch_dir} wrote {len(paths)} '{name}' "
                         f"files for {steps} steps")
    pieces = [float(numpy.load(p).sum()) for p in paths]
    per_step = len(pieces) // steps
    return [sum(pieces[i * per_step:(i + 1) * per_step]) for i in range(steps)]


# A routing choice that flips moves one assignment from one expert to another: each of the two
# experts' first-choice and second-choice fills may then keep or drop one assignment more.
DROPS_PER_FLIP = 4


def compare_dropped(loom, ref, near_ties, source):
    """The counts must be equal, routing being a discrete choice, except by what the step's near
    ties (choices within float32 rounding of a tie, models.routing_near_ties) may flip: at most
    DROPS_PER_FLIP per near tie. `source`: where Loom's came from."""
    problems, rows = [], []
    if len(loom) != len(ref):
        problems.append(f"Loom reported {len(loom)} steps of dropped counts ({source}), "
                        f"PyTorch {len(ref)}")
    for step, (a, b, ties) in enumerate(zip(loom, ref, near_ties)):
        allowed = DROPS_PER_FLIP * ties
        bad = abs(a - b) > allowed
        note = f"  (near ties {ties})" if ties else ""
        rows.append(f"  step {step:3d}  loom {a:8.0f}  torch {b:8d}{note}"
                    f"{'  <-- MISMATCH' if bad else ''}")
        if bad:
            problems.append(f"step {step}: {a:.0f} dropped assignments ({source}) vs torch {b}"
                            f" (near ties allow {allowed})")
    return problems, rows


def find_saved_checkpoint(save_dir):
    """The checkpoint `loomctl run --save-dir` wrote: the only one, the one named "final", or
    the one with the highest step number in its name."""
    files = sorted(glob.glob(os.path.join(save_dir, "**", "*.safetensors"), recursive=True))
    if not files:
        listing = "\n".join(sorted(os.listdir(save_dir))) if os.path.isdir(save_dir) else "(none)"
        raise StepFailed(f"loomctl run --save-dir {save_dir} wrote no .safetensors file; "
                         f"the directory holds:\n{listing}")
    if len(files) == 1:
        return files[0]
    finals = [f for f in files if "final" in os.path.basename(f)]
    if len(finals) == 1:
        return finals[0]

    def step_of(path):
        numbers = re.findall(r"\d+", os.path.basename(path))
        return int(numbers[-1]) if numbers else -1

    return max(files, key=step_of)


def compare_losses(loom, ref, tolerance):
    problems, rows = [], []
    if len(loom) != len(ref):
        problems.append(f"Loom reported {len(loom)} step losses, PyTorch {len(ref)}")
    for step, (a, b) in enumerate(zip(loom, ref)):
        rel = abs(a - b) / max(abs(b), 1e-30)
        bad = not (rel <= tolerance)
        rows.append(f"  step {step:3d}  loom {a:.7f}  torch {b:.7f}  rel {rel:.2e}"
                    f"{'  <-- MISMATCH' if bad else ''}")
        if bad:
            problems.append(f"step {step}: loss {a!r} vs torch {b!r} (relative {rel:.3e} > "
                            f"{tolerance:g})")
    return problems, rows


# Parameters whose gradient is zero in exact arithmetic: an attention key bias adds the same q . b
# to every score of a query, which the softmax over the keys cancels. Their gradient is rounding
# noise, which AdamW turns into steps of up to about lr in either direction, so in two correct
# implementations each walks up to steps x lr from the initial value, independently: they are
# compared with that bound (noise_walk_bound), not with each other's values. Seen: on an AMD EPYC
# the bfloat16 GPT's h.0.attn.k.bias ended 1.07e-2 from PyTorch's after 12 steps (each within
# 6e-3 of 0), over the 1e-2 slack the other parameters get.
ZERO_GRADIENT_PARAMETER = re.compile(r"(^|\.)attn\.k\.bias$")
# The AdamW learning rate of the GPT jobs (loom-gpt's --lr and reference.py's --lr defaults).
GPT_LEARNING_RATE = 1e-3


def compare_weights(loom, ref, tolerance, absolute, noise_walk_bound):
    """Every parameter: max|loom - torch| <= tolerance * max|torch| + absolute, except those of
    ZERO_GRADIENT_PARAMETER: max|loom - torch| <= noise_walk_bound (2 x steps x lr). Rows note, per
    parameter, how many elements exceed the relative part alone (see --absolute-tolerance)."""
    import torch
    problems, rows, strict_failures = [], [], []
    names = [n for n in ref if not n.startswith("optimizer.")]
    missing = [n for n in names if n not in loom]
    if missing:
        problems.append("Loom's checkpoint lacks: " + ", ".join(missing))
    worst = (0.0, None)
    for name in names:
        if name not in loom:
            continue
        a, b = loom[name], ref[name]
        if list(a.shape) != list(b.shape):
            problems.append(f"{name}: Loom shape {list(a.shape)}, torch {list(b.shape)}")
            continue
        a = a.to(torch.float64).reshape(-1)
        b = b.to(torch.float64).reshape(-1)
        if b.numel() == 0:
            continue
        differences = (a - b).abs()
        diff = float(differences.max())
        scale = float(b.abs().max())
        ratio = diff / scale if scale > 0 else (0.0 if diff == 0 else float("inf"))
        if ZERO_GRADIENT_PARAMETER.search(name):
            bad = not (diff <= noise_walk_bound)
            note = f"  zero gradient: within AdamW's noise walk {noise_walk_bound:.3e}"
            if bad:
                index = int(differences.argmax())
                problems.append(f"{name} (zero gradient): max |loom - torch| = {diff:.3e} > "
                                f"2 x steps x lr = {noise_walk_bound:.3e} (worst at flat index "
                                f"{index}: loom {float(a[index]):.7g}, torch {float(b[index]):.7g})")
            rows.append(f"  {name:28s} max|diff| {diff:.3e}  max|torch| {scale:.3e}  "
                        f"ratio {ratio:.2e}{note}{'  <-- MISMATCH' if bad else ''}")
            continue
        if ratio > worst[0]:
            worst = (ratio, name)
        beyond_relative = int((differences > tolerance * scale).sum())
        bad = not (diff <= tolerance * scale + absolute)
        note = ""
        if beyond_relative:
            strict_failures.append(f"{name} ({beyond_relative} of {b.numel()})")
            note = f"  {beyond_relative} element(s) beyond {tolerance:g} x scale"
        if bad:
            index = int(differences.argmax())
            problems.append(f"{name}: max |loom - torch| = {diff:.3e} > {tolerance:g} x "
                            f"max|torch| + {absolute:g} = {tolerance * scale + absolute:.3e} "
                            f"(worst at flat index {index}: loom {float(a[index]):.7g}, "
                            f"torch {float(b[index]):.7g})")
        rows.append(f"  {name:28s} max|diff| {diff:.3e}  max|torch| {scale:.3e}  "
                    f"ratio {ratio:.2e}{note}{'  <-- MISMATCH' if bad else ''}")
    return problems, rows, worst, strict_failures


def training_flags(args):
    """The learning-rate schedule and parameter-group flags, spelled the same for loom-gpt and
    reference.py."""
    return ["--lr-warmup", str(args.lr_warmup), "--lr-decay", args.lr_decay,
            "--lr-decay-steps", str(args.lr_decay_steps), "--min-lr", repr(args.min_lr),
            "--weight-decay-on", args.weight_decay_on,
            "--no-decay-lr-scale", repr(args.no_decay_lr_scale)]


def data_flags(args):
    """The token dataset's flags, spelled the same for loom-gpt and reference.py (gpt, moe-gpt)."""
    flags = ["--data-seed", str(args.data_seed)]
    if args.data_in_order:
        flags.append("--data-in-order")
    if args.eot_token is not None:
        flags += ["--eot-token", str(args.eot_token)]
    return flags


def evaluation_flags(args):
    """The evaluation's flags, spelled the same for loom-gpt and reference.py (gpt, moe-gpt)."""
    if args.eval_every == 0:
        return []
    flags = ["--eval-every", str(args.eval_every)]
    for path in args.eval_data:
        flags += ["--eval-data", path]
    return flags


def describe(args):
    parts = [args.model, f"dp={args.dp}", f"tp={args.tp}", f"pp={args.pp}"]
    if args.model == "moe-gpt":
        parts.append(f"ep={args.ep}")
    if args.micro_batches > 1:
        parts.append(f"micro-batches={args.micro_batches} ({args.schedule})")
    if args.virtual_stages > 1:
        parts.append(f"virtual-stages={args.virtual_stages}")
    if args.max_grad_norm is not None:
        parts.append(f"max-grad-norm={args.max_grad_norm:g}")
    if args.recompute != "none":
        parts.append(f"recompute {args.recompute}")
    if args.zero_stage:
        parts.append(f"ZeRO stage {args.zero_stage}")
    if args.matmul_data_type != "float32":
        parts.append(f"matmuls in {args.matmul_data_type}")
    if args.device_type != "cpu":
        parts.append(f"on {args.device_type}")
    if args.lr_warmup or args.lr_decay != "constant":
        parts.append(f"lr warmup {args.lr_warmup} then {args.lr_decay} to {args.min_lr:g}")
    if args.weight_decay_on != "all":
        parts.append(f"weight decay on {args.weight_decay_on} (no-decay lr x "
                     f"{args.no_decay_lr_scale:g})")
    if args.save_every:
        parts.append(f"resumed every {args.save_every} steps")
    if args.data_in_order:
        parts.append("data in order")
    elif args.data_seed:
        parts.append(f"data seed {args.data_seed}")
    if args.eot_token is not None:
        parts.append(f"documents end at token {args.eot_token}")
    if args.eval_every:
        parts.append(f"evaluated every {args.eval_every} steps on {', '.join(args.eval_data)}")
    return " ".join(parts)


def check(args, work):
    sys.path.insert(0, HERE)
    import safetensors_io

    devices = args.dp * args.tp * args.pp
    init = os.path.join(work, "init.safetensors")
    job_path = os.path.join(work, "job.pbtxt")
    save_dir = os.path.join(work, "loom_save")
    ref_json = os.path.join(work, "ref.json")
    ref_final = os.path.join(work, "ref.safetensors")

    if args.model != "mlp":
        layout = ["--dp", str(args.dp), "--tp", str(args.tp), "--pp", str(args.pp),
                  "--micro-batches", str(args.micro_batches), "--schedule", args.schedule,
                  "--virtual-stages", str(args.virtual_stages),
                  "--recompute", args.recompute, "--zero-stage", str(args.zero_stage), "--data", args.data, "--steps", str(args.steps), "--seed", str(args.seed)]
        if args.max_grad_norm is not None:
            layout += ["--max-grad-norm", repr(args.max_grad_norm)]
        layout += training_flags(args)
        layout += ["--matmul-data-type", args.matmul_data_type, "--device-type", args.device_type]
        layout += data_flags(args) + evaluation_flags(args)
        if args.model == "moe-gpt":
            # The MoE GPT of the expert work: 4 experts, top-2, capacity factor 1.25, aux 0.01,
            # in blocks 1 and 3 (loom-gpt's and reference.py's defaults).
            layout += ["--experts", "4", "--ep", str(args.ep)]
        run([args.loom_gpt, "--write-init", init, "--emit", job_path] + layout,
            "loom-gpt (initial weights and job)", args.timeout)
    else:
        run([sys.executable, REFERENCE, "--model", "mlp", "--write-init", init,
             "--seed", str(args.seed)], "reference.py --write-init", args.timeout)
        with open(job_path, "w") as f:
            f.write(mlp_job_text(args, devices))

    reference = [sys.executable, REFERENCE, "--model", args.model, "--init", init,
                 "--data", args.data, "--steps", str(args.steps), "--output", ref_json,
                 "--save-final", ref_final]
    if args.max_grad_norm is not None:
        reference += ["--max-norm", repr(args.max_grad_norm)]
    if args.model != "mlp":
        reference += ["--matmul-dtype", args.matmul_data_type] + training_flags(args)
        reference += data_flags(args) + evaluation_flags(args)
    run(reference, "PyTorch reference", args.timeout)
    with open(ref_json) as f:
        ref = json.load(f)

    fetch_dir = os.path.join(work, "loom_fetches")
    device_list = (f"cpu:{devices}" if args.device_type == "cpu"
                   else "cuda:" + ",".join(str(i) for i in range(devices)))
    loom_command = [args.loomctl, "run", job_path, "--devices", device_list,
                    "--steps", str(args.steps), "--init", init, "--output", "json",
                    "--save-dir", save_dir]
    if args.model == "moe-gpt":
        loom_command += ["--fetch-dir", fetch_dir]
    if args.save_every > 0:
        loom_command += ["--save-every", str(args.save_every)]
    stdout = run(loom_command, "loomctl run", args.timeout)
    loom_losses, first_step = read_step_losses(stdout)

    problems = []
    if args.model == "moe-gpt":
        drop_problems, drop_rows = compare_dropped(
            read_step_counts(fetch_dir, "moe.dropped", args.steps), ref["dropped"],
            ref["near_ties"], "fetched")
        problems += drop_problems
        print("dropped assignments per step (Loom vs PyTorch):")
        print("\n".join(drop_rows))
        # The step lines report the same counts: the job sums moe.dropped over a step's
        # micro-batches (Job.summed_fetches).
        problems += compare_dropped(read_step_scalar(stdout, "moe.dropped"), ref["dropped"],
                                    ref["near_ties"], "step lines")[0]
    if first_step != 0:
        print(f"note: Loom's steps are numbered from {first_step}")
    loss_problems, loss_rows = compare_losses(loom_losses, ref["losses"], args.loss_tolerance)
    problems += loss_problems
    validation_rows = []
    if args.eval_every > 0:
        validation_problems, validation_rows = compare_validation_losses(
            read_validation_losses(stdout), ref.get("validation_losses", {}), args.eval_every,
            0, args.steps, args.loss_tolerance)
        problems += validation_problems
    if args.contrast_float32:
        problems += contrast_float32(args, reference, work, loom_losses, ref["losses"])

    checkpoint = find_saved_checkpoint(save_dir)
    print(f"Loom's final checkpoint: {checkpoint}")
    loom_final, _ = safetensors_io.load(checkpoint)
    ref_tensors, _ = safetensors_io.load(ref_final)
    weight_problems, weight_rows, worst, strict = compare_weights(
        loom_final, ref_tensors, args.weight_tolerance, args.absolute_tolerance,
        noise_walk_bound=2 * args.steps * GPT_LEARNING_RATE)
    problems += weight_problems

    if args.max_grad_norm is not None:
        clipped = sum(1 for g in ref["grad_norms"] if g > args.max_grad_norm)
        print(f"clipping: {clipped} of {len(ref['grad_norms'])} steps have a gradient norm "
              f"above {args.max_grad_norm:g} (PyTorch's grad_norms)")
        if clipped == 0:
            problems.append(f"--max-grad-norm {args.max_grad_norm:g} never clips: the test "
                            "would not exercise clipping; choose a smaller value")

    print("losses (Loom vs PyTorch):")
    print("\n".join(loss_rows))
    if validation_rows:
        print(f"validation losses every {args.eval_every} steps (Loom vs PyTorch):")
        print("\n".join(validation_rows))
    if problems:
        print("final parameters (max |loom - torch| vs max |torch|):")
        print("\n".join(weight_rows))
    else:
        walks = sum(1 for name in ref_tensors
                    if not name.startswith("optimizer.") and ZERO_GRADIENT_PARAMETER.search(name))
        print(f"final parameters: all {len(weight_rows) - walks} within "
              f"{args.weight_tolerance:g} x their scale + {args.absolute_tolerance:g} (worst "
              f"ratio {worst[0]:.2e}, {worst[1]})" +
              (f"; the {walks} with a zero gradient (attention key biases) within AdamW's noise "
               f"walk of {2 * args.steps * GPT_LEARNING_RATE:g}" if walks else ""))
    if strict:
        print(f"note: beyond {args.weight_tolerance:g} x scale alone (AdamW eps-level "
              f"elements): " + ", ".join(strict))
    return problems


def relative_differences(losses, reference):
    return [abs(a - b) / abs(b) for a, b in zip(losses, reference)]


def contrast_float32(args, reference, work, loom_losses, bfloat16_losses):
    """Trains the float32 reference too; a problem unless Loom's losses are nearer the bfloat16
    reference's than the float32 reference's. Nearness is the median over steps of the relative
    differences, not the largest: a step where a rounding tips is an outlier for every run (the
    bfloat16 reference's own loss among them) and would decide the largest."""
    float32_json = os.path.join(work, "ref_float32.json")
    command = list(reference)
    command[command.index("--matmul-dtype") + 1] = "float32"
    command[command.index("--output") + 1] = float32_json
    command[command.index("--save-final") + 1] = os.path.join(work, "ref_float32.safetensors")
    run(command, "PyTorch reference in float32", args.timeout)
    with open(float32_json) as f:
        float32_losses = json.load(f)["losses"]
    to_bfloat16 = statistics.median(relative_differences(loom_losses, bfloat16_losses))
    to_float32 = statistics.median(relative_differences(loom_losses, float32_losses))
    print(f"contrast: median over steps of Loom's relative loss difference from the bfloat16 "
          f"reference {to_bfloat16:.2e}, from the float32 reference {to_float32:.2e}")
    if not to_bfloat16 < to_float32:
        return [f"Loom's losses are not nearer the bfloat16 reference (median {to_bfloat16:.2e})"
                f" than the float32 reference (median {to_float32:.2e}): the check cannot tell "
                f"the two apart"]
    return []


def main(argv=None):
    args = parse_args(argv)
    print(f"oracle: {describe(args)}, {args.steps} steps", flush=True)
    if args.keep:
        os.makedirs(args.keep, exist_ok=True)
        work, cleanup = args.keep, None
    else:
        cleanup = tempfile.TemporaryDirectory(prefix="loom-oracle-")
        work = cleanup.name
    try:
        problems = check(args, work)
    except StepFailed as e:
        print(f"FAILED ({describe(args)}): {e}", file=sys.stderr)
        return 2
    finally:
        if cleanup is not None:
            cleanup.cleanup()
    if problems:
        print(f"FAILED ({describe(args)}): {len(problems)} mismatch(es):", file=sys.stderr)
        for problem in problems:
            print(f"  {problem}", file=sys.stderr)
        return 1
    print(f"PASSED ({describe(args)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
