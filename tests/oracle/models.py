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
    # "bfloat16": every x @ W and the attention's products in bfloat16 with float32 accumulation,
    # as Loom's Job.matmul_data_type (see `linear_product` and `Bfloat16CausalAttention`).
    matmul_dtype: str = "float32"

    def validate(self):
        if self.matmul_dtype not in ("float32", "bfloat16"):
            raise ValueError(f"matmul_dtype must be float32 or bfloat16, got {self.matmul_dtype}")
        if self.width % self.heads:
            raise ValueError(f"width {self.width} is not divisible by heads {self.heads}")
        for k, v in asdict(self).items():
            if isinstance(v, (int, float)) and k != "aux_loss_coefficient" and v <= 0:
                raise ValueError(f"{k} must be positive, got {v}")


@dataclass
class MoEGPTConfig(GPTConfig):
    """The GPT with a mixture-of-experts MLP in `moe_layers` (Loom's `loom-gpt --experts`)."""
    experts: int = 4
    moe_layers: tuple = (1, 3)
    top_k: int = 2
    capacity_factor: float = 1.25
    aux_loss_coefficient: float = 0.01

    def validate(self):
        GPTConfig.validate(self)
        if self.top_k not in (1, 2) or self.top_k > self.experts:
            raise ValueError(f"top_k must be 1 or 2 and <= experts, got {self.top_k}")
        if not self.capacity_factor > 0:
            raise ValueError(f"capacity_factor must be > 0, got {self.capacity_factor}")
        for layer in self.moe_layers:
            if not 0 <= layer < self.layers:
                raise ValueError(f"MoE layer {layer} is not a block (0 to {self.layers - 1})")


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
        ]
        if i in getattr(cfg, "moe_layers", ()):
            E = cfg.experts
            specs += [
                (p + "moe.router.weight", [D, E], ("normal", std)),
                (p + "moe.experts.c_fc.weight", [E, D, Fw], ("normal", std)),
                (p + "moe.experts.c_fc.bias", [E, Fw], ("zeros",)),
                (p + "moe.experts.c_proj.weight", [E, Fw, D], ("normal", proj_std)),
                (p + "moe.experts.c_proj.bias", [E, D], ("zeros",)),
            ]
            continue
        specs += [
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

def moe_capacity(cfg, tokens):
    """Slots per expert and routing group: ceil(capacity_factor * T * k / E) (double precision,
    in that order), kept in [1, T] (an expert takes a token at most once)."""
    slots = math.ceil(cfg.capacity_factor * tokens * cfg.top_k / cfg.experts)
    return min(max(1, slots), tokens)


def route(probs, cfg):
    """Top-k routing of probs [B, T, E] per group (sequence), as GShard fills slots.

    Returns (choices [B, T, k] expert indices, weights [B, T, k] renormalised over the k chosen,
    kept [B, T, k] bool: the assignment got a slot, f [B, E] the fraction of the group's k*T
    assignments that chose each expert before dropping). Ties go to the lower expert index.
    """
    B, T, E = probs.shape
    k = cfg.top_k
    order = torch.sort(probs.detach(), dim=-1, descending=True, stable=True).indices
    choices = order[..., :k]
    chosen = torch.gather(probs, -1, choices)
    weights = chosen / chosen.sum(dim=-1, keepdim=True)
    capacity = moe_capacity(cfg, T)
    one_hot = F.one_hot(choices, E)                 # [B, T, k, E]
    filled = torch.zeros(B, 1, E, dtype=torch.int64)
    kept = []
    for rank in range(k):                           # every first choice before any second
        mine = one_hot[:, :, rank, :]               # [B, T, E]
        # In token order: a token's place among its expert's takers so far in this pass.
        place = ((torch.cumsum(mine, dim=1) - 1 + filled) * mine).sum(dim=-1)  # [B, T]
        kept.append(place < capacity)
        filled = torch.clamp(filled + mine.sum(dim=1, keepdim=True), max=capacity)
    kept = torch.stack(kept, dim=-1)                # [B, T, k]
    f = one_hot.sum(dim=(1, 2)).to(torch.float32)   # [B, E]
    return choices, weights, kept, f / (k * T)


# Router probabilities closer than this between a token's k-th and (k+1)-th expert are a near tie:
# float32 rounding that differs between two correct implementations (summation order, a layout's
# partial sums) may flip the choice. Over 20 MoE steps Loom's losses drift from PyTorch's by up to
# 5e-5 relative and its weights by up to a few 1e-3 of their scale (check_gpt_training.py prints
# both): seen with DP=2 x EP=2, a choice with a margin between 1e-5 and 1e-4 flipped at step 19
# (5 assignments dropped apart), none with a wider one.
ROUTING_TIE_TOLERANCE = 1e-4


def routing_near_ties(probs, cfg):
    """The tokens of probs [B, T, E] whose k-th and (k+1)-th largest probabilities are within
    ROUTING_TIE_TOLERANCE: the routing choices that rounding may flip."""
    if cfg.top_k >= cfg.experts:
        return 0
    top = torch.sort(probs.detach(), dim=-1, descending=True).values
    margin = top[..., cfg.top_k - 1] - top[..., cfg.top_k]
    return int((margin < ROUTING_TIE_TOLERANCE).sum())


def _bfloat16(x):
    """x rounded to bfloat16 (nearest even) and back: the values a bfloat16 tensor holds."""
    return x.bfloat16().float()


def linear_product(x, w, cfg):
    """x @ w (every linear layer but the MoE router, which Loom keeps in float32). With
    cfg.matmul_dtype "bfloat16", Loom's mixed precision spelled out in float32:
    the inputs rounded to bfloat16, an exact-input float32 product, the result rounded once.
    Autograd through the roundings gives the backward Loom runs: the incoming gradient rounded,
    each gradient product rounded, then widened (PyTorch's own bfloat16 CPU GEMM is not used:
    whether it accumulates in float32 depends on the layout and version)."""
    if cfg.matmul_dtype == "bfloat16":
        return _bfloat16(_bfloat16(x) @ _bfloat16(w))
    return x @ w


def causal_mask(T, device):
    """[T, T] booleans: query i may attend to keys 0..i."""
    return torch.ones(T, T, dtype=torch.bool, device=device).tril_()


class Bfloat16CausalAttention(torch.autograd.Function):
    """Loom's causal_attention on bfloat16 q, k, v (mixed precision), spelled out in float32 on
    [B, H, T, Dh] tensors, with the roundings where Loom's kernels store bfloat16: forward
    P = softmax(scale * q k^T) from rounded q, k (float32 product and softmax), the output
    round(round(P) v). Backward (P recomputed in float32): the incoming gradient rounded,
    dP = dy v^T and dS = P * (dP - rowsum(dP * P)) in float32, then dv = round(round(P)^T dy),
    dq = round(scale * round(dS) k), dk = round(scale * round(dS)^T q)."""

    @staticmethod
    def forward(ctx, q, k, v, scale):
        q, k, v = _bfloat16(q), _bfloat16(k), _bfloat16(v)
        p = Bfloat16CausalAttention._probabilities(q, k, scale)
        ctx.save_for_backward(q, k, v)
        ctx.scale = scale
        return _bfloat16(_bfloat16(p) @ v)

    @staticmethod
    def backward(ctx, dy):
        q, k, v = ctx.saved_tensors
        scale = ctx.scale
        dy = _bfloat16(dy)
        p = Bfloat16CausalAttention._probabilities(q, k, scale)
        dp = dy @ v.transpose(-2, -1)
        ds = p * (dp - (dp * p).sum(dim=-1, keepdim=True))
        p, ds = _bfloat16(p), _bfloat16(ds)
        dv = _bfloat16(p.transpose(-2, -1) @ dy)
        dq = _bfloat16(scale * (ds @ k))
        dk = _bfloat16(scale * (ds.transpose(-2, -1) @ q))
        return dq, dk, dv, None

    @staticmethod
    def _probabilities(q, k, scale):
        s = (q @ k.transpose(-2, -1)) * scale
        return torch.softmax(s.masked_fill(~causal_mask(q.shape[-2], q.device), float("-inf")),
                             dim=-1)


def moe_mlp(p, pre, m, cfg, stats):
    """The MoE MLP of block `pre` on m [B, T, D]; adds its aux loss (Switch Transformer form,
    per group, mean over the groups) and counts to `stats`."""
    B, T, D = m.shape
    E = cfg.experts
    probs = torch.softmax(m @ p[pre + "moe.router.weight"], dim=-1)  # float32 always  # [B, T, E]
    choices, weights, kept, f = route(probs, cfg)
    out = torch.zeros_like(m)
    for e in range(E):               # experts in order: the order Loom's combine adds them
        mine = kept & (choices == e)                   # [B, T, k]; a token picks e at most once
        tokens = mine.any(dim=-1)                      # [B, T]
        if not bool(tokens.any()):
            continue
        weight = (weights * mine).sum(dim=-1)[tokens]  # [n]
        rows = m[tokens]                               # [n, D]
        h = F.gelu(linear_product(rows, p[pre + "moe.experts.c_fc.weight"][e], cfg)
                   + p[pre + "moe.experts.c_fc.bias"][e])
        h = (linear_product(h, p[pre + "moe.experts.c_proj.weight"][e], cfg)
             + p[pre + "moe.experts.c_proj.bias"][e])
        out = out.index_put((tokens.nonzero(as_tuple=True)), out[tokens] + weight[:, None] * h)
    aux = (E * (f * probs.mean(dim=1)).sum(dim=-1)).mean()
    stats["aux_loss"] = stats.get("aux_loss", 0.0) + aux
    stats["dropped"] = stats.get("dropped", 0) + int((~kept).sum())
    stats["near_ties"] = stats.get("near_ties", 0) + routing_near_ties(probs, cfg)
    counts = torch.zeros(E, dtype=torch.int64)
    for e in range(E):
        counts[e] = int((choices == e).sum())
    stats["tokens_per_expert"] = stats.get("tokens_per_expert", torch.zeros(E, dtype=torch.int64)) + counts
    return out


def gpt_block(p, cfg, i, h, causal, stats):
    """Transformer block i: [B, T, D] -> [B, T, D] (causal: causal_mask(T))."""
    B, T, D = h.shape
    H = cfg.heads
    Dh = D // H
    scale = math.sqrt(Dh)
    pre = f"h.{i}."
    a = F.layer_norm(h, (D,), p[pre + "ln_1.weight"], p[pre + "ln_1.bias"], cfg.eps)
    q = linear_product(a, p[pre + "attn.q.weight"], cfg) + p[pre + "attn.q.bias"]
    k = linear_product(a, p[pre + "attn.k.weight"], cfg) + p[pre + "attn.k.bias"]
    v = linear_product(a, p[pre + "attn.v.weight"], cfg) + p[pre + "attn.v.bias"]
    q = q.view(B, T, H, Dh).transpose(1, 2)  # [B,H,T,Dh]
    k = k.view(B, T, H, Dh).transpose(1, 2)
    v = v.view(B, T, H, Dh).transpose(1, 2)
    if cfg.matmul_dtype == "bfloat16":
        o = Bfloat16CausalAttention.apply(q, k, v, 1.0 / scale)
    else:
        s = (q @ k.transpose(-2, -1)) / scale    # [B,H,T,T]
        s = s.masked_fill(~causal, float("-inf"))
        att = torch.softmax(s, dim=-1)
        o = att @ v
    o = o.transpose(1, 2).reshape(B, T, D)
    h = h + (linear_product(o, p[pre + "attn.c_proj.weight"], cfg) + p[pre + "attn.c_proj.bias"])
    m = F.layer_norm(h, (D,), p[pre + "ln_2.weight"], p[pre + "ln_2.bias"], cfg.eps)
    if i in getattr(cfg, "moe_layers", ()):
        return h + moe_mlp(p, pre, m, cfg, stats)
    m = F.gelu(linear_product(m, p[pre + "mlp.c_fc.weight"], cfg)
               + p[pre + "mlp.c_fc.bias"])  # exact erf
    return h + (linear_product(m, p[pre + "mlp.c_proj.weight"], cfg) + p[pre + "mlp.c_proj.bias"])


def gpt_forward(p, cfg, x, y=None, stats=None, run_block=None):
    """The loss (with y) and the logits. RUN_BLOCK(block, h) runs each block(h) (e.g. under
    torch.utils.checkpoint); by default it is called directly."""
    B, T = x.shape
    D = cfg.width
    if T > cfg.context:
        raise ValueError(f"sequence length {T} exceeds context {cfg.context}")
    if stats is None:
        stats = {}
    h = F.embedding(x, p["wte"]) + p["wpe"][:T]
    causal = causal_mask(T, x.device)
    for i in range(cfg.layers):
        def block(h, i=i):
            return gpt_block(p, cfg, i, h, causal, stats)
        h = block(h) if run_block is None else run_block(block, h)
    h = F.layer_norm(h, (D,), p["ln_f.weight"], p["ln_f.bias"], cfg.eps)
    logits = linear_product(h, p["lm_head.weight"], cfg)  # [B,T,V], no bias
    loss = None
    if y is not None:
        loss = F.cross_entropy(logits.reshape(-1, cfg.vocab), y.reshape(-1))
        if "aux_loss" in stats:
            loss = loss + cfg.aux_loss_coefficient * stats["aux_loss"]
    return loss, logits


def moe_gpt_forward(p, cfg, x, y=None, stats=None):
    """The MoE GPT: loss = mean cross-entropy + aux_loss_coefficient * (sum over MoE layers of
    the mean over groups of E * sum_e f_e P_e). `stats` (a dict) receives "dropped" (assignments
    over capacity, summed over layers and groups) and "tokens_per_expert"."""
    return gpt_forward(p, cfg, x, y, stats)


def mlp_forward(p, cfg, x, y=None, stats=None):
    e = F.embedding(x, p["wte"])                              # [B,T,D]
    h = F.gelu(e @ p["fc1.weight"] + p["fc1.bias"])           # [B,T,F]
    logits = h @ p["fc2.weight"] + p["fc2.bias"]              # [B,T,V]
    loss = None
    if y is not None:
        loss = F.cross_entropy(logits.reshape(-1, cfg.vocab), y.reshape(-1))
    return loss, logits


MODELS = {
    "gpt": (GPTConfig, gpt_param_specs, gpt_forward),
    "moe-gpt": (MoEGPTConfig, gpt_param_specs, moe_gpt_forward),
    "mlp": (MLPConfig, mlp_param_specs, mlp_forward),
}
