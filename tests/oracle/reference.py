#!/usr/bin/python3
"""Plain-PyTorch reference trainer for Loom's oracle tests.

Modes:
  train (default)  reference.py --model gpt --init INIT.safetensors --data PATH
                     --steps 20 --output losses.json [--save-final F] ...
  write init       reference.py --model gpt --write-init INIT.safetensors --seed 0
  timing           reference.py --model gpt --steps-timing 20 [--data FILE]

Batches: the gpt and moe-gpt models read docs/DATA.md's token dataset, as loom-gpt's jobs do
(token_dataset: shuffled per epoch with --data-seed, or --data-in-order; tests/data/
token_dataset_reference.py); the mlp model reads the legacy in-order formula of data.py, as its
hand-written token_file job does.

Evaluation (gpt, moe-gpt; loom-gpt --eval-every K --eval-data PATH): before the update of every
step t (0-based, counted from --start-step / the resumed step) with t % K == 0, the
cross-entropy of batch t // K of the held-out dataset (--eval-data, read as --data is) under
torch.no_grad(): the GPT's loss, the MoE GPT's without the auxiliary loss. The output's
"validation_losses" maps step t + 1 (1-based, as Loom's step lines) to it.

See tests/oracle/README.md for the exact semantics.
"""

import argparse
import json
import math
import os
import sys
import time


def build_parser():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=("gpt", "moe-gpt", "mlp"), required=True)
    # modes / files
    ap.add_argument("--init", help="initial parameters (safetensors, F32, by name)")
    ap.add_argument("--write-init", metavar="PATH",
                    help="write seeded initial parameters to PATH and exit")
    ap.add_argument("--seed", type=int, default=0, help="seed for --write-init (default 0)")
    ap.add_argument("--data", action="append", metavar="PATH",
                    help="gpt / moe-gpt: a source of the token dataset (a token file, directory "
                         "or pattern; repeat for a blend); mlp: the token file")
    ap.add_argument("--data-format", choices=("bytes", "uint16", "uint32"), default="bytes")
    ap.add_argument("--data-weights", metavar="W,W,...",
                    help="gpt / moe-gpt: the blend's weights, one per --data (default: equal)")
    ap.add_argument("--eot-token", type=int, default=None,
                    help="gpt / moe-gpt: the end-of-text token that ends a document")
    ap.add_argument("--data-in-order", action="store_true",
                    help="gpt / moe-gpt: documents and samples in file order, not shuffled")
    ap.add_argument("--data-seed", type=int, default=None,
                    help="gpt / moe-gpt: the seed of the per-epoch shuffles (Input.seed; "
                         "default 0)")
    ap.add_argument("--eval-every", type=int, default=0, metavar="K",
                    help="gpt / moe-gpt: before the update of every step t with t %% K == 0, "
                         "the cross-entropy of held-out batch t // K (0: no evaluation)")
    ap.add_argument("--eval-data", action="append", metavar="PATH",
                    help="gpt / moe-gpt: a source of the held-out dataset for --eval-every (as "
                         "--data; repeat for an equal blend)")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--output", help="JSON output: losses, grad_norms, validation_losses, "
                                     "config")
    ap.add_argument("--save-final", metavar="PATH",
                    help="write final parameters + optimizer state (safetensors)")
    ap.add_argument("--save-grads", metavar="PATH",
                    help="write the first step's gradients (before clipping) as grad.<name>")
    ap.add_argument("--resume", action="store_true",
                    help="--init also holds optimizer.* state (as written by --save-final); "
                         "load it and continue from step optimizer.step")
    ap.add_argument("--start-step", type=int, default=None,
                    help="index t of the first batch (default 0, or optimizer.step with --resume)")
    ap.add_argument("--steps-timing", type=int, metavar="N", default=None,
                    help="timing mode: median wall time of N training steps after warm-up, "
                         "plus torch's 1024^3 float32 GEMM GFLOP/s")
    ap.add_argument("--warmup", type=int, default=5, help="warm-up steps for --steps-timing")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("-v", "--verbose", action="store_true", help="print each step's loss")
    # model configuration (defaults: the "tiny" GPT / the small MLP)
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--context", type=int, default=64, help="sequence length T")
    ap.add_argument("--width", type=int, default=None, help="gpt 128, mlp 64")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--mlp-width", type=int, default=None, help="gpt 512, mlp 128")
    ap.add_argument("--ln-eps", type=float, default=1e-5)
    ap.add_argument("--matmul-dtype", choices=("float32", "bfloat16"), default="float32",
                    help="gpt / moe-gpt: bfloat16 runs every x @ W in bfloat16 with float32 "
                         "accumulation (Loom's matmul_data_type)")
    ap.add_argument("--batch", type=int, default=16, help="global batch B")
    # mixture of experts (--model moe-gpt)
    ap.add_argument("--experts", type=int, default=4)
    ap.add_argument("--moe-layers", default="1,3", help="blocks with an MoE MLP (0-based)")
    ap.add_argument("--top-k", type=int, default=2)
    ap.add_argument("--capacity-factor", type=float, default=1.25)
    ap.add_argument("--aux-loss-coefficient", type=float, default=0.01)
    # optimizer
    ap.add_argument("--optimizer", choices=("adamw", "sgd"), default="adamw")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--beta1", type=float, default=0.9)
    ap.add_argument("--beta2", type=float, default=0.95)
    ap.add_argument("--eps", type=float, default=1e-8)
    ap.add_argument("--weight-decay", type=float, default=None,
                    help="default 0.1 for adamw (decoupled), 0 for sgd (L2, added to grad)")
    ap.add_argument("--weight-decay-on", choices=("all", "matrices"), default="all",
                    help="matrices: biases, LayerNorm weights and the embeddings in a parameter "
                         "group without weight decay (loom-gpt --weight-decay-on)")
    ap.add_argument("--no-decay-lr-scale", type=float, default=1.0,
                    help="with --weight-decay-on matrices: that group's lr is lr times this")
    ap.add_argument("--lr-warmup", type=int, default=0, help="steps of linear warmup")
    ap.add_argument("--lr-decay", choices=("constant", "linear", "cosine"), default="constant")
    ap.add_argument("--lr-decay-steps", type=int, default=0,
                    help="the step the decay reaches --min-lr at (0: --steps)")
    ap.add_argument("--min-lr", type=float, default=0.0)
    ap.add_argument("--momentum", type=float, default=0.0, help="sgd momentum")
    ap.add_argument("--dampening", type=float, default=0.0, help="sgd dampening")
    ap.add_argument("--nesterov", action="store_true", help="sgd nesterov momentum")
    ap.add_argument("--max-norm", type=float, default=None,
                    help="clip_grad_norm_ (global L2) before each optimizer step")
    return ap


