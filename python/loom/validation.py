"""Local checks of a job before it is sent (Job.validate): the mistakes a builder makes, caught
with a message naming the op, variable or input, as the daemon's compiler would name it:

  - names: every variable, input and op has one, no two share it, no tensor has two producers;
  - ops: a type, outputs, inputs that some variable, input or op produces ("grad/<variable>"
    too when the job has a loss: autodiff writes them), a stage that has a placement, at most
    one output SBP hint per output;
  - SBP strings in either spelling ("S(0)", "Shard(0)", ...), one per axis of the placement's
    hierarchy, no partial SBP on a variable or input;
  - placements: a hierarchy whose product is the device count, and devices for it;
  - token inputs (token_file, token_dataset): int32 or int64 ids of rank 2 [batch, sequence],
    a path, a known format; a token_dataset's sources each with non-empty paths and a weight
    that is finite and >= 0 and leaves it a share of the blend's pattern, end_of_text >= 0
    (the quotas of docs/DATA.md's blends);
  - fetch, loss and summed_fetches name tensors that exist;
  - evaluation (Job.evaluation, as the compiler's evaluation branch checks it): every_steps > 0
    when inputs are given; a loss to evaluate that some op produces; each held-out input names
    a job input that the evaluated loss reads, once, has a source, sets no placement or SBP and
    no shape or data type other than the job input's; every job input the loss reads is
    replaced; no name starts with "evaluation/" (the branch's); no op or input carries the
    compiler's evaluation flag.

Shapes and op types are the compiler's to check (the daemon answers INVALID_ARGUMENT naming them).
"""

import math

from loom import sbp as sbp_module
from loom.errors import JobInvalid
from loom.protos import plan_pb2

GRADIENT_PREFIX = "grad/"
# The names of the evaluation branch the compiler adds (compiler/evaluation_branch.h).
EVALUATION_PREFIX = "evaluation/"

# The token formats of TokenFile.format and TokenSource.format ("": bytes).
TOKEN_FORMATS = ("bytes", "uint16", "uint32")
# A blend's samples go to its sources by a pattern of this many samples (docs/DATA.md, Blends).
BLEND_PATTERN_SAMPLES = 10000


def _axes(placement, fallback_axes):
    if not placement.devices:
        return fallback_axes
    return max(len(placement.hierarchy), 1)


def _check_placement(placement, who):
    if not placement.devices:
        if placement.hierarchy:
            raise JobInvalid(f"{who}: a placement with a hierarchy needs its devices", who)
        return
    for device in placement.devices:
        if not device:
            raise JobInvalid(f"{who}: placement has an empty device name", who)
    if len(set(placement.devices)) != len(placement.devices):
        raise JobInvalid(f"{who}: placement names a device twice: {list(placement.devices)}", who)
    if placement.hierarchy:
        if any(extent < 1 for extent in placement.hierarchy):
            raise JobInvalid(f"{who}: hierarchy {list(placement.hierarchy)} has an extent < 1",
                             who)
        if math.prod(placement.hierarchy) != len(placement.devices):
            raise JobInvalid(
                f"{who}: hierarchy {list(placement.hierarchy)} has "
                f"{math.prod(placement.hierarchy)} places for {len(placement.devices)} devices",
                who)


def _check_sbp(texts, axes, who, allow_partial):
    parsed = []
    for text in texts:
        try:
            parsed.append(sbp_module.parse(text))
        except ValueError as error:
            raise JobInvalid(f"{who}: {error}", who) from None
    if parsed and len(parsed) != axes:
        raise JobInvalid(f"{who}: SBP {list(texts)} has {len(parsed)} entries but the "
                         f"placement's hierarchy has {axes} axes", who)
    if not allow_partial and any(entry.startswith("P") for entry in parsed):
        raise JobInvalid(f"{who}: SBP {list(texts)} is partial, which a variable or input "
                         "cannot be", who)


def _check_token_format(format, who, what):
    if format and format not in TOKEN_FORMATS:
        raise JobInvalid(f"{who}: {what} format '{format}' is not \"bytes\", \"uint16\" or "
                         "\"uint32\"", who)


