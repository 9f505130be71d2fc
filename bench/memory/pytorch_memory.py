#!/usr/bin/python3
"""The PyTorch side of bench_memory: what the same GPT and training step must keep in PyTorch.

    /usr/bin/python3 bench/memory/pytorch_memory.py --vocab 8192 --context 512 --width 512 \
        --layers 8 --heads 8 --mlp-width 2048 --batch 2 --steps 2

The model is tests/oracle/models.py's GPT (the model of tools/loom-gpt: pre-LayerNorm blocks,
untied head, GELU MLP), trained as tests/oracle/reference.py trains it: zero_grad, forward,
backward, AdamW (float32, foreach=False). Each step's forward runs under
torch.autograd.graph.saved_tensors_hooks, whose pack hook records the storage of every tensor
autograd saves for the backward, each storage once (by its data pointer; its whole nbytes), the
parameters' own storages left out (they are model states). After the last step the model states
are measured the same way: the parameters, their gradients and every tensor of AdamW's state.

What PyTorch must keep is model states + the largest step's saved bytes. With --recompute full
each block runs under torch.utils.checkpoint (reentrant, PyTorch 1.13's default): the forward
saves the blocks' inputs and what lies outside the blocks, and each block's recomputation in the
backward saves its own tensors until that block's backward is done (recorded per block); what
PyTorch must keep is then model states + the forward's saved bytes + the largest block's
recomputed saved bytes. The script prints a breakdown and, last, one line of JSON with
"pytorch_mib" (MiB = 2^20 bytes) and its parts.
"""

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ORACLE = os.path.join(HERE, "..", "..", "tests", "oracle")
MIB = float(1 << 20)


def build_parser():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--context", type=int, default=512, help="T: also every sequence's length")
    ap.add_argument("--width", type=int, default=512)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--mlp-width", type=int, default=2048)
    ap.add_argument("--batch", type=int, default=2, help="sequences per step")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--recompute", choices=("none", "full"), default="none",
                    help="full: every block under torch.utils.checkpoint")
    ap.add_argument("--threads", type=int, default=1, help="BLAS/OpenMP threads")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--output", help="also write the JSON result to this file")
    return ap


class SavedStorages:
    """A saved_tensors_hooks pack hook that records each saved storage once, except `skip`'s."""

    def __init__(self, skip):
        self.skip = skip
        self.bytes_by_storage = {}
        self.tensors = 0

    def pack(self, tensor):
        self.tensors += 1
        storage = tensor.storage()
        pointer = storage.data_ptr()
        if pointer not in self.skip:
            self.bytes_by_storage[pointer] = max(self.bytes_by_storage.get(pointer, 0),
                                                 storage.nbytes())
        return tensor

    @staticmethod
    def unpack(tensor):
        return tensor

    def total(self):
        return sum(self.bytes_by_storage.values())


def storage_bytes(tensors):
    """Bytes of the distinct storages of `tensors` (each counted once)."""
    seen = {}
    for tensor in tensors:
        storage = tensor.storage()
        seen[storage.data_ptr()] = storage.nbytes()
    return sum(seen.values())