def parse_args(argv=None):
    ap = build_parser()
    args = ap.parse_args(argv)
    if args.width is None:
        args.width = 64 if args.model == "mlp" else 128
    if args.mlp_width is None:
        args.mlp_width = 128 if args.model == "mlp" else 512
    if args.weight_decay is None:
        args.weight_decay = 0.1 if args.optimizer == "adamw" else 0.0
    if args.threads < 1:
        ap.error("--threads must be >= 1")
    if args.write_init is None and args.steps_timing is None:
        if not args.init:
            ap.error("--init is required (or use --write-init / --steps-timing)")
        if not args.data:
            ap.error("--data is required")
    if args.model == "mlp":
        if args.data and len(args.data) > 1:
            ap.error("--model mlp reads one token file (--data once)")
        if (args.data_weights is not None or args.eot_token is not None or args.data_in_order
                or args.data_seed is not None):
            ap.error("--data-weights, --eot-token, --data-in-order and --data-seed are for the "
                     "gpt and moe-gpt models (token_dataset); the mlp reads token_file")
    if args.eval_every < 0:
        ap.error(f"--eval-every must be >= 0 (0: no evaluation), got {args.eval_every}")
    if args.eval_every > 0 and not args.eval_data:
        ap.error("--eval-every needs --eval-data (the held-out data)")
    if args.eval_data and args.eval_every == 0:
        ap.error("--eval-data needs --eval-every K > 0")
    if args.eval_every > 0 and args.model == "mlp":
        ap.error("--eval-every is for the gpt and moe-gpt models (token_dataset)")
    args.data_weight_values = [0.0] * len(args.data or [])
    if args.data_weights is not None:
        try:
            args.data_weight_values = [float(v) for v in args.data_weights.split(",")]
        except ValueError:
            ap.error(f"--data-weights {args.data_weights!r}: not a list of numbers")
        if len(args.data_weight_values) != len(args.data or []):
            ap.error(f"--data-weights has {len(args.data_weight_values)} values for "
                     f"{len(args.data or [])} --data")
    if args.data_seed is None:
        args.data_seed = 0
        if args.steps < 0:
            ap.error("--steps must be >= 0")
    if args.optimizer == "adamw" and (args.momentum or args.nesterov or args.dampening):
        ap.error("--momentum/--nesterov/--dampening apply to --optimizer sgd only")
    return args


