"""loom.Job: a Loom job built in Python with the proto's vocabulary (proto/job.proto): a
placement and pipeline stages, variables, inputs, ops with SBP hints, fetches, a loss and an
optimizer. It wraps a job_pb2.Job (job.proto_message) that every method edits in place; any
field the builder has no method for, including fields added to the proto later, is set with
job.set(field=value) or keywords of the constructor and of variable(), input() and op().

    job = loom.Job("mlp", placement=["cpu:0", "cpu:1"], num_steps=10)
    x = job.input("x", [8, 16], loom.random_normal(std=1.0, seed=1), sbp=["S(0)"])
    w = job.variable("w", [16, 4], loom.normal(std=0.02, seed=2), sbp=["Replicate"])
    y = job.matmul("y", x, w)
    job.fetch(y)
    message = job.to_proto()      # validated (errors name the op), a copy

Job.from_file reads the three formats loomctl reads: text (.pbtxt, any other name), binary (.pb)
and JSON (.json, the proto3 JSON mapping).
"""

from google.protobuf import json_format, text_format

from loom import validation, values
from loom.errors import JobInvalid
from loom.fields import set_fields
from loom.protos import job_pb2

PIPELINE_SCHEDULES = {"1f1b": job_pb2.ONE_F_ONE_B, "gpipe": job_pb2.GPIPE,
                      "zero-bubble": job_pb2.ZERO_BUBBLE, "zb-h2": job_pb2.ZERO_BUBBLE_H2,
                      "interleaved": job_pb2.INTERLEAVED, "zb-v": job_pb2.ZERO_BUBBLE_V}


def _placement_or_none(placement, hierarchy=None):
    if placement is None:
        return None
    return values.placement(placement, hierarchy)


