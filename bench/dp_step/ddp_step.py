#!/usr/bin/python3
"""The PyTorch side of bench_dp_step: the tiny GPT (tests/oracle/models.py, the model of
tools/loom-gpt) trained data-parallel on WORLD processes with DistributedDataParallel over the gloo
backend, on this machine.

    /usr/bin/python3 bench/dp_step/ddp_step.py --world-size 2 --warmup 3 --steps 20 --output r.json

The launcher (no --rank) starts WORLD worker processes of this script on a free TCP port and
waits for them. Every worker runs --warmup + --steps steps of the global batch --batch (rank r
takes rows [r * B / WORLD, (r + 1) * B / WORLD) of the batch that tools/loom-gpt reads at that step
from the token file), each step zero_grad, forward, backward (DDP all-reduces the gradients in
buckets during backward, averaging them over the ranks), AdamW step, with one BLAS/OpenMP thread
per process. A step's time is the interval between the ends of successive steps on rank 0 (as
Loom's step events measure it), so it includes reading the batch. Rank 0 writes the JSON --output:
median_step_ms over the measured steps, the steps themselves, and the GEMM GFLOP/s of its BLAS.
"""

import argparse
import json
import os
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ORACLE = os.path.join(HERE, "..", "..", "tests", "oracle")


def build_parser():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--world-size", type=int, default=2)
    ap.add_argument("--rank", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=20, help="measured steps")
    ap.add_argument("--threads", type=int, default=1, help="BLAS/OpenMP threads per process")
    ap.add_argument("--output", help="JSON result (written by rank 0)")
    ap.add_argument("--data", default="/usr/share/common-licenses/GPL-3", help="token file (bytes)")
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--context", type=int, default=64)
    ap.add_argument("--width", type=int, default=128)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--mlp-width", type=int, default=512)
    ap.add_argument("--batch", type=int, default=16, help="global batch B")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=0)
    return ap


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(args):
    port = free_port()
    argv = [a for a in sys.argv[1:]]
    workers = [subprocess.Popen([sys.executable, os.path.abspath(__file__), *argv,
                                 "--rank", str(rank), "--port", str(port)])
               for rank in range(args.world_size)]
    codes = [worker.wait(timeout=600) for worker in workers]
    if any(codes):
        print(f"ddp_step.py: worker exit codes {codes}", file=sys.stderr)
        return 1
    return 0


def worker(args):
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(args.threads)
    sys.path.insert(0, ORACLE)
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    import data as data_module
    from models import GPTConfig, gpt_forward, gpt_param_specs, init_params

    torch.set_num_threads(args.threads)
    if args.batch % args.world_size:
        raise ValueError(f"--batch {args.batch} is not divisible by --world-size {args.world_size}")
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{args.port}",
                            rank=args.rank, world_size=args.world_size)
    cfg = GPTConfig(vocab=args.vocab, context=args.context, width=args.width, layers=args.layers,
                    heads=args.heads, mlp_width=args.mlp_width)
    cfg.validate()
    initial = init_params(gpt_param_specs(cfg), args.seed)

    class Gpt(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.names = list(initial)
            self.weights = torch.nn.ParameterList(
                [torch.nn.Parameter(tensor.clone()) for tensor in initial.values()])

        def forward(self, x, y):
            loss, _ = gpt_forward(dict(zip(self.names, self.weights)), cfg, x, y)
            return loss

    model = DistributedDataParallel(Gpt())
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), eps=1e-8,
                                  weight_decay=args.weight_decay, foreach=False)
    tokens = data_module.load_tokens(args.data, "bytes")
    local = args.batch // args.world_size
    rows = slice(args.rank * local, (args.rank + 1) * local)
    dist.barrier()
    ends = [time.perf_counter()]
    losses = []
    for step in range(args.warmup + args.steps):
        x, y = data_module.get_batch(tokens, step, args.batch, args.context)
        optimizer.zero_grad(set_to_none=True)
        loss = model(x[rows], y[rows])
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        ends.append(time.perf_counter())
    step_ms = [(ends[k + 1] - ends[k]) * 1e3 for k in range(args.warmup, args.warmup + args.steps)]
    ordered = sorted(step_ms)
    n = len(ordered)
    median = (ordered[(n - 1) // 2] + ordered[n // 2]) / 2
    gemm = gemm_gflops(torch)
    dist.barrier()
    dist.destroy_process_group()
    if args.rank == 0:
        result = {"median_step_ms": median, "step_ms": step_ms, "rank0_losses": losses,
                  "world_size": args.world_size, "batch": args.batch, "threads": args.threads,
                  "gemm_1024_gflops": gemm, "torch": torch.__version__}
        print(f"median_step_ms {median:.3f}")
        if args.output:
            with open(args.output, "w") as f:
                json.dump(result, f, indent=1)
                f.write("\n")
    return 0


def gemm_gflops(torch, repetitions=5):
    n = 1024
    a = torch.randn(n, n)
    b = torch.randn(n, n)
    c = torch.empty(n, n)
    torch.mm(a, b, out=c)
    times = []
    for _ in range(repetitions):
        start = time.perf_counter()
        torch.mm(a, b, out=c)
        times.append(time.perf_counter() - start)
    times.sort()
    return 2.0 * n ** 3 / times[len(times) // 2] / 1e9


def main():
    args = build_parser().parse_args()
    if args.rank is None:
        return launch(args)
    return worker(args)


if __name__ == "__main__":
    sys.exit(main())
