"""loom.models.gpt(...): the reference GPT (examples/gpt, tests/oracle/models.py) as a loom.Job,
dense or mixture-of-experts, in any parallel layout of loom-gpt: the same job, field for field,
that `loom-gpt --emit` writes for the same flags (a test compares them).

    job = loom.models.gpt(layers=2, width=64, dp=2, steps=50, data="/data/tokens.bin")
    job = loom.models.gpt(data=["/data/web/*.bin", "/data/code"], data_weights=[3, 1],
                          data_format="uint16", eot_token=50256, vocab=50304, data_seed=1)
    job = loom.models.gpt(data="/data/train", eval_every=100, eval_data="/data/valid")

Ported from tools/loom-gpt/gpt_model.cc (BuildGptJob); loom-gpt's --write-init (the initial
weights as a file) is not: the job's initializers draw the same values on the daemons.
"""

import math

from loom import values
from loom.job import PIPELINE_SCHEDULES, Job
from loom.models.gpt_config import (LEARNING_RATE_DECAYS, NO_DECAY_PATTERNS,
                                    OFFLOAD_ACTIVATIONS, RECOMPUTE, GptConfig)
from loom.models.gpt_layout import GptLayout
from loom.models.gpt_parameters import gpt_parameters
from loom.protos import job_pb2, plan_pb2


