"""The SBPs of the reference GPT's tensors on a stage's placement (tools/loom-gpt's Layout). A
stage's devices are one axis, or two: [dp, tp] (tensor parallel) or [dp / ep, ep] (expert
parallel inside data parallel). The first axis always splits the batch; the second is the
"model" axis: tensor-parallel splits, or the experts' split."""


class GptLayout:
    def __init__(self, config):
        self.data_parallel = config.dp
        self.tensor_parallel = config.tp
        self.expert_parallel = config.ep

    @property
    def two_dimensional(self):
        return ((self.data_parallel > 1 and self.tensor_parallel > 1)
                or (1 < self.expert_parallel < self.data_parallel))

    def hierarchy(self):
        if not self.two_dimensional:
            return []
        if self.tensor_parallel > 1:
            return [self.data_parallel, self.tensor_parallel]
        return [self.data_parallel // self.expert_parallel, self.expert_parallel]

    def sbp(self, data_axis, model_axis):
        if self.two_dimensional:
            return [data_axis, model_axis]
        if self.tensor_parallel > 1:
            return [model_axis]
        return [data_axis]

    def variable(self, model_axis):
        """A variable: replicated over data-parallel ranks."""
        return self.sbp("B", model_axis)

    def activation(self, model_axis="B"):
        """Split by samples over data-parallel ranks, MODEL_AXIS on the tensor-parallel axis."""
        return self.sbp("S(0)", model_axis if self.tensor_parallel > 1 else "S(0)")

    def expert_variable(self):
        """[E, ...]: split over the expert-parallel group, replicated across groups."""
        if self.expert_parallel == 1:
            return self.variable("B")
        if self.two_dimensional:
            return ["B", "S(0)"]
        return ["S(0)"]

    def expert_activation(self):
        """[E, B, ...]: experts split over the group, the batch (axis 1) across groups."""
        if self.expert_parallel == 1:
            return self.sbp("S(1)", "B")
        if self.two_dimensional:
            return ["S(1)", "S(0)"]
        return ["S(0)"]
