"""Plain-PyTorch reference models (functional, parameters held by name).

All linear weights are stored [in, out] and applied as y = x @ W + b.
Parameters live in an ordered dict name -> float32 leaf tensor; the order of
param_specs() is the canonical order (used for initialisation and the
optimizer's parameter list).
"""

import math
from collections import OrderedDict
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F


@dataclass
class GPTConfig:
    vocab: int = 256
    context: int = 64
    width: int = 128
    layers: int = 4
    heads: int = 4
    mlp_width: int = 512
    eps: float = 1e-5

    def validate(self):
        if self.width % self.heads:
            raise ValueError(f"width {self.width} is not divisible by heads {self.heads}")
        for k, v in asdict(self).items():
            if v <= 0:
                raise ValueError(f"{k} must be positive, got {v}")


@dataclass
class MLPConfig:
    vocab: int = 256
    width: int = 64       # D, embedding width
    mlp_width: int = 128  # F, hidden width

    def validate(self):
        for k, v in asdict(self).items():
            if v <= 0:
                raise ValueError(f"{k} must be positive, got {v}")


# ---------------------------------------------------------------------------
# Parameter specs: (name, shape, init) with init one of
#   ("normal", std) | ("zeros",) | ("ones",)

def gpt_param_specs(cfg):
    V, T, D, Fw, L = cfg.vocab, cfg.context, cfg.width, cfg.mlp_width, cfg.layers
    std = 0.02
    proj_std = 0.02 / math.sqrt(2 * L)
    specs = [("wte", [V, D], ("normal", std)), ("wpe", [T, D], ("normal", std))]
    for i in range(L):
        p = f"h.{i}."
        specs += [
            (p + "ln_1.weight", [D], ("ones",)),
            (p + "ln_1.bias", [D], ("zeros",)),
            (p + "attn.q.weight", [D, D], ("normal", std)),
            (p + "attn.q.bias", [D], ("zeros",)),
            (p + "attn.k.weight", [D, D], ("normal", std)),
            (p + "attn.k.bias", [D], ("zeros",)),
            (p + "attn.v.weight", [D, D], ("normal", std)),
            (p + "attn.v.bias", [D], ("zeros",)),
            (p + "attn.c_proj.weight", [D, D], ("normal", proj_std)),
            (p + "attn.c_proj.bias", [D], ("zeros",)),
            (p + "ln_2.weight", [D], ("ones",)),
            (p + "ln_2.bias", [D], ("zeros",)),
            (p + "mlp.c_fc.weight", [D, Fw], ("normal", std)),
            (p + "mlp.c_fc.bias", [Fw], ("zeros",)),
            (p + "mlp.c_proj.weight", [Fw, D], ("normal", proj_std)),
            (p + "mlp.c_proj.bias", [D], ("zeros",)),
        ]
    specs += [
        ("ln_f.weight", [D], ("ones",)),
        ("ln_f.bias", [D], ("zeros",)),
        ("lm_head.weight", [D, V], ("normal", std)),
    ]
    return specs


def mlp_param_specs(cfg):
    V, D, Fw = cfg.vocab, cfg.width, cfg.mlp_width
    return [
        ("wte", [V, D], ("normal", 0.02)),
        ("fc1.weight", [D, Fw], ("normal", 0.02)),
        ("fc1.bias", [Fw], ("zeros",)),
        ("fc2.weight", [Fw, V], ("normal", 0.02)),
        ("fc2.bias", [V], ("zeros",)),
    ]


def init_params(specs, seed):
    """Deterministic initial parameters (CPU generator seeded with `seed`,
    drawn in spec order)."""
    gen = torch.Generator().manual_seed(seed)
    params = OrderedDict()
    for name, shape, init in specs:
        if init[0] == "normal":
            t = torch.empty(shape, dtype=torch.float32).normal_(0.0, init[1], generator=gen)
        elif init[0] == "zeros":
            t = torch.zeros(shape, dtype=torch.float32)
        elif init[0] == "ones":
            t = torch.ones(shape, dtype=torch.float32)
        else:
            raise ValueError(f"unknown init {init!r}")
        params[name] = t
    return params


