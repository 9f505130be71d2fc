"""The peer of bench_gpu_matmul: torch.matmul on the same GPU, same sizes, same timing.

Prints one line per run, "torch_tflops <value>", the median-free raw numbers; the C++ side
takes the median.
"""
import argparse

import torch


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", type=int, default=8192)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--dtype", choices=["bfloat16", "float32"], default="bfloat16")
    args = parser.parse_args()
    dtype = getattr(torch, args.dtype)
    n = args.size
    generator = torch.Generator(device="cuda").manual_seed(1)
    a = torch.randn(n, n, device="cuda", dtype=dtype, generator=generator)
    b = torch.randn(n, n, device="cuda", dtype=dtype, generator=generator)
    c = torch.empty(n, n, device="cuda", dtype=dtype)
    for _ in range(3):
        torch.matmul(a, b, out=c)
    torch.cuda.synchronize()
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    for _ in range(args.runs):
        start.record()
        for _ in range(args.iterations):
            torch.matmul(a, b, out=c)
        end.record()
        end.synchronize()
        seconds = start.elapsed_time(end) / 1e3
        print(f"torch_tflops {2.0 * n**3 * args.iterations / seconds / 1e12:.1f}", flush=True)


if __name__ == "__main__":
    main()