def _blend_quotas(weights):
    """Each source's samples in every BLEND_PATTERN_SAMPLES (docs/DATA.md, Blends): x_j =
    (w_j / W) * P in IEEE double (W summed in source order), q_j = floor(x_j), the samples left
    one each to the largest x_j - q_j (the lower j first)."""
    total = 0.0
    for weight in weights:
        total += weight
    shares = [(weight / total) * BLEND_PATTERN_SAMPLES for weight in weights]
    quotas = [math.floor(share) for share in shares]
    left = BLEND_PATTERN_SAMPLES - sum(quotas)
    by_remainder = sorted(range(len(weights)), key=lambda j: (-(shares[j] - quotas[j]), j))
    for j in by_remainder[:left]:
        quotas[j] += 1
    return quotas


def _check_token_dataset(dataset, who):
    if not dataset.sources:
        raise JobInvalid(f"{who}: token_dataset has no sources", who)
    for index, source in enumerate(dataset.sources):
        where = f"token_dataset source {index}"
        if not source.paths:
            raise JobInvalid(f"{who}: {where} has no paths", who)
        for position, path in enumerate(source.paths):
            if not path:
                raise JobInvalid(f"{who}: {where}: path {position} is empty", who)
        _check_token_format(source.format, who, where)
        if not (math.isfinite(source.weight) and source.weight >= 0):
            raise JobInvalid(f"{who}: {where}: weight {source.weight} is not finite and >= 0 "
                             "(0 means 1)", who)
    if len(dataset.sources) > 1:
        weights = [source.weight or 1.0 for source in dataset.sources]
        for index, quota in enumerate(_blend_quotas(weights)):
            if quota == 0:
                raise JobInvalid(
                    f"{who}: token_dataset source {index}: weight {weights[index]:g} is under "
                    f"1/{BLEND_PATTERN_SAMPLES} of the blend's total {math.fsum(weights):g}, "
                    "which leaves it no samples", who)
    if dataset.HasField("end_of_text") and dataset.end_of_text < 0:
        raise JobInvalid(f"{who}: token_dataset end_of_text must be >= 0, got "
                         f"{dataset.end_of_text}", who)


def _check_token_source(tensor_input, who):
    """The token inputs' rules (the compiler's, as it words them): int32 or int64 ids of rank 2
    [batch, sequence], and a readable description of the files."""
    source = tensor_input.WhichOneof("source")
    if source not in ("token_file", "token_dataset"):
        return
    if tensor_input.data_type not in (plan_pb2.INT32, plan_pb2.INT64):
        raise JobInvalid(f"{who}: token ids need data_type INT32 or INT64", who)
    if len(tensor_input.shape) != 2:
        kind = "token-file" if source == "token_file" else "token-dataset"
        raise JobInvalid(f"{who}: a {kind} input is [batch, sequence], not rank "
                         f"{len(tensor_input.shape)}", who)
    if source == "token_file":
        if not tensor_input.token_file.path:
            raise JobInvalid(f"{who}: token_file has no path", who)
        _check_token_format(tensor_input.token_file.format, who, "token_file")
    else:
        _check_token_dataset(tensor_input.token_dataset, who)


def _check_evaluation_flags(job):
    """The compiler sets Op.evaluation and Input.evaluation on the branch it adds; a job may
    not."""
    for op in job.ops:
        if op.evaluation:
            raise JobInvalid(f"op '{op.name}' is marked evaluation (the compiler marks the ops "
                             "of the evaluation branch it adds; leave the flag unset)", op.name)
    for tensor_input in job.inputs:
        if tensor_input.evaluation:
            raise JobInvalid(f"input '{tensor_input.name}' is marked evaluation (the compiler "
                             "marks the inputs of the evaluation branch it adds; leave the flag "
                             "unset)", tensor_input.name)


def _inputs_read_by(tensor, producing_op, input_names):
    """The job inputs that TENSOR depends on through the ops (PRODUCING_OP: tensor -> op)."""
    found, seen, pending = set(), set(), [tensor]
    while pending:
        tensor = pending.pop()
        if tensor in seen:
            continue
        seen.add(tensor)
        if tensor in input_names:
            found.add(tensor)
        elif tensor in producing_op:
            pending.extend(producing_op[tensor].inputs)
    return found