def check_params(specs, tensors, what="checkpoint"):
    """Validates names/shapes/dtypes of `tensors` against `specs` and returns
    an OrderedDict in spec order of fresh float32 leaf tensors requiring grad.
    Raises ValueError naming every missing, extra, mis-shaped or non-F32 entry."""
    problems = []
    names = [n for n, _, _ in specs]
    missing = [n for n in names if n not in tensors]
    extra = sorted(n for n in tensors if n not in set(names))
    if missing:
        problems.append("missing parameters: " + ", ".join(missing))
    if extra:
        problems.append("unexpected parameters: " + ", ".join(extra))
    for name, shape, _ in specs:
        t = tensors.get(name)
        if t is None:
            continue
        if list(t.shape) != list(shape):
            problems.append(f"parameter {name}: shape {list(t.shape)}, expected {list(shape)}")
        if t.dtype != torch.float32:
            problems.append(f"parameter {name}: dtype {t.dtype}, expected float32 (F32)")
    if problems:
        raise ValueError(f"{what}: " + "; ".join(problems))
    out = OrderedDict()
    for name in names:
        out[name] = tensors[name].detach().clone().contiguous().requires_grad_(True)
    return out


# ---------------------------------------------------------------------------
# Forward passes. Each returns (loss, logits); loss is the mean cross-entropy
# over all B*T tokens.

def gpt_forward(p, cfg, x, y=None):
    B, T = x.shape
    D, H = cfg.width, cfg.heads
    Dh = D // H
    if T > cfg.context:
        raise ValueError(f"sequence length {T} exceeds context {cfg.context}")
    h = F.embedding(x, p["wte"]) + p["wpe"][:T]
    causal = torch.ones(T, T, dtype=torch.bool).tril_()
    scale = math.sqrt(Dh)
    for i in range(cfg.layers):
        pre = f"h.{i}."
        a = F.layer_norm(h, (D,), p[pre + "ln_1.weight"], p[pre + "ln_1.bias"], cfg.eps)
        q = a @ p[pre + "attn.q.weight"] + p[pre + "attn.q.bias"]
        k = a @ p[pre + "attn.k.weight"] + p[pre + "attn.k.bias"]
        v = a @ p[pre + "attn.v.weight"] + p[pre + "attn.v.bias"]
        q = q.view(B, T, H, Dh).transpose(1, 2)  # [B,H,T,Dh]
        k = k.view(B, T, H, Dh).transpose(1, 2)
        v = v.view(B, T, H, Dh).transpose(1, 2)
        s = (q @ k.transpose(-2, -1)) / scale    # [B,H,T,T]
        s = s.masked_fill(~causal, float("-inf"))
        att = torch.softmax(s, dim=-1)
        o = (att @ v).transpose(1, 2).reshape(B, T, D)
        h = h + (o @ p[pre + "attn.c_proj.weight"] + p[pre + "attn.c_proj.bias"])
        m = F.layer_norm(h, (D,), p[pre + "ln_2.weight"], p[pre + "ln_2.bias"], cfg.eps)
        m = F.gelu(m @ p[pre + "mlp.c_fc.weight"] + p[pre + "mlp.c_fc.bias"])  # exact erf
        h = h + (m @ p[pre + "mlp.c_proj.weight"] + p[pre + "mlp.c_proj.bias"])
    h = F.layer_norm(h, (D,), p["ln_f.weight"], p["ln_f.bias"], cfg.eps)
    logits = h @ p["lm_head.weight"]  # [B,T,V], no bias
    loss = None
    if y is not None:
        loss = F.cross_entropy(logits.reshape(-1, cfg.vocab), y.reshape(-1))
    return loss, logits


def mlp_forward(p, cfg, x, y=None):
    e = F.embedding(x, p["wte"])                              # [B,T,D]
    h = F.gelu(e @ p["fc1.weight"] + p["fc1.bias"])           # [B,T,F]
    logits = h @ p["fc2.weight"] + p["fc2.bias"]              # [B,T,V]
    loss = None
    if y is not None:
        loss = F.cross_entropy(logits.reshape(-1, cfg.vocab), y.reshape(-1))
    return loss, logits


MODELS = {
    "gpt": (GPTConfig, gpt_param_specs, gpt_forward),
    "mlp": (MLPConfig, mlp_param_specs, mlp_forward),
}