class Job:
    """A job under construction; see the module's docstring."""

    def __init__(self, name="job", placement=None, hierarchy=None, **fields):
        self.proto_message = job_pb2.Job(name=name)
        if placement is not None:
            self.set_placement(placement, hierarchy)
        self.set(**fields)

    # Reading and writing whole jobs.

    @classmethod
    def from_proto(cls, message):
        """A Job holding a copy of the job_pb2.Job MESSAGE (or its serialized bytes)."""
        job = cls.__new__(cls)
        job.proto_message = job_pb2.Job()
        if isinstance(message, (bytes, bytearray)):
            job.proto_message.ParseFromString(bytes(message))
        else:
            job.proto_message.CopyFrom(message)
        return job

    @classmethod
    def from_text(cls, text, what="<text>"):
        """A Job from protobuf text format; JobInvalid naming WHAT and the line on a parse
        error."""
        message = job_pb2.Job()
        try:
            text_format.Parse(text, message)
        except text_format.ParseError as error:
            raise JobInvalid(f"{what} is not a valid job: {error}", what) from None
        return cls.from_proto(message)

    @classmethod
    def from_file(cls, path):
        """A Job from a file as loomctl reads it: binary when PATH ends in .pb, the proto3 JSON
        mapping when it ends in .json, text format otherwise."""
        path = str(path)
        with open(path, "rb") as file:
            contents = file.read()
        if path.endswith(".pb"):
            message = job_pb2.Job()
            try:
                message.ParseFromString(contents)
            except Exception:  # protobuf's DecodeError
                raise JobInvalid(f"{path} is not a binary job", path) from None
            return cls.from_proto(message)
        if path.endswith(".json"):
            message = job_pb2.Job()
            try:
                json_format.Parse(contents.decode("utf-8"), message)
            except (json_format.ParseError, UnicodeDecodeError) as error:
                raise JobInvalid(f"{path} is not a valid JSON job: {error}", path) from None
            return cls.from_proto(message)
        try:
            text = contents.decode("utf-8")
        except UnicodeDecodeError:
            raise JobInvalid(f"{path} is not a valid job: not UTF-8 text", path) from None
        return cls.from_text(text, path)

    def to_proto(self, validate=True):
        """A copy of the job as a job_pb2.Job, validated first unless VALIDATE is False."""
        if validate:
            self.validate()
        message = job_pb2.Job()
        message.CopyFrom(self.proto_message)
        return message

    def to_text(self):
        """The job in protobuf text format (as hand-written .pbtxt files and loom-gpt --emit)."""
        return text_format.MessageToString(self.proto_message)

    def to_json(self):
        """The job in the proto3 JSON mapping (field names as in the .proto)."""
        return json_format.MessageToJson(self.proto_message, preserving_proto_field_name=True)

    def save(self, path):
        """Writes the job for loomctl: binary (.pb), JSON (.json) or text format (otherwise)."""
        path = str(path)
        if path.endswith(".pb"):
            data = self.proto_message.SerializeToString()
        elif path.endswith(".json"):
            data = self.to_json().encode()
        else:
            data = self.to_text().encode()
        with open(path, "wb") as file:
            file.write(data)

    def validate(self):
        """Raises loom.JobInvalid naming the op, variable or input at fault (validation.py)."""
        validation.validate(self.proto_message)
        return self

    def copy(self):
        return Job.from_proto(self.proto_message)

    def __copy__(self):
        return self.copy()

    def __deepcopy__(self, memo):
        return self.copy()

    def __eq__(self, other):
        return isinstance(other, Job) and self.proto_message == other.proto_message

    def __repr__(self):
        message = self.proto_message
        return (f"loom.Job({message.name!r}: {len(message.variables)} variables, "
                f"{len(message.inputs)} inputs, {len(message.ops)} ops)")

    # Job-level fields.

    def set(self, **fields):
        """Sets any Job field by its proto name (fields.py: messages, dicts, lists, enum names):
        job.set(num_steps=100, register_memory="REGISTER_MEMORY_SEPARATE")."""
        set_fields(self.proto_message, "job", **fields)
        return self

    @property
    def name(self):
        return self.proto_message.name

    @property
    def steps(self):
        return self.proto_message.num_steps

    @steps.setter
    def steps(self, value):
        self.proto_message.num_steps = value

    @property
    def loss(self):
        return self.proto_message.loss

    @loss.setter
    def loss(self, tensor):
        self.proto_message.loss = tensor

    @property
    def optimizer(self):
        return self.proto_message.optimizer

    @optimizer.setter
    def optimizer(self, optimizer):
        """An Optimizer message (loom.adamw, loom.sgd) or a dict ({"adamw": {...}})."""
        self.set(optimizer=optimizer)

    def set_placement(self, devices, hierarchy=None):
        """The job's default placement: device names (and a hierarchy) or a Placement."""
        self.proto_message.placement.CopyFrom(values.placement(devices, hierarchy))
        return self

    def add_stage(self, devices, hierarchy=None):
        """Appends a pipeline stage's placement; returns the stage's index."""
        self.proto_message.stage_placements.add().CopyFrom(values.placement(devices, hierarchy))
        return len(self.proto_message.stage_placements) - 1

    def set_schedule(self, schedule):
        """The pipeline schedule: one of PIPELINE_SCHEDULES' names ("1f1b", "gpipe",
        "zero-bubble", "zb-h2", "interleaved", "zb-v") or the enum's name or number."""
        value = PIPELINE_SCHEDULES.get(schedule, schedule) if isinstance(schedule, str) else \
            schedule
        return self.set(pipeline_schedule=value)

    def fetch(self, *tensors):
        """Fetches these tensors every step."""
        self.proto_message.fetch.extend(tensors)
        return self

    def sum_over_step(self, *tensors):
        """Fetched scalars whose step value is the sum over the micro-batches (summed_fetches)."""
        self.proto_message.summed_fetches.extend(tensors)
        return self

    # Tensors.

    def variable(self, name, shape, init, sbp=None, placement=None, data_type=None,
                 frozen=False, **fields):
        """Adds a variable (INIT: loom.constant, loom.normal, loom.uniform or an Initializer);
        returns its name. PLACEMENT unset: the job's; SBP unset: broadcast on every axis."""
        variable = self.proto_message.variables.add(name=name, shape=list(shape))
        if not isinstance(init, job_pb2.Initializer):
            init = values.constant(init) if isinstance(init, (int, float)) else init
        set_fields(variable, f"variable '{name}'", initializer=init)
        variable.data_type = values.data_type(data_type)
        if sbp:
            variable.sbp.extend(sbp)
        if placement is not None:
            variable.placement.CopyFrom(values.placement(placement))
        variable.frozen = frozen
        set_fields(variable, f"variable '{name}'", **fields)
        return name

    def input(self, name, shape, source, sbp=None, placement=None, data_type=None, **fields):
        """Adds an input fed every step (SOURCE: loom.random_normal, loom.random_uniform,
        loom.random_integers, loom.token_file, loom.token_dataset, or an Input holding one);
        returns its name.
        SBP unset: S(0) on every axis (data parallel)."""
        tensor_input = self.proto_message.inputs.add()
        if isinstance(source, job_pb2.Input):
            tensor_input.CopyFrom(source)
        else:
            set_fields(tensor_input, f"input '{name}'", **dict(source))
        tensor_input.name = name
        tensor_input.ClearField("shape")
        tensor_input.shape.extend(shape)
        if data_type is not None:
            tensor_input.data_type = values.data_type(data_type)
        if sbp:
            tensor_input.ClearField("sbp")
            tensor_input.sbp.extend(sbp)
        if placement is not None:
            tensor_input.placement.CopyFrom(values.placement(placement))
        set_fields(tensor_input, f"input '{name}'", **fields)
        return name

    # Ops.

    def op(self, type, name, inputs, attributes=None, outputs=None, placement=None,
           hierarchy=None, output_sbp=None, stage=None, keep_float32=False, **fields):
        """Adds an op of TYPE (loomctl compile --list-ops); returns its first output's name.
        OUTPUTS unset: one output named like the op. OUTPUT_SBP: one hint (a list of SBP
        strings, [] leaves it free) per output, or one list of strings for the first output.
        ATTRIBUTES: a dict of Python values (values.attribute). The placement is written even
        when empty, as the C++ JobBuilder writes it, so that jobs compare equal."""
        where = f"op '{name}'"
        if isinstance(inputs, str):
            raise JobInvalid(f"{where}: inputs is a list of tensor names, got the string "
                             f"'{inputs}'", name)
        outputs = list(outputs) if outputs else [name]
        op = self.proto_message.ops.add(name=name, type=type, inputs=list(inputs),
                                        outputs=outputs)
        for key, value in (attributes or {}).items():
            try:
                op.attributes[key].CopyFrom(values.attribute(value))
            except ValueError as error:
                raise JobInvalid(f"{where}: attribute '{key}': {error}", name) from None
        op.placement.SetInParent()
        if placement is not None:
            op.placement.CopyFrom(values.placement(placement, hierarchy))
        if output_sbp:
            hints = [output_sbp] if all(isinstance(item, str) for item in output_sbp) else \
                output_sbp
            for hint in hints:
                op.output_sbp.add(sbp=list(hint))
        if stage is not None:
            op.stage = stage
        if keep_float32:
            op.keep_float32 = True
        set_fields(op, where, **fields)
        return outputs[0]

    def matmul(self, name, a, b, transpose_a=False, transpose_b=False, **options):
        attributes = {}
        if transpose_a:
            attributes["transpose_a"] = True
        if transpose_b:
            attributes["transpose_b"] = True
        return self.op("matmul", name, [a, b], attributes, **options)

    def add(self, name, a, b, **options):
        return self.op("add", name, [a, b], **options)

    def bias_add(self, name, x, bias, **options):
        return self.op("bias_add", name, [x, bias], **options)

    def relu(self, name, x, **options):
        return self.op("relu", name, [x], **options)

    def gelu(self, name, x, **options):
        return self.op("gelu", name, [x], **options)

    # Training.

    def train(self, loss, optimizer, steps=None, micro_batches=None, max_grad_norm=None,
              **fields):
        """Makes the job train: minimises LOSS with OPTIMIZER (loom.adamw / loom.sgd)."""
        self.proto_message.loss = loss
        self.set(optimizer=optimizer)
        if steps is not None:
            self.proto_message.num_steps = steps
        if micro_batches is not None:
            self.proto_message.num_micro_batches = micro_batches
        if max_grad_norm is not None:
            self.proto_message.max_grad_norm = max_grad_norm
        return self.set(**fields)

    def evaluate(self, every_steps, inputs, loss=None):
        """Evaluates on held-out data while the job trains (Job.evaluation): in every step t
        (0-based) with t % EVERY_STEPS == 0, the loss (LOSS: another scalar, e.g. a
        cross-entropy without auxiliary losses; None: the job's loss) of one batch of INPUTS,
        on the weights the step starts from, is that step's validation loss (Step events'
        validation_loss). The n-th evaluation reads batch n of INPUTS.

        INPUTS replace the job inputs the loss reads: a dict {input name: source}, each source
        what job.input takes (loom.token_dataset(...), loom.token_file(...), an Input or a dict
        of Input fields), or a list of Input messages with names. Shape, data type, placement
        and SBP are the job input's: the source's data type (which loom.token_dataset and
        loom.random_integers fill) is dropped, and to_proto() refuses the others.

            job.evaluate(100, {"x": loom.token_dataset("/data/valid", seed=1),
                               "y": loom.token_dataset("/data/valid", seed=1, targets=True)})
        """
        if isinstance(every_steps, bool) or not isinstance(every_steps, int):
            raise JobInvalid(f"evaluation: every_steps is a whole number of steps, got "
                             f"{every_steps!r}", "evaluation")
        evaluation = job_pb2.Evaluation(every_steps=every_steps)
        if isinstance(inputs, dict):
            named = list(inputs.items())
        elif isinstance(inputs, (str, bytes)) or not hasattr(inputs, "__iter__"):
            raise JobInvalid(f"evaluation: inputs is a dict {{input name: source}} or a list of "
                             f"named Input messages, got {inputs!r}", "evaluation")
        else:
            named = []
            for index, item in enumerate(inputs):
                if not isinstance(item, job_pb2.Input):
                    raise JobInvalid(f"evaluation: input {index} is {item!r}, not an Input "
                                     "message (give a dict {input name: source} for sources)",
                                     "evaluation")
                named.append((item.name, item))
        for name, source in named:
            held_out = evaluation.inputs.add()
            if isinstance(source, job_pb2.Input):
                held_out.CopyFrom(source)
            else:
                set_fields(held_out, f"evaluation input '{name}'", **dict(source))
            held_out.name = name
            held_out.ClearField("data_type")
        if loss is not None:
            evaluation.loss = loss
        self.proto_message.evaluation.CopyFrom(evaluation)
        return self

    def start_from(self, checkpoint_path):
        """Starts the job from a Loom checkpoint (Job.initial_state, as loomctl --init): every
        variable by name, and with the optimizer's state and step when the checkpoint holds
        "optimizer.step" and the job has an optimizer (first_step = that step)."""
        from loom import checkpoint  # here: checkpoint imports numpy, the builder needs not

        step = checkpoint.optimizer_step(checkpoint_path)
        state = job_pb2.InitialState(path=str(checkpoint_path))
        if step is not None and self.proto_message.optimizer.WhichOneof("kind"):
            state.optimizer_state = True
            state.first_step = step
        self.proto_message.initial_state.CopyFrom(state)
        return self