def set_threads(n):
    """Pins BLAS/OpenMP thread counts; must run before torch is imported."""
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(n)


# Everything below needs torch; imported lazily so set_threads() comes first.

def model_parts(args):
    from models import MODELS, GPTConfig, MLPConfig, MoEGPTConfig
    cfg_cls, specs_fn, fwd = MODELS[args.model]
    if args.model == "gpt":
        cfg = GPTConfig(vocab=args.vocab, context=args.context, width=args.width,
                        layers=args.layers, heads=args.heads, mlp_width=args.mlp_width,
                        eps=args.ln_eps, matmul_dtype=args.matmul_dtype)
    elif args.model == "moe-gpt":
        layers = tuple(int(v) for v in args.moe_layers.split(",") if v)
        cfg = MoEGPTConfig(vocab=args.vocab, context=args.context, width=args.width,
                           layers=args.layers, heads=args.heads, mlp_width=args.mlp_width,
                           eps=args.ln_eps, experts=args.experts, moe_layers=layers,
                           top_k=args.top_k, capacity_factor=args.capacity_factor,
                           aux_loss_coefficient=args.aux_loss_coefficient,
                           matmul_dtype=args.matmul_dtype)
    else:
        if args.matmul_dtype != "float32":
            raise ValueError("--matmul-dtype bfloat16 is for the gpt and moe-gpt models")
        cfg = MLPConfig(vocab=args.vocab, width=args.width, mlp_width=args.mlp_width)
    cfg.validate()
    return cfg, specs_fn(cfg), fwd


# loom-gpt --weight-decay-on matrices: the variables of the group without weight decay.
NO_DECAY_PATTERNS = ("wte", "wpe", "*.bias", "*ln_*")


def lr_factor(step, warmup, decay, decay_steps, min_ratio):
    """core/learning_rate_schedule.h's LearningRateFactor, the same double arithmetic."""
    if step < warmup:
        return (step + 1) / warmup
    if decay == "constant":
        return 1.0
    if step >= decay_steps:
        return min_ratio
    progress = (step - warmup) / (decay_steps - warmup)
    remaining = 1.0 - progress if decay == "linear" else 0.5 * (1.0 + math.cos(math.pi * progress))
    return min_ratio + (1.0 - min_ratio) * remaining


def make_scheduler(args, opt, resumed_steps):
    """LambdaLR of Loom's schedule, continuing at optimizer step `resumed_steps`; None for a
    constant rate."""
    import torch
    if args.lr_warmup == 0 and args.lr_decay == "constant":
        return None
    decay_steps = args.lr_decay_steps if args.lr_decay_steps > 0 else args.steps
    min_ratio = args.min_lr / args.lr
    return torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: lr_factor(s + resumed_steps, args.lr_warmup, args.lr_decay, decay_steps,
                                 min_ratio))


