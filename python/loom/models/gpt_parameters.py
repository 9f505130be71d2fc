"""The reference GPT's parameters in canonical order (tests/oracle/models.py's order, and
tools/loom-gpt's GptParameters): name, shape, initialisation, tensor-parallel SBP, stage."""

import dataclasses
import math


@dataclasses.dataclass
class GptParameter:
    name: str
    shape: list
    init: str  # "normal", "zeros" or "ones"
    std: float = 0.0
    # On the tensor-parallel axis (Megatron layout): "S(1)", "S(0)" or "B".
    tensor_parallel_sbp: str = "B"
    stage: int = 0
    # An expert's weight or bias ([E, ...]), split over the expert-parallel group.
    expert: bool = False

    def seed(self, config, position):
        """The seed of the POSITION-th parameter under the config's seed."""
        return config.seed * 65536 + position


def gpt_parameters(config):
    """Every parameter of the (valid) GptConfig, in canonical order."""
    V, T, D, F = config.vocab, config.context, config.width, config.mlp_width
    std = 0.02
    projection_std = 0.02 / math.sqrt(2.0 * float(config.layers))
    last = config.stage_count - 1
    parameters = []

    def add(name, shape, init, init_std, sbp, stage, expert=False):
        parameters.append(GptParameter(name, shape, init, init_std, sbp, stage, expert))

    add("wte", [V, D], "normal", std, "B", 0)
    add("wpe", [T, D], "normal", std, "B", 0)
    for layer in range(config.layers):
        p = f"h.{layer}."
        stage = config.stage_of_layer(layer)
        add(p + "ln_1.weight", [D], "ones", 0.0, "B", stage)
        add(p + "ln_1.bias", [D], "zeros", 0.0, "B", stage)
        for name in "qkv":
            add(f"{p}attn.{name}.weight", [D, D], "normal", std, "S(1)", stage)
            add(f"{p}attn.{name}.bias", [D], "zeros", 0.0, "S(0)", stage)
        add(p + "attn.c_proj.weight", [D, D], "normal", projection_std, "S(0)", stage)
        add(p + "attn.c_proj.bias", [D], "zeros", 0.0, "B", stage)
        add(p + "ln_2.weight", [D], "ones", 0.0, "B", stage)
        add(p + "ln_2.bias", [D], "zeros", 0.0, "B", stage)
        if config.is_moe_layer(layer):
            E = config.experts
            add(p + "moe.router.weight", [D, E], "normal", std, "B", stage)
            add(p + "moe.experts.c_fc.weight", [E, D, F], "normal", std, "B", stage, True)
            add(p + "moe.experts.c_fc.bias", [E, F], "zeros", 0.0, "B", stage, True)
            add(p + "moe.experts.c_proj.weight", [E, F, D], "normal", projection_std, "B",
                stage, True)
            add(p + "moe.experts.c_proj.bias", [E, D], "zeros", 0.0, "B", stage, True)
            continue
        add(p + "mlp.c_fc.weight", [D, F], "normal", std, "S(1)", stage)
        add(p + "mlp.c_fc.bias", [F], "zeros", 0.0, "S(0)", stage)
        add(p + "mlp.c_proj.weight", [F, D], "normal", projection_std, "S(0)", stage)
        add(p + "mlp.c_proj.bias", [D], "zeros", 0.0, "B", stage)
    add("ln_f.weight", [D], "ones", 0.0, "B", last)
    add("ln_f.bias", [D], "zeros", 0.0, "B", last)
    add("lm_head.weight", [D, V], "normal", std, "B", last)
    return parameters
