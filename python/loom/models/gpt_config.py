"""GptConfig: the settings of the reference GPT (tools/loom-gpt/gpt_model.h's GptConfig, field for
field under loom-gpt's flag names), its validation (ValidateGptConfig's rules and messages), the
device names and the layer split over pipeline stages."""

import dataclasses
import math
import numbers

from loom.job import PIPELINE_SCHEDULES

INT64_MAX = 2**63 - 1

# Job.optimizer.learning_rate_schedule's decays by their loom-gpt names (--lr-decay).
LEARNING_RATE_DECAYS = {"constant": "DECAY_CONSTANT", "linear": "DECAY_LINEAR",
                        "cosine": "DECAY_COSINE"}

# Job.recompute's values by their loom-gpt names (--recompute).
RECOMPUTE = {"none": "RECOMPUTE_NONE", "selective": "RECOMPUTE_SELECTIVE", "full": "RECOMPUTE_FULL"}

# Job.offload_activations's values by their loom-gpt names (--offload-activations).
OFFLOAD_ACTIVATIONS = {"none": "OFFLOAD_NONE", "all": "OFFLOAD_ALL",
                       "over-budget": "OFFLOAD_OVER_BUDGET"}

# The variables of the parameter group "no_decay" (--weight-decay-on matrices): the embeddings,
# biases and LayerNorm weights.
NO_DECAY_PATTERNS = ("wte", "wpe", "*.bias", "*ln_*")


def _number(value):
    """VALUE as absl::StrCat writes a double (six significant digits), for loom-gpt's words."""
    return f"{value:.6g}" if isinstance(value, float) else f"{value}"