def make_optimizer(args, params):
    import fnmatch
    import torch
    plist = list(params.values())
    if args.weight_decay_on == "matrices":
        no_decay = [p for n, p in params.items()
                    if any(fnmatch.fnmatchcase(n, pattern) for pattern in NO_DECAY_PATTERNS)]
        decay = [p for n, p in params.items()
                 if not any(fnmatch.fnmatchcase(n, pattern) for pattern in NO_DECAY_PATTERNS)]
        plist = [{"params": decay},
                 {"params": no_decay, "weight_decay": 0.0, "lr": args.lr * args.no_decay_lr_scale}]
    if args.optimizer == "adamw":
        return torch.optim.AdamW(plist, lr=args.lr, betas=(args.beta1, args.beta2), eps=args.eps,
                                 weight_decay=args.weight_decay, amsgrad=False, foreach=False)
    return torch.optim.SGD(plist, lr=args.lr, momentum=args.momentum, dampening=args.dampening,
                           weight_decay=args.weight_decay, nesterov=args.nesterov, foreach=False)


def optimizer_state_tensors(args, opt, params, step):
    """Optimizer state as flat named tensors (for --save-final)."""
    import torch
    out = {}
    kinds = ("exp_avg", "exp_avg_sq") if args.optimizer == "adamw" else ("momentum_buffer",)
    for kind in kinds:
        for name, p in params.items():
            st = opt.state.get(p, {})
            buf = st.get(kind)
            if buf is None:
                if args.optimizer == "sgd" and args.momentum == 0:
                    continue
                buf = torch.zeros_like(p)  # no step taken yet
            out[f"optimizer.{kind}.{name}"] = buf.detach()
    out["optimizer.step"] = torch.tensor(step, dtype=torch.int64)
    return out


def load_optimizer_state(args, opt, params, state, path):
    """Inverse of optimizer_state_tensors; `state` holds the optimizer.* tensors."""
    import torch
    if "optimizer.step" not in state or state["optimizer.step"].numel() != 1:
        raise ValueError(f"{path}: --resume needs a scalar optimizer.step")
    step = int(state.pop("optimizer.step").reshape(-1)[0].item())
    kinds = ("exp_avg", "exp_avg_sq") if args.optimizer == "adamw" else ("momentum_buffer",)
    problems = []
    bufs = {}
    for kind in kinds:
        if args.optimizer == "sgd" and args.momentum == 0:
            continue
        for name, p in params.items():
            key = f"optimizer.{kind}.{name}"
            t = state.pop(key, None)
            if t is None:
                problems.append(f"missing {key}")
            elif list(t.shape) != list(p.shape) or t.dtype != torch.float32:
                problems.append(f"{key}: {t.dtype}{list(t.shape)}, expected float32{list(p.shape)}")
            else:
                bufs[(kind, name)] = t.clone()
    if state:
        problems.append("unexpected optimizer entries: " + ", ".join(sorted(state)))
    if problems:
        raise ValueError(f"{path}: " + "; ".join(problems))
    if step > 0:
        for name, p in params.items():
            if args.optimizer == "adamw":
                opt.state[p] = {"step": torch.tensor(float(step)),
                                "exp_avg": bufs[("exp_avg", name)],
                                "exp_avg_sq": bufs[("exp_avg_sq", name)]}
            elif args.momentum != 0:
                opt.state[p] = {"momentum_buffer": bufs[("momentum_buffer", name)]}
    return step


def load_init(args, specs):
    import safetensors_io
    from models import check_params
    tensors, _meta = safetensors_io.load(args.init)
    opt_state = {k: v for k, v in tensors.items() if k.startswith("optimizer.")}
    if args.resume:
        tensors = {k: v for k, v in tensors.items() if not k.startswith("optimizer.")}
    what = args.init
    if opt_state and not args.resume:
        what += " (holds optimizer.* state: pass --resume to continue from it)"
    params = check_params(specs, tensors, what=what)
    return params, opt_state


# tests/data/token_dataset_reference.py, the token dataset of docs/DATA.md.
TOKEN_DATASET_DIRECTORY = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                       "data")