def _check_evaluation(job, node_names, producers):
    """Job.evaluation's rules, worded as the compiler's (compiler/evaluation_branch.cc)."""
    _check_evaluation_flags(job)
    evaluation = job.evaluation
    if evaluation.every_steps < 0:
        raise JobInvalid(f"evaluation: every_steps must be > 0, got {evaluation.every_steps}",
                         "evaluation")
    if evaluation.every_steps == 0:
        if evaluation.inputs:
            raise JobInvalid("evaluation: inputs are given, but every_steps is 0 (set it to "
                             "evaluate every K steps)", "evaluation")
        return
    loss = evaluation.loss or job.loss
    if not loss:
        raise JobInvalid("evaluation: there is no loss to evaluate (set Job.loss or "
                         "evaluation.loss)", "evaluation")
    reserved = f"starts with '{EVALUATION_PREFIX}', which the evaluation branch reserves"
    for name, who in node_names.items():
        if name.startswith(EVALUATION_PREFIX):
            raise JobInvalid(f"evaluation: {who} {reserved}", name)
    for name, who in producers.items():
        if name.startswith(EVALUATION_PREFIX):
            raise JobInvalid(f"evaluation: tensor '{name}' of {who} {reserved}", name)
    producing_op = {output: op for op in job.ops for output in op.outputs}
    if loss not in producing_op and loss not in producers:
        raise JobInvalid(f"evaluation: the loss to evaluate '{loss}' is a tensor nothing "
                         "produces", loss)
    job_inputs = {tensor_input.name: tensor_input for tensor_input in job.inputs}
    read = _inputs_read_by(loss, producing_op, job_inputs)
    replaced = set()
    for index, given in enumerate(evaluation.inputs):
        if not given.name:
            raise JobInvalid(f"evaluation: input {index} has no name (name the job input it "
                             "replaces)", "evaluation")
        who = f"evaluation: input '{given.name}'"
        job_input = job_inputs.get(given.name)
        if job_input is None:
            raise JobInvalid(f"{who} is no input of the job (the job's: "
                             f"{', '.join(job_inputs) or 'none'})", given.name)
        if given.name not in read:
            raise JobInvalid(f"{who} is not read by the loss '{loss}'", given.name)
        if given.name in replaced:
            raise JobInvalid(f"{who} is given twice", given.name)
        replaced.add(given.name)
        if given.WhichOneof("source") is None:
            raise JobInvalid(f"{who} has no source", given.name)
        if given.shape and list(given.shape) != list(job_input.shape):
            raise JobInvalid(f"{who} sets shape {list(given.shape)}, other than the job "
                             f"input's {list(job_input.shape)} (leave it unset)", given.name)
        if given.data_type != plan_pb2.DATA_TYPE_UNSPECIFIED and \
                given.data_type != job_input.data_type:
            raise JobInvalid(f"{who} sets a data type other than the job input's (leave it "
                             "unset)", given.name)
        if given.HasField("placement") or given.sbp:
            raise JobInvalid(f"{who} sets a placement or SBP: it has the job input's (leave "
                             "them unset)", given.name)
        if given.evaluation:
            raise JobInvalid(f"{who} is marked evaluation (the compiler marks the inputs it "
                             "adds; leave the flag unset)", given.name)
        # The source's own rules, on the input it becomes (the job input's shape and type).
        effective = type(job_input)()
        effective.CopyFrom(given)
        effective.ClearField("shape")
        effective.shape.extend(job_input.shape)
        effective.data_type = job_input.data_type
        _check_token_source(effective, who)
    missing = sorted(read - replaced)
    if missing:
        raise JobInvalid(f"evaluation: the loss '{loss}' reads input '{missing[0]}', which "
                         "evaluation.inputs does not replace", missing[0])