class _GptGraph:
    """Writes the model's ops into a Job (GptGraph of gpt_model.cc)."""

    def __init__(self, config, job):
        self.config = config
        self.layout = GptLayout(config)
        self.job = job
        self.aux_losses = []
        self.dropped_counts = []
        self.expert_counts = []
        # The block (Op.block, recomputation) of the ops being written; "" outside blocks.
        self.current_block = ""

    def options(self, stage, hint=None):
        options = {}
        if self.config.stage_count > 1:
            options["stage"] = stage
        if hint:
            options["output_sbp"] = [list(hint)]
        if self.current_block:
            options["block"] = self.current_block
        return options

    def build(self):
        """Returns the loss tensor."""
        config, job, layout = self.config, self.job, self.layout
        last = config.stage_count - 1
        tokens = job.op("embedding", "wte.lookup", ["wte", "x"], **self.options(0))
        h = job.add("h.in", tokens, "wpe", **self.options(0, layout.activation()))
        for layer in range(config.layers):
            h = self.block(layer, h, config.stage_of_layer(layer))
        normed = self.layer_norm("ln_f", h, last)
        logits = job.matmul("lm_head", normed, "lm_head.weight", **self.options(last))
        token_loss = job.op("sparse_cross_entropy", "token_loss", [logits, "y"],
                            **self.options(last))
        if not self.aux_losses:
            return job.op("reduce_mean", "loss", [token_loss], **self.options(last))
        cross_entropy = job.op("reduce_mean", "cross_entropy", [token_loss],
                               **self.options(last))
        aux = self.sum("moe.aux_loss", self.aux_losses, last)
        return job.add("loss", cross_entropy, aux, **self.options(last))

    def moe_counts(self):
        if not self.dropped_counts:
            return []
        last = self.config.stage_count - 1
        dropped = self.sum("moe.dropped", self.dropped_counts, last)
        per_expert = self.sum("moe.tokens_per_expert", self.expert_counts, last)
        return [dropped, per_expert]

    def layer_norm(self, name, x, stage):
        return self.job.op("layer_norm", name, [x, name + ".weight", name + ".bias"],
                           {"epsilon": float(self.config.ln_eps)}, **self.options(stage))

    def linear(self, name, x, stage, hint=None):
        product = self.job.matmul(name + ".matmul", x, name + ".weight", **self.options(stage))
        return self.job.bias_add(name, product, name + ".bias", **self.options(stage, hint))

    def split_heads(self, name, x, stage):
        config = self.config
        head_width = config.width // config.heads
        heads = self.job.op("reshape", name + ".heads", [x],
                            {"shape": [-1, config.context, config.heads, head_width]},
                            **self.options(stage))
        return self.job.op("transpose", name + ".transposed", [heads],
                           {"permutation": [0, 2, 1, 3]}, **self.options(stage))

    def block(self, layer, h, stage):
        """One transformer block, its ops in the recomputation block "h.<layer>."."""
        self.current_block = f"h.{layer}."
        try:
            return self.block_ops(layer, h, stage)
        finally:
            self.current_block = ""

    def block_ops(self, layer, h, stage):
        config, job, layout = self.config, self.job, self.layout
        prefix = f"h.{layer}."
        a = self.layer_norm(prefix + "ln_1", h, stage)
        column_split = layout.activation("S(2)")
        qkv = []
        for letter in "qkv":
            name = prefix + "attn." + letter
            qkv.append(self.split_heads(name, self.linear(name, a, stage, column_split), stage))
        scale = 1.0 / math.sqrt(float(config.width // config.heads))
        attention = job.op("causal_attention", prefix + "attn.core", qkv, {"scale": scale},
                           **self.options(stage, layout.activation("S(1)")))
        merged_heads = job.op("transpose", prefix + "attn.core.transposed", [attention],
                              {"permutation": [0, 2, 1, 3]}, **self.options(stage))
        merged = job.op("reshape", prefix + "attn.merged", [merged_heads],
                        {"shape": [-1, config.context, config.width]}, **self.options(stage))
        projected = self.linear(prefix + "attn.c_proj", merged, stage, layout.activation())
        after_attention = job.add(prefix + "attn.residual", h, projected,
                                  **self.options(stage, layout.activation()))
        m = self.layer_norm(prefix + "ln_2", after_attention, stage)
        if config.is_moe_layer(layer):
            moe = self.moe(prefix + "moe.", m, stage)
            return job.add(prefix + "moe.residual", after_attention, moe,
                           **self.options(stage, layout.activation()))
        fc = self.linear(prefix + "mlp.c_fc", m, stage, column_split)
        hidden = job.gelu(prefix + "mlp.gelu", fc, **self.options(stage, column_split))
        mlp_out = self.linear(prefix + "mlp.c_proj", hidden, stage, layout.activation())
        return job.add(prefix + "mlp.residual", after_attention, mlp_out,
                       **self.options(stage, layout.activation()))

    def moe(self, prefix, x, stage):
        """The MoE MLP of one block: [B, T, D] -> [B, T, D] (see gpt_model.cc's Moe)."""
        config, job, layout = self.config, self.job, self.layout
        E, D = config.experts, config.width
        # The router stays float32 under mixed precision (keep_float32).
        logits = job.matmul(prefix + "router", x, prefix + "router.weight", keep_float32=True,
                            **self.options(stage, layout.activation()))
        probabilities = job.op("softmax", prefix + "router.softmax", [logits],
                               **self.options(stage))
        slot_token = prefix + "route.slot_token"
        slot_weight = prefix + "route.slot_weight"
        expert_fraction = prefix + "route.expert_fraction"
        dropped = prefix + "route.dropped"
        route_options = self.options(stage)
        route_options["output_sbp"] = [layout.activation() for _ in range(4)]
        job.op("moe_route", prefix + "route", [probabilities],
               {"k": int(config.top_k), "capacity_factor": float(config.capacity_factor)},
               outputs=[slot_token, slot_weight, expert_fraction, dropped], **route_options)
        dispatched = job.op("moe_dispatch", prefix + "dispatch", [x, slot_token],
                            **self.options(stage))
        expert_major = job.op("transpose", prefix + "experts.in", [dispatched],
                              {"permutation": [1, 0, 2, 3]},
                              **self.options(stage, layout.expert_activation()))
        rows = job.op("reshape", prefix + "experts.rows", [expert_major], {"shape": [E, -1, D]},
                      **self.options(stage, layout.expert_activation()))
        fc = self.expert_linear(prefix + "experts.c_fc", rows, stage)
        hidden = job.gelu(prefix + "experts.gelu", fc, **self.options(stage))
        out = self.expert_linear(prefix + "experts.c_proj", hidden, stage)
        slots = job.op("reshape", prefix + "experts.slots", [out],
                       {"shape": [E, config.batch // config.micro_batches, -1, D]},
                       **self.options(stage))
        batch_major = job.op("transpose", prefix + "experts.out", [slots],
                             {"permutation": [1, 0, 2, 3]}, **self.options(stage))
        combined = job.op("moe_combine", prefix + "combine",
                          [batch_major, slot_token, slot_weight], {"tokens": config.context},
                          **self.options(stage, layout.activation()))
        # Switch Transformer load balancing per sequence: E * sum_e f_e * P_e, mean over them.
        mean_probability = job.op("reduce_mean", prefix + "aux.mean_probability",
                                  [probabilities], {"axes": [1]}, **self.options(stage))
        product = job.op("multiply", prefix + "aux.product", [expert_fraction, mean_probability],
                         **self.options(stage))
        per_sequence = job.op("reduce_sum", prefix + "aux.per_sequence", [product],
                              {"axes": [1]}, **self.options(stage))
        mean = job.op("reduce_mean", prefix + "aux.mean", [per_sequence], **self.options(stage))
        self.dropped_counts.append(job.op("reduce_sum", prefix + "dropped", [dropped],
                                          **self.options(stage)))
        assignments = job.op("scale", prefix + "assignments", [expert_fraction],
                             {"scale": float(config.top_k * config.context)},
                             **self.options(stage))
        self.expert_counts.append(job.op("reduce_sum", prefix + "tokens_per_expert",
                                         [assignments], {"axes": [0]}, **self.options(stage)))
        self.aux_losses.append(job.op(
            "scale", prefix + "aux.loss", [mean],
            {"scale": float(config.aux_loss_coefficient) * float(E)}, **self.options(stage)))
        return combined

    def expert_linear(self, name, x, stage):
        """x [E, N, K] @ weight [E, K, M] + bias [E, M] (as [E, 1, M])."""
        job, layout = self.job, self.layout
        product = job.matmul(name + ".matmul", x, name + ".weight",
                             **self.options(stage, layout.expert_activation()))
        bias = job.op("reshape", name + ".bias.rows", [name + ".bias"],
                      {"shape": [self.config.experts, 1, -1]}, **self.options(stage))
        return job.add(name, product, bias, **self.options(stage, layout.expert_activation()))

    def sum(self, name, terms, stage):
        """terms[0] + terms[1] + ... as adds named NAME.1, NAME.2, ..., the last NAME."""
        total = terms[0]
        for index in range(1, len(terms)):
            total = self.job.add(name if index + 1 == len(terms) else f"{name}.{index}", total,
                                 terms[index], **self.options(stage))
        if len(terms) == 1:
            total = self.job.op("identity", name, [total], **self.options(stage))
        return total


def _stage_devices(config, stage):
    per_stage = config.dp * config.tp
    group = config.group_of_stage(stage)
    return [config.device_name(index)
            for index in range(group * per_stage, (group + 1) * per_stage)]


def _token_dataset(config, targets, paths, weights=None):
    """The TokenDataset of input x (TARGETS False) or y (True): a source per path of PATHS (the
    training data's or the held-out data's), with WEIGHTS (None: unset)."""
    dataset = job_pb2.TokenDataset(targets=targets)
    for index, path in enumerate(paths):
        source = dataset.sources.add(paths=[path], format=config.data_format)
        if weights is not None:
            source.weight = float(weights[index])
    if config.eot_token is not None:
        dataset.end_of_text = config.eot_token
    if config.data_in_order:
        dataset.in_order = True
    return dataset


def gpt_job(config):
    """The training job of a GptConfig (validated first: ValueError naming the setting)."""
    config.validate()
    layout = GptLayout(config)
    stages = config.stage_count
    last = stages - 1
    job = Job("gpt")
    all_devices = [config.device_name(index) for index in range(config.device_count)]
    job.set_placement(all_devices, layout.hierarchy() if stages == 1 else [])
    if stages > 1:
        for stage in range(stages):
            job.add_stage(_stage_devices(config, stage), layout.hierarchy())
    job.steps = config.steps
    graph = _GptGraph(config, job)
    loss = graph.build()
    job.fetch(loss)
    for count in graph.moe_counts():
        job.fetch(count)
    if config.experts > 0:
        job.sum_over_step("moe.dropped")

    message = job.proto_message

    def place(tensor, stage):
        if stages > 1:
            tensor.placement.CopyFrom(values.placement(_stage_devices(config, stage),
                                                       layout.hierarchy()))

    for position, parameter in enumerate(gpt_parameters(config)):
        variable = message.variables.add(name=parameter.name, shape=parameter.shape)
        if parameter.init == "normal":
            variable.initializer.CopyFrom(values.normal(parameter.std,
                                                        parameter.seed(config, position)))
        else:
            variable.initializer.CopyFrom(values.constant(1.0 if parameter.init == "ones"
                                                          else 0.0))
        variable.sbp.extend(layout.expert_variable() if parameter.expert
                            else layout.variable(parameter.tensor_parallel_sbp))
        place(variable, parameter.stage)
    for name, targets, stage in [("x", False, 0), ("y", True, last)]:
        tensor_input = message.inputs.add(name=name, shape=[config.batch, config.context],
                                          data_type=plan_pb2.INT32, sbp=layout.activation())
        tensor_input.token_dataset.CopyFrom(_token_dataset(config, targets, config.data_paths,
                                                           config.data_weights))
        if config.data_seed:
            tensor_input.seed = config.data_seed
        place(tensor_input, stage)
        if config.eval_every > 0:
            # The held-out data replacing this input in the evaluation (shape, type, placement
            # and SBP are the job input's).
            held_out = message.evaluation.inputs.add(name=name)
            held_out.token_dataset.CopyFrom(_token_dataset(config, targets,
                                                           config.eval_data_paths))
            if config.data_seed:
                held_out.seed = config.data_seed
    if config.eval_every > 0:
        message.evaluation.every_steps = config.eval_every
        # The MoE GPT's loss adds the load-balancing loss: evaluate the cross-entropy alone.
        if config.experts > 0:
            message.evaluation.loss = "cross_entropy"

    beta1, beta2 = config.betas
    job.train(loss, values.adamw(learning_rate=config.lr, beta1=beta1, beta2=beta2,
                                 epsilon=config.eps, weight_decay=config.weight_decay))
    if config.lr_warmup > 0 or config.lr_decay != "constant":
        message.optimizer.learning_rate_schedule.CopyFrom(job_pb2.LearningRateSchedule(
            warmup_steps=config.lr_warmup,
            decay=LEARNING_RATE_DECAYS[config.lr_decay],
            decay_steps=config.lr_decay_steps if config.lr_decay_steps > 0 else config.steps,
            min_learning_rate=config.min_lr))
    if config.weight_decay_on == "matrices":
        group = message.optimizer.parameter_groups.add(
            name="no_decay", variables=NO_DECAY_PATTERNS, weight_decay=0.0)
        if config.no_decay_lr_scale != 1.0:
            group.learning_rate_scale = config.no_decay_lr_scale
    if config.micro_batches > 1:
        message.num_micro_batches = config.micro_batches
    if stages > 1:
        message.pipeline_schedule = PIPELINE_SCHEDULES[config.schedule]
    if config.max_grad_norm > 0:
        message.max_grad_norm = config.max_grad_norm
    if config.zero_stage:
        message.zero_stage = config.zero_stage
    if config.recompute != "none":
        message.recompute = job_pb2.Recompute.Value(RECOMPUTE[config.recompute])
    if config.offload_activations != "none":
        message.offload_activations = job_pb2.OffloadActivations.Value(
            OFFLOAD_ACTIVATIONS[config.offload_activations])
    if config.matmul_data_type != "float32":
        message.matmul_data_type = values.data_type(config.matmul_data_type)
    return job


_CONFIG_FIELDS = {field for field in GptConfig.__dataclass_fields__}


def _config_value(key, value):
    """A setting as GptConfig keeps it: lists as tuples (a single data path stays a string)."""
    if key in ("moe_layers", "betas"):
        return tuple(value)
    if key in ("data", "data_weights", "eval_data") and not isinstance(value, (str, bytes)) and \
            hasattr(value, "__iter__"):
        return tuple(value)
    return value


def gpt(config=None, **settings):
    """The reference GPT as a loom.Job. SETTINGS are loom-gpt's flags with underscores (dp, tp,
    pp, virtual_stages, micro_batches, schedule, devices_per_node, device_type, max_grad_norm, recompute,
    offload_activations, zero_stage, matmul_data_type, experts, moe_layers, top_k, capacity_factor, aux_loss_coefficient, ep,
    batch, steps, vocab, context, width, layers, heads, mlp_width, ln_eps, lr, betas, eps,
    weight_decay, weight_decay_on, no_decay_lr_scale, lr_warmup, lr_decay, lr_decay_steps,
    min_lr, seed, data, data_weights, data_format, eot_token, data_in_order, data_seed,
    eval_every, eval_data), or a GptConfig as CONFIG. DATA is a path or a list of paths, one
    source of the blend each (docs/DATA.md); EVAL_DATA likewise, the held-out data evaluated
    every EVAL_EVERY steps (Job.evaluation). Any other keyword is a field of the Job (set after
    the model is built, e.g. register_memory="...")."""
    config = GptConfig() if config is None else GptConfig(**vars(config))
    job_fields = {}
    for key, value in settings.items():
        if key in _CONFIG_FIELDS:
            setattr(config, key, _config_value(key, value))
        elif key in job_pb2.Job.DESCRIPTOR.fields_by_name:
            job_fields[key] = value
        else:
            raise TypeError(f"gpt() got an unknown setting '{key}' (the GPT's: "
                            f"{', '.join(sorted(_CONFIG_FIELDS))}; or a Job field)")
    job = gpt_job(config)
    job.set(**job_fields)
    return job