def main(argv=None):
    args = build_parser().parse_args(argv)
    for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[name] = str(args.threads)
    sys.path.insert(0, ORACLE)
    import torch
    from models import GPTConfig, gpt_forward, gpt_param_specs, init_params
    from torch.utils.checkpoint import checkpoint

    torch.set_num_threads(args.threads)
    if args.steps < 1 or args.batch < 1:
        print("pytorch_memory.py: error: --steps and --batch must be >= 1", file=sys.stderr)
        return 2
    cfg = GPTConfig(vocab=args.vocab, context=args.context, width=args.width, layers=args.layers,
                    heads=args.heads, mlp_width=args.mlp_width)
    try:
        cfg.validate()
    except ValueError as error:
        print(f"pytorch_memory.py: error: {error}", file=sys.stderr)
        return 2
    params = init_params(gpt_param_specs(cfg), args.seed)
    params = {name: p.requires_grad_(True) for name, p in params.items()}
    plist = list(params.values())
    parameter_count = sum(p.numel() for p in plist)
    optimizer = torch.optim.AdamW(plist, lr=args.lr, weight_decay=args.weight_decay,
                                  foreach=False)
    parameter_storages = {p.storage().data_ptr() for p in plist}
    generator = torch.Generator().manual_seed(args.seed)
    saved_per_step = []
    saved_tensors_per_step = []
    recomputed_per_step = []
    recomputations = []  # SavedStorages of each block's recomputation in the current step

    def run_block(block, h):
        def recorded(h):
            if not torch.is_grad_enabled():
                return block(h)  # the forward under checkpoint: nothing saved
            recorder = SavedStorages(parameter_storages)
            recomputations.append(recorder)
            with torch.autograd.graph.saved_tensors_hooks(recorder.pack, recorder.unpack):
                return block(h)
        return checkpoint(recorded, h)
    for _ in range(args.steps):
        tokens = torch.randint(0, cfg.vocab, (args.batch, cfg.context + 1), generator=generator)
        x, y = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
        optimizer.zero_grad(set_to_none=True)
        recorder = SavedStorages(parameter_storages)
        with torch.autograd.graph.saved_tensors_hooks(recorder.pack, recorder.unpack):
            loss, _ = gpt_forward(params, cfg, x, y,
                                  run_block=run_block if args.recompute == "full" else None)
        saved_per_step.append(recorder.total())
        saved_tensors_per_step.append(recorder.tensors)
        recomputations.clear()
        loss.backward()
        if args.recompute == "full" and len(recomputations) != cfg.layers:
            print(f"pytorch_memory.py: error: {len(recomputations)} blocks recomputed, expected "
                  f"{cfg.layers}", file=sys.stderr)
            return 1
        recomputed_per_step.append(max((r.total() for r in recomputations), default=0))
        optimizer.step()
        del loss

    parameter_bytes = storage_bytes(plist)
    gradient_bytes = storage_bytes(p.grad for p in plist if p.grad is not None)
    optimizer_bytes = storage_bytes(
        value for state in optimizer.state.values() for value in state.values()
        if torch.is_tensor(value))
    model_state_bytes = parameter_bytes + gradient_bytes + optimizer_bytes
    saved_bytes = max(saved_per_step)
    recomputed_bytes = max(recomputed_per_step)
    total_bytes = model_state_bytes + saved_bytes + recomputed_bytes
    print(f"GPT V={cfg.vocab} T={cfg.context} D={cfg.width} L={cfg.layers} H={cfg.heads} "
          f"F={cfg.mlp_width}, batch {args.batch}, AdamW, recompute {args.recompute}; torch "
          f"{torch.__version__}")
    print(f"parameters: {parameter_count} ({parameter_count / 1e6:.2f}M)")
    print(f"model states: {model_state_bytes / MIB:.2f} MiB (parameters "
          f"{parameter_bytes / MIB:.2f}, gradients {gradient_bytes / MIB:.2f}, AdamW states "
          f"{optimizer_bytes / MIB:.2f}; {model_state_bytes / parameter_count:.3f} bytes per "
          f"parameter)")
    print("saved for backward per step: "
          + ", ".join(f"{b / MIB:.2f} MiB ({n} saved tensors)"
                      for b, n in zip(saved_per_step, saved_tensors_per_step)))
    if args.recompute == "full":
        print("the largest block's recomputed saved bytes per step: "
              + ", ".join(f"{b / MIB:.2f} MiB" for b in recomputed_per_step))
    print(f"must keep: {total_bytes / MIB:.2f} MiB")
    result = {"pytorch_mib": total_bytes / MIB, "model_state_mib": model_state_bytes / MIB,
              "parameter_mib": parameter_bytes / MIB, "gradient_mib": gradient_bytes / MIB,
              "optimizer_state_mib": optimizer_bytes / MIB, "saved_mib": (saved_bytes + recomputed_bytes) / MIB,
              "recomputed_mib": recomputed_bytes / MIB,
              "parameters": parameter_count, "torch": torch.__version__}
    line = json.dumps(result)
    print(line)
    if args.output:
        with open(args.output, "w") as f:
            f.write(line + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