def validate(job):
    """Raises JobInvalid (naming the culprit) for the first problem of the job_pb2.Job JOB."""
    _check_placement(job.placement, "the job's placement")
    job_axes = max(len(job.placement.hierarchy), 1)
    stage_axes = []
    for index, stage in enumerate(job.stage_placements):
        _check_placement(stage, f"stage {index}")
        stage_axes.append(_axes(stage, job_axes))

    node_names = {}
    producers = {}

    def declare_node(name, who):
        if not name:
            raise JobInvalid(f"{who} has no name", who)
        if name in node_names:
            raise JobInvalid(f"the name '{name}' is used twice ({node_names[name]} and {who})",
                             who)
        node_names[name] = who

    def declare_tensor(tensor, who):
        if not tensor:
            raise JobInvalid(f"{who} has an output with no name", who)
        if tensor in producers:
            raise JobInvalid(f"tensor '{tensor}' is produced by both {producers[tensor]} and "
                             f"{who}", who)
        producers[tensor] = who

    for variable in job.variables:
        who = f"variable '{variable.name}'"
        declare_node(variable.name, who)
        declare_tensor(variable.name, who)
        if variable.initializer.WhichOneof("kind") is None:
            raise JobInvalid(f"{who} has no initializer", who)
        _check_placement(variable.placement, who)
        _check_sbp(variable.sbp, _axes(variable.placement, job_axes), who, allow_partial=False)
    for tensor_input in job.inputs:
        who = f"input '{tensor_input.name}'"
        declare_node(tensor_input.name, who)
        declare_tensor(tensor_input.name, who)
        if tensor_input.WhichOneof("source") is None:
            raise JobInvalid(f"{who} has no source", who)
        _check_token_source(tensor_input, who)
        _check_placement(tensor_input.placement, who)
        _check_sbp(tensor_input.sbp, _axes(tensor_input.placement, job_axes), who,
                   allow_partial=False)
    for op in job.ops:
        who = f"op '{op.name}'"
        declare_node(op.name, who)
        if not op.type:
            raise JobInvalid(f"{who} has no type", who)
        if not op.outputs:
            raise JobInvalid(f"{who} has no outputs", who)
        for output in op.outputs:
            declare_tensor(output, who)

    trains = bool(job.loss)

    def exists(tensor):
        return tensor in producers or (trains and tensor.startswith(GRADIENT_PREFIX))

    for op in job.ops:
        who = f"op '{op.name}'"
        for tensor in op.inputs:
            if not exists(tensor):
                raise JobInvalid(f"{who} reads tensor '{tensor}', which no variable, input or op "
                                 "produces", who)
        if op.HasField("stage") and not 0 <= op.stage < len(job.stage_placements):
            raise JobInvalid(f"{who}: stage {op.stage} has no placement (the job has "
                             f"{len(job.stage_placements)} stage placements)", who)
        _check_placement(op.placement, who)
        if op.placement.devices:
            axes = _axes(op.placement, job_axes)
        elif op.HasField("stage"):
            axes = stage_axes[op.stage]
        else:
            axes = job_axes
        if len(op.output_sbp) > len(op.outputs):
            raise JobInvalid(f"{who} has {len(op.output_sbp)} output SBP hints for "
                             f"{len(op.outputs)} outputs", who)
        for output, hint in zip(op.outputs, op.output_sbp):
            _check_sbp(hint.sbp, axes, f"{who}, output '{output}'", allow_partial=True)

    for tensor in job.fetch:
        if not exists(tensor):
            raise JobInvalid(f"fetch names tensor '{tensor}', which nothing produces", tensor)
    if job.loss and job.loss not in producers:
        raise JobInvalid(f"the loss '{job.loss}' is a tensor nothing produces", job.loss)
    for tensor in job.summed_fetches:
        if tensor not in job.fetch:
            raise JobInvalid(f"summed_fetches names '{tensor}', which the job does not fetch",
                             tensor)
        if tensor == job.loss:
            raise JobInvalid(f"summed_fetches names '{tensor}', the loss, whose step value is "
                             "always the mean", tensor)
    _check_evaluation(job, node_names, producers)
    for field in ("num_steps", "num_micro_batches", "register_slots"):
        if getattr(job, field) < 0:
            raise JobInvalid(f"{field} must not be negative, got {getattr(job, field)}", field)