@dataclasses.dataclass
class GptConfig:
    """The reference GPT of tests/oracle/models.py; the defaults are the "tiny" model and
    loom-gpt's defaults. Each field is the loom-gpt flag of the same name (--mlp-width is
    mlp_width, --lr is lr, --beta1/--beta2 are betas)."""

    # Model.
    vocab: int = 256
    context: int = 64
    width: int = 128
    layers: int = 4
    heads: int = 4
    mlp_width: int = 512
    ln_eps: float = 1e-5
    # Mixture of experts (0 experts: dense MLPs only).
    experts: int = 0
    moe_layers: tuple = (1, 3)
    top_k: int = 2
    capacity_factor: float = 1.25
    aux_loss_coefficient: float = 0.01
    # Training.
    batch: int = 16
    steps: int = 20
    lr: float = 1e-3
    betas: tuple = (0.9, 0.95)
    eps: float = 1e-8
    weight_decay: float = 0.1
    max_grad_norm: float = 0.0
    # Activation recomputation (Job.recompute): "none", "selective" (each block's cheap ops) or
    # "full" (each block from its input).
    recompute: str = "none"
    # Activation offload (Job.offload_activations): "none", "all" (every stash) or "over-budget"
    # (the stashes of the devices over their memory budget).
    offload_activations: str = "none"
    # ZeRO as SBP (Job.zero_stage): 0, 1, 2 or 3.
    zero_stage: int = 0
    # The learning-rate schedule (Job.optimizer.learning_rate_schedule): linear warmup over
    # lr_warmup steps, then "constant", "linear" or "cosine" decay to min_lr at step
    # lr_decay_steps (0: steps).
    lr_warmup: int = 0
    lr_decay: str = "constant"
    lr_decay_steps: int = 0
    min_lr: float = 0.0
    # "all": weight decay on every parameter; "matrices": not on biases, LayerNorm weights and
    # the embeddings (the parameter group "no_decay"), whose learning rate is lr times
    # no_decay_lr_scale.
    weight_decay_on: str = "all"
    no_decay_lr_scale: float = 1.0
    # Data (Input.token_dataset, docs/DATA.md): data is one path or a list of them, each a
    # source of the blend (a file, a directory or a pattern); data_weights (None: unset) one
    # weight > 0 per source; data_format applies to every source; eot_token (None: unset) ends
    # documents; data_in_order: no shuffle; data_seed: the shuffle's seed (Input.seed).
    data: object = "/usr/share/common-licenses/GPL-3"
    data_weights: object = None
    data_format: str = "bytes"
    eot_token: object = None
    data_in_order: bool = False
    data_seed: int = 0
    # Evaluation (Job.evaluation): eval_every > 0 evaluates every eval_every steps (from step 1)
    # the loss (the MoE GPT's cross-entropy, without the auxiliary loss) of a batch of the
    # held-out eval_data, a path or a list of them (one source each, read with data_format,
    # eot_token, data_in_order and data_seed as the training data is); 0: no evaluation.
    eval_every: int = 0
    eval_data: object = None
    # Parallel layout.
    dp: int = 1
    tp: int = 1
    pp: int = 1
    # Interleaved 1F1B (schedule "interleaved"): stages per device group, pp * virtual_stages
    # stages in all, stage k on group k % pp.
    virtual_stages: int = 1
    micro_batches: int = 1
    ep: int = 1
    schedule: str = "1f1b"
    devices_per_node: int = 0
    device_type: str = "cpu"
    matmul_data_type: str = "float32"
    seed: int = 0

    @property
    def device_count(self):
        """pp * dp * tp."""
        return self.pp * self.dp * self.tp

    def device_name(self, index):
        """"cpu:<i>", or "node<i / K>/cpu:<i % K>" with devices_per_node K."""
        if self.devices_per_node <= 0:
            return f"{self.device_type}:{index}"
        return (f"node{index // self.devices_per_node}/{self.device_type}:"
                f"{index % self.devices_per_node}")

    @property
    def data_paths(self):
        """data as a list of paths (one per source)."""
        return [self.data] if isinstance(self.data, str) else list(self.data)

    @property
    def eval_data_paths(self):
        """eval_data as a list of paths (one per source; [] when unset)."""
        if self.eval_data is None:
            return []
        return [self.eval_data] if isinstance(self.eval_data, str) else list(self.eval_data)

    @property
    def stage_count(self):
        """The pipeline stages: pp * virtual_stages (ZB-V: pp * 2)."""
        return self.pp * self.stages_per_group

    @property
    def stages_per_group(self):
        """The stages on each group of devices: virtual_stages (ZB-V: 2)."""
        return 2 if self.schedule == "zb-v" else self.virtual_stages

    def group_of_stage(self, stage):
        """The device group holding STAGE: round-robin, or V-shaped under zb-v."""
        if self.schedule == "zb-v" and stage >= self.pp:
            return 2 * self.pp - 1 - stage
        return stage % self.pp

    def first_layer(self, stage):
        """The first block of STAGE (earlier stages take one more when the stages do not
        divide the layers)."""
        base, extra = divmod(self.layers, self.stage_count)
        return stage * base + min(stage, extra)

    def stage_of_layer(self, layer):
        stage = 0
        while stage + 1 < self.stage_count and self.first_layer(stage + 1) <= layer:
            stage += 1
        return stage

    def is_moe_layer(self, layer):
        return self.experts > 0 and layer in self.moe_layers

    def validate(self):
        """ValueError("GPT config: ...") naming the setting that is wrong, as loom-gpt says."""
        def error(message):
            return ValueError(f"GPT config: {message}")

        for name, value in [("vocab", self.vocab), ("context", self.context),
                            ("width", self.width), ("layers", self.layers),
                            ("heads", self.heads), ("mlp_width", self.mlp_width),
                            ("batch", self.batch), ("steps", self.steps),
                            ("data_parallel", self.dp), ("tensor_parallel", self.tp),
                            ("pipeline_stages", self.pp), ("virtual_stages", self.virtual_stages),
                            ("micro_batches", self.micro_batches)]:
            if isinstance(value, bool) or not isinstance(value, int):
                raise error(f"{name} must be an integer, got {value!r}")
            if value < 1:
                raise error(f"{name} must be >= 1, got {value}")
        # The stage and device counts are products of numbers the user chose; loom-gpt's are int64.
        if self.pp * self.stages_per_group > INT64_MAX:
            raise error(f"pipeline stages {self.pp} x {self.stages_per_group} per device group "
                        "overflow int64")
        if self.pp * self.dp * self.tp > INT64_MAX:
            raise error("devices pipeline_stages x data_parallel x tensor_parallel = "
                        f"{self.pp} x {self.dp} x {self.tp} overflow int64")
        if self.width % self.heads:
            raise error(f"width {self.width} is not divisible by heads {self.heads}; choose "
                        "heads dividing the width")
        if self.heads % self.tp:
            raise error(f"heads {self.heads} is not divisible by the tensor-parallel degree "
                        f"{self.tp} (each rank holds whole attention heads)")
        if self.mlp_width % self.tp:
            raise error(f"mlp_width {self.mlp_width} is not divisible by the tensor-parallel "
                        f"degree {self.tp}")
        if self.experts < 0:
            raise error(f"experts must be >= 0, got {self.experts}")
        if self.ep < 1 or self.dp % self.ep:
            raise error(f"the expert-parallel degree {self.ep} must divide the data-parallel "
                        f"degree {self.dp} (expert parallelism splits the experts over "
                        "data-parallel ranks)")
        if self.ep > 1 and self.experts == 0:
            raise error("expert parallelism needs experts (experts is 0)")
        if self.ep > 1 and self.tp > 1:
            raise error("expert and tensor parallelism together are not supported; use one")
        if self.experts > 0:
            if not self.moe_layers:
                raise error("experts > 0 but no MoE layers given")
            for layer in self.moe_layers:
                if layer < 0 or layer >= self.layers:
                    raise error(f"MoE layer {layer} is not a block (0 to {self.layers - 1})")
            if not math.isfinite(self.aux_loss_coefficient) or self.aux_loss_coefficient < 0:
                raise error("aux loss coefficient must be finite and >= 0, got "
                            f"{self.aux_loss_coefficient}")
        if self.layers < self.stage_count:
            raise error(f"layers {self.layers} < pipeline stages {self.stage_count}: every stage "
                        "needs at least one block")
        if (self.virtual_stages > 1) != (self.schedule == "interleaved"):
            raise error(f"virtual_stages {self.virtual_stages} needs the interleaved schedule"
                        if self.virtual_stages > 1 else
                        f"virtual_stages {self.virtual_stages}: the interleaved schedule needs "
                        "virtual_stages >= 2")
        if self.batch % (self.dp * self.micro_batches):
            raise error(f"batch {self.batch} is not divisible by data_parallel x micro_batches "
                        f"= {self.dp} x {self.micro_batches}")
        if not (self.ln_eps >= 0 and math.isfinite(self.ln_eps)):
            raise error(f"layer-norm epsilon must be finite and >= 0, got {self.ln_eps}")
        if not (self.lr > 0 and math.isfinite(self.lr)):
            raise error(f"learning rate must be > 0, got {self.lr}")
        if len(self.betas) != 2:
            raise error(f"betas are two numbers (beta1, beta2), got {self.betas!r}")
        beta1, beta2 = self.betas
        if not (0 <= beta1 < 1 and 0 <= beta2 < 1):
            raise error(f"AdamW betas must be in [0, 1), got ({beta1}, {beta2})")
        if not self.eps > 0:
            raise error(f"AdamW epsilon must be > 0, got {self.eps}")
        if not self.weight_decay >= 0:
            raise error(f"weight decay must be >= 0, got {self.weight_decay}")
        for name, value in [("lr_warmup", self.lr_warmup),
                            ("lr_decay_steps", self.lr_decay_steps)]:
            if isinstance(value, bool) or not isinstance(value, int):
                raise error(f"{name} must be an integer, got {value!r}")
        if self.lr_warmup < 0 or self.lr_decay_steps < 0:
            raise error("learning-rate warmup and decay steps must be >= 0, got "
                        f"{self.lr_warmup} and {self.lr_decay_steps}")
        if self.lr_decay not in LEARNING_RATE_DECAYS:
            raise error(f"unknown learning-rate decay '{self.lr_decay}' (constant, linear or "
                        "cosine)")
        if not 0 <= self.min_lr <= self.lr:
            raise error("the minimum learning rate must be in [0, lr], got "
                        f"{_number(self.min_lr)}")
        if self.weight_decay_on not in ("all", "matrices"):
            raise error("weight decay applies to 'all' or 'matrices', got "
                        f"'{self.weight_decay_on}'")
        if not (self.no_decay_lr_scale >= 0 and math.isfinite(self.no_decay_lr_scale)):
            raise error("the no-decay group's learning-rate scale must be >= 0, got "
                        f"{_number(self.no_decay_lr_scale)}")
        if not (self.max_grad_norm >= 0 and math.isfinite(self.max_grad_norm)):
            raise error("max_grad_norm must be >= 0 (0: no clipping), got "
                        f"{self.max_grad_norm}")
        self._validate_data(error)
        if self.device_type not in ("cpu", "cuda"):
            raise error(f'device type must be "cpu" or "cuda", got "{self.device_type}"')
        if self.data_format not in ("bytes", "uint16", "uint32"):
            raise error('data format must be "bytes", "uint16" or "uint32", got '
                        f'"{self.data_format}"')
        if self.data_format == "bytes" and self.vocab < 256:
            raise error(f"vocab {self.vocab} < 256: a byte token file has tokens up to 255")
        if self.eot_token is not None:
            if self.data_format == "bytes" and self.eot_token >= 256:
                raise error(f"eot_token {self.eot_token} is not a byte: the bytes format has "
                            "tokens 0 to 255")
            if self.vocab <= self.eot_token:
                raise error(f"vocab {self.vocab} must exceed eot_token {self.eot_token}")
        if self.matmul_data_type not in ("float32", "bfloat16"):
            raise error("matmul data type must be float32 or bfloat16, got "
                        f"{self.matmul_data_type}")
        if isinstance(self.zero_stage, bool) or self.zero_stage not in (0, 1, 2, 3):
            raise error(f"zero_stage must be 0, 1, 2 or 3, got {self.zero_stage}")
        if self.recompute not in RECOMPUTE:
            raise error(f"unknown recompute {self.recompute!r} (none, selective or full)")
        if self.offload_activations not in OFFLOAD_ACTIVATIONS:
            raise error(f"unknown offload_activations {self.offload_activations!r} "
                        "(none, all or over-budget)")
        if self.schedule not in PIPELINE_SCHEDULES:
            raise error(f"unknown pipeline schedule {self.schedule!r} "
                        f"({', '.join(PIPELINE_SCHEDULES)})")
        return self

    def _validate_data(self, error):
        """The data settings' rules (loom-gpt's --data, --data-weights, --eot-token, ...)."""
        if not isinstance(self.data, str) and not (
                isinstance(self.data, (list, tuple)) and
                all(isinstance(path, str) for path in self.data)):
            raise error(f"data is a path or a list of paths, got {self.data!r}")
        paths = self.data_paths
        if not paths or not all(paths):
            raise error("no data file (data is empty)")
        if self.data_weights is not None:
            if isinstance(self.data_weights, (str, bytes)) or \
                    not hasattr(self.data_weights, "__len__"):
                raise error(f"data_weights is a list of numbers, got {self.data_weights!r}")
            if len(self.data_weights) != len(paths):
                raise error(f"{len(self.data_weights)} data weights for {len(paths)} data "
                            "paths: give one weight per data path")
            for path, weight in zip(paths, self.data_weights):
                if isinstance(weight, bool) or not isinstance(weight, numbers.Real):
                    raise error(f"data weight {weight!r} (of {path}) is not a number")
                if not (weight > 0 and math.isfinite(weight)):
                    raise error(f"data weight {_number(float(weight))} (of {path}) must be "
                                "finite and > 0")
        self._validate_evaluation(error)
        if self.eot_token is not None:
            if isinstance(self.eot_token, bool) or not isinstance(self.eot_token, int):
                raise error(f"eot_token must be an integer, got {self.eot_token!r}")
            if self.eot_token < 0:
                raise error(f"eot_token must be >= 0, got {self.eot_token}")
        if not isinstance(self.data_in_order, bool):
            raise error(f"data_in_order is True or False, got {self.data_in_order!r}")
        if isinstance(self.data_seed, bool) or not isinstance(self.data_seed, int) or \
                not -2**63 <= self.data_seed < 2**63:
            raise error(f"data_seed must be a 64-bit integer, got {self.data_seed!r}")

    def _validate_evaluation(self, error):
        """The evaluation settings' rules (loom-gpt's --eval-every and --eval-data)."""
        if isinstance(self.eval_every, bool) or not isinstance(self.eval_every, int):
            raise error(f"eval_every must be an integer, got {self.eval_every!r}")
        if self.eval_every < 0:
            raise error(f"eval_every must be >= 0 (0: no evaluation), got {self.eval_every}")
        if self.eval_data is not None and not isinstance(self.eval_data, str) and not (
                isinstance(self.eval_data, (list, tuple)) and
                all(isinstance(path, str) for path in self.eval_data)):
            raise error(f"eval_data is a path or a list of paths, got {self.eval_data!r}")
        paths = self.eval_data_paths
        if self.eval_every > 0 and not paths:
            raise error("evaluation needs held-out data (eval_data is empty)")
        if self.eval_every == 0 and paths:
            raise error("held-out data is given, but eval_every is 0")
        if not all(paths):
            raise error("an evaluation data path is empty")
