"""The peer of bench_gpu_gpt_step: the same GPT training step in PyTorch eager on the same device.

The model is tests/oracle/models.py's GPT (the reference Loom's oracle tests train against), its
parameters float32 on the device; with --bfloat16 the step runs under torch.autocast (bfloat16
matmuls with float32 master weights and AdamW state, PyTorch's mixed precision). A step is
zero_grad, forward, backward and AdamW's update (lr 1e-3, betas (0.9, 0.95), eps 1e-8, weight
decay 0.1, as the GPT job), timed on the host after a device synchronisation. Prints
"torch_step_ms <value>" once per measured step; the C++ side takes the median.
"""
import argparse
import os
import sys
import time


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--models-dir", required=True,
                        help="the directory of models.py (tests/oracle in the source tree)")
    parser.add_argument("--device", default="cuda", help="cuda or cpu")
    parser.add_argument("--vocab", type=int, default=256)
    parser.add_argument("--context", type=int, default=1024)
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--mlp-width", type=int, default=4096)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--bfloat16", action="store_true", help="autocast matmuls to bfloat16")
    args = parser.parse_args()

    sys.path.insert(0, os.path.abspath(args.models_dir))
    import torch
    import models

    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("torch_gpt_step.py: this torch sees no GPU", file=sys.stderr)
        return 2
    cfg = models.GPTConfig(vocab=args.vocab, context=args.context, width=args.width,
                           layers=args.layers, heads=args.heads, mlp_width=args.mlp_width)
    cfg.validate()
    params = {name: tensor.to(device).requires_grad_(True)
              for name, tensor in models.init_params(models.gpt_param_specs(cfg), 0).items()}
    optimizer = torch.optim.AdamW(list(params.values()), lr=1e-3, betas=(0.9, 0.95), eps=1e-8,
                                  weight_decay=0.1)
    generator = torch.Generator(device="cpu").manual_seed(1)
    tokens = torch.randint(0, cfg.vocab, (args.batch, cfg.context + 1), generator=generator)
    x = tokens[:, :-1].contiguous().to(device)
    y = tokens[:, 1:].contiguous().to(device)

    def synchronize():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    for step in range(args.warmup + args.steps):
        synchronize()
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16,
                            enabled=args.bfloat16):
            loss, _ = models.gpt_forward(params, cfg, x, y)
        loss.backward()
        optimizer.step()
        synchronize()
        if step >= args.warmup:
            print(f"torch_step_ms {(time.perf_counter() - start) * 1e3:.3f}", flush=True)
    print(f"torch_loss {float(loss):.5f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