def batch_reader(args, cfg):
    """(read, description): read(t) is step t's (x, y), torch int64 [batch, context] each, as
    Loom's job reads them: the token dataset for gpt / moe-gpt, data.py's formula for the mlp.
    ValueError naming the culprit for bad data or a token outside the vocabulary."""
    import torch
    import data as data_mod
    if args.model == "mlp":
        tokens = data_mod.load_tokens(args.data[0], args.data_format)
        if tokens.numel() and int(tokens.max()) >= cfg.vocab:
            raise ValueError(f"{args.data[0]}: token {int(tokens.max())} >= vocab {cfg.vocab}")
        return (lambda t: data_mod.get_batch(tokens, t, args.batch, args.context),
                {"data": args.data[0], "data_format": args.data_format,
                 "num_tokens": int(tokens.numel())})
    dataset = token_dataset(args, cfg, args.data, args.data_weight_values)

    def read(t):
        x, y = dataset.batch(t, args.batch, args.context)
        return torch.from_numpy(x), torch.from_numpy(y)

    return read, {"data": list(args.data), "data_format": args.data_format,
                  "data_weights": args.data_weight_values, "eot_token": args.eot_token,
                  "data_in_order": args.data_in_order, "data_seed": args.data_seed,
                  "num_tokens": sum(dataset.token_count(j) for j in range(len(dataset.sources)))}


def token_dataset(args, cfg, paths, weights):
    """The token dataset of PATHS (one source each, of WEIGHTS) read with the data flags
    (--data-format, --eot-token, --data-in-order, --data-seed), as loom-gpt's inputs read it.
    ValueError for a token outside the vocabulary or a source too short."""
    if TOKEN_DATASET_DIRECTORY not in sys.path:
        sys.path.insert(0, TOKEN_DATASET_DIRECTORY)
    from token_dataset_reference import Dataset, Source
    dataset = Dataset([Source(path, args.data_format, weight)
                       for path, weight in zip(paths, weights)],
                      end_of_text=args.eot_token, in_order=args.data_in_order,
                      seed=args.data_seed)
    largest = dataset.largest_token()
    if largest >= cfg.vocab:
        raise ValueError(f"{', '.join(paths)}: token {largest} >= vocab {cfg.vocab}")
    for j in range(len(dataset.sources)):
        dataset.samples_per_epoch(j, args.context)  # a source too short is an error now
    return dataset


def evaluator(args, cfg, fwd):
    """evaluate(params, n): the cross-entropy of batch n of the held-out dataset (--eval-data,
    sources of equal weight) under torch.no_grad(), as Loom's evaluation computes it: the GPT's
    loss; the MoE GPT's cross-entropy, without the auxiliary loss (loom-gpt evaluates
    "cross_entropy")."""
    import torch
    import torch.nn.functional as F
    dataset = token_dataset(args, cfg, args.eval_data, [0.0] * len(args.eval_data))

    def evaluate(params, n):
        x, y = dataset.batch(n, args.batch, args.context)
        with torch.no_grad():
            _, logits = fwd(params, cfg, torch.from_numpy(x), None, {})
            return float(F.cross_entropy(logits.reshape(-1, cfg.vocab),
                                         torch.from_numpy(y).reshape(-1)))

    return evaluate


def train_step(fwd, cfg, params, opt, x, y, max_norm, grads_out=None, stats=None):
    """One step. Returns (loss, grad norm before clipping). If grads_out is a
    dict, the gradients (before clipping) are copied into it by name; `stats`
    (a dict) receives the model's counts (MoE: "dropped", "tokens_per_expert")."""
    import torch
    opt.zero_grad(set_to_none=True)
    loss, _ = fwd(params, cfg, x, y, {} if stats is None else stats)
    loss.backward()
    plist = list(params.values())
    if grads_out is not None:
        for n, p in params.items():
            grads_out[n] = p.grad.detach().clone()
    if max_norm is not None:
        gnorm = torch.nn.utils.clip_grad_norm_(plist, max_norm)
    else:
        with torch.no_grad():
            gnorm = torch.norm(torch.stack([torch.norm(p.grad, 2.0) for p in plist]), 2.0)
    opt.step()
    return loss.detach(), gnorm


def config_dict(args, cfg, extra=None):
    import torch
    from dataclasses import asdict
    model_cfg = asdict(cfg)
    if "eps" in model_cfg:
        model_cfg["ln_eps"] = model_cfg.pop("eps")
    c = {"model": args.model, **model_cfg, "batch": args.batch,
         "seq_len": args.context, "optimizer": args.optimizer, "lr": args.lr,
         "weight_decay": args.weight_decay, "max_norm": args.max_norm,
         "threads": args.threads, "torch_version": torch.__version__}
    if args.optimizer == "adamw":
        c.update(betas=[args.beta1, args.beta2], eps=args.eps)
    else:
        c.update(momentum=args.momentum, dampening=args.dampening, nesterov=args.nesterov)
    c.update(extra or {})
    return c


def run_write_init(args):
    import safetensors_io
    from dataclasses import asdict
    from models import init_params
    cfg, specs, _ = model_parts(args)
    params = init_params(specs, args.seed)
    meta = {"model": args.model, "seed": str(args.seed), "config": json.dumps(asdict(cfg))}
    safetensors_io.save(args.write_init, params, metadata=meta)
    print(f"wrote {len(params)} parameters to {args.write_init}")


def run_train(args):
    import safetensors_io
    cfg, specs, fwd = model_parts(args)
    params, opt_state = load_init(args, specs)
    opt = make_optimizer(args, params)
    start = 0
    resumed_steps = 0  # optimizer steps already taken (AdamW bias-correction step)
    if args.resume:
        resumed_steps = start = load_optimizer_state(args, opt, params, opt_state, args.init)
    scheduler = make_scheduler(args, opt, resumed_steps)
    if args.start_step is not None:
        start = args.start_step
    read_batch, data_description = batch_reader(args, cfg)
    evaluate = evaluator(args, cfg, fwd) if args.eval_every > 0 else None
    losses, gnorms, dropped, tokens_per_expert, near_ties = [], [], [], [], []
    validation_losses = {}  # step t + 1 -> the evaluation before step t's update
    for k in range(args.steps):
        t = start + k
        if evaluate is not None and t % args.eval_every == 0:
            validation = evaluate(params, t // args.eval_every)
            if not math.isfinite(validation):
                raise FloatingPointError(f"non-finite validation loss {validation} at step {t}")
            validation_losses[t + 1] = validation
            if args.verbose:
                print(f"step {t} val_loss {validation:.6f}", flush=True)
        x, y = read_batch(t)
        grads = {} if (k == 0 and args.save_grads) else None
        stats = {}
        loss, gnorm = train_step(fwd, cfg, params, opt, x, y, args.max_norm, grads, stats)
        if scheduler is not None:
            scheduler.step()
        if "dropped" in stats:
            dropped.append(stats["dropped"])
            near_ties.append(stats["near_ties"])
            tokens_per_expert.append([int(v) for v in stats["tokens_per_expert"]])
        loss_f = float(loss)
        if grads is not None:
            safetensors_io.save(args.save_grads, {f"grad.{n}": g for n, g in grads.items()},
                                metadata={"step": str(t), "loss": repr(loss_f)})
        if not math.isfinite(loss_f):
            raise FloatingPointError(f"non-finite loss {loss_f} at step {t}")
        losses.append(loss_f)
        gnorms.append(float(gnorm))
        if args.verbose:
            print(f"step {t} loss {loss_f:.6f} grad_norm {float(gnorm):.6f}", flush=True)
    end_step = start + args.steps
    extra = {"steps": args.steps, "start_step": start, **data_description,
             "init": args.init, "resume": args.resume}
    if args.eval_every > 0:
        extra.update(eval_every=args.eval_every, eval_data=list(args.eval_data))
    result = {"losses": losses, "grad_norms": gnorms, "config": config_dict(args, cfg, extra)}
    if evaluate is not None:
        # Step t + 1 (1-based, as Loom numbers steps; JSON keys are strings) of every step t
        # with t % eval_every == 0: the held-out loss on the weights step t started from.
        result["validation_losses"] = {str(step): value
                                       for step, value in validation_losses.items()}
    if dropped:
        # MoE: the loss is cross-entropy plus the auxiliary loss; the step's assignments over
        # capacity, and per expert before dropping (summed over layers and groups).
        result["dropped"] = dropped
        result["tokens_per_expert"] = tokens_per_expert
        # Routing choices within rounding of a tie (models.routing_near_ties), per step.
        result["near_ties"] = near_ties
    if args.output:
        with open(args.output, "w") as f:
            json.dump(result, f, indent=1)
            f.write("\n")
    else:
        json.dump(result, sys.stdout)
        print()
    if args.save_final:
        out = {n: p.detach() for n, p in params.items()}
        # optimizer.step counts optimizer steps taken (AdamW's bias-correction
        # step); --start-step moves only the batch index.
        out.update(optimizer_state_tensors(args, opt, params, resumed_steps + args.steps))
        safetensors_io.save(args.save_final, out,
                            metadata={"model": args.model, "next_step": str(end_step),
                                      "optimizer": args.optimizer})


def gemm_gflops(reps=10):
    import torch
    n = 1024
    g = torch.Generator().manual_seed(0)
    a = torch.randn(n, n, generator=g)
    b = torch.randn(n, n, generator=g)
    c = torch.empty(n, n)
    for _ in range(2):
        torch.mm(a, b, out=c)
    times, cpu = [], []
    for _ in range(reps):
        t0, c0 = time.perf_counter(), time.process_time()
        torch.mm(a, b, out=c)
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    times.sort()
    cpu.sort()
    flop = 2.0 * n ** 3
    return (flop / times[len(times) // 2] / 1e9, flop / times[0] / 1e9,
            flop / cpu[len(cpu) // 2] / 1e9)


def run_timing(args):
    import torch
    import data as data_mod
    from models import init_params
    cfg, specs, fwd = model_parts(args)
    if args.init:
        params, _ = load_init(args, specs)
    else:
        params = init_params(specs, args.seed)
        params = {n: p.requires_grad_(True) for n, p in params.items()}
    opt = make_optimizer(args, params)
    if args.data:
        read_batch, _ = batch_reader(args, cfg)
    else:
        g = torch.Generator().manual_seed(args.seed)
        tokens = torch.randint(0, cfg.vocab, (1 << 16,), generator=g, dtype=torch.int64)

        def read_batch(step):
            return data_mod.get_batch(tokens, step, args.batch, args.context)
    times, cpu_times = [], []
    for k in range(args.warmup + args.steps_timing):
        x, y = read_batch(k)
        t0, c0 = time.perf_counter(), time.process_time()
        train_step(fwd, cfg, params, opt, x, y, args.max_norm)
        dt, dc = time.perf_counter() - t0, time.process_time() - c0
        if k >= args.warmup:
            times.append(dt)
            cpu_times.append(dc)
    n = len(times)
    if n == 0:
        raise ValueError("--steps-timing must be >= 1")

    def median(v):
        v = sorted(v)
        return (v[(n - 1) // 2] + v[n // 2]) / 2

    gf_med, gf_best, gf_cpu = gemm_gflops()
    result = {"median_step_ms": median(times) * 1e3, "min_step_ms": min(times) * 1e3,
              # process CPU time per step: less sensitive to other load on the
              # machine when --threads 1 (sums all threads otherwise)
              "median_step_cpu_ms": median(cpu_times) * 1e3,
              "steps_timed": n, "warmup": args.warmup,
              "gemm_1024_gflops": gf_med, "gemm_1024_gflops_best": gf_best,
              "gemm_1024_gflops_cpu": gf_cpu,
              "config": config_dict(args, cfg)}
    print(f"median_step_ms {result['median_step_ms']:.3f}")
    print(f"min_step_ms {result['min_step_ms']:.3f}")
    print(f"median_step_cpu_ms {result['median_step_cpu_ms']:.3f}")
    print(f"gemm_1024_gflops {gf_med:.2f}")
    print(f"gemm_1024_gflops_cpu {gf_cpu:.2f}")
    if args.output:
        with open(args.output, "w") as f:
            json.dump(result, f, indent=1)
            f.write("\n")


def main(argv=None):
    args = parse_args(argv)
    set_threads(args.threads)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import torch
    torch.set_num_threads(args.threads)
    torch.use_deterministic_algorithms(True)
    try:
        if args.write_init:
            run_write_init(args)
        elif args.steps_timing is not None:
            run_timing(args)
        else:
            run_train(args)
    except (ValueError, FloatingPointError, OSError) as e:
        print(f"reference.py: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
