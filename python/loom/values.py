"""The small messages a job is made of, from Python values: placements, data types, op
attributes, variable initializers, input sources and optimizers. Each returns the proto message
(loom.protos.job_pb2 / plan_pb2), so it can be passed to Job's methods or set on a message.

    loom.placement(["cpu:0", "cpu:1", "cpu:2", "cpu:3"], hierarchy=[2, 2])
    loom.normal(std=0.02, seed=3)          loom.constant(0.0)
    loom.random_integers(below=256, seed=1)  loom.token_file("/data/tokens.bin", "uint16")
    loom.token_dataset("/data/web", format="uint16", end_of_text=50256, seed=1)
    loom.token_dataset([loom.token_source("/data/web/*.bin", weight=3, format="uint16"),
                        loom.token_source("/data/code", weight=1)], seed=1, targets=True)
    loom.adamw(learning_rate=1e-3, weight_decay=0.1)
"""

import numbers

from loom.fields import set_fields
from loom.protos import job_pb2, plan_pb2


def data_type(value):
    """A plan.DataType number from "float32", "FLOAT32", "bfloat16", ..., a number or None
    (None: unset, which the job reads as float32)."""
    if value is None:
        return plan_pb2.DATA_TYPE_UNSPECIFIED
    if isinstance(value, str):
        try:
            return plan_pb2.DataType.Value(value.upper())
        except ValueError:
            names = ", ".join(name.lower() for name in plan_pb2.DataType.keys()[1:])
            raise ValueError(f"unknown data type '{value}' (one of {names})") from None
    if value not in plan_pb2.DataType.values():
        raise ValueError(f"unknown data type number {value!r}")
    return value


def placement(devices, hierarchy=None):
    """A Placement: devices ("cpu:0", "node1/cpu:1", "cuda:0") and an optional hierarchy.
    Accepts a Placement message (copied) or a list of device names."""
    if isinstance(devices, job_pb2.Placement):
        result = job_pb2.Placement()
        result.CopyFrom(devices)
        if hierarchy is not None:
            result.ClearField("hierarchy")
            result.hierarchy.extend(hierarchy)
        return result
    if isinstance(devices, str):
        devices = [devices]
    return job_pb2.Placement(devices=list(devices), hierarchy=list(hierarchy or []))


def attribute(value):
    """A plan.AttributeValue: bool, int, float, str, a list of ints (int_list, also when empty)
    or of numbers with a float among them (float_list), or an AttributeValue (copied)."""
    if isinstance(value, plan_pb2.AttributeValue):
        result = plan_pb2.AttributeValue()
        result.CopyFrom(value)
        return result
    if isinstance(value, bool):
        return plan_pb2.AttributeValue(bool_value=value)
    if isinstance(value, numbers.Integral):
        return plan_pb2.AttributeValue(int_value=int(value))
    if isinstance(value, numbers.Real):
        return plan_pb2.AttributeValue(float_value=float(value))
    if isinstance(value, str):
        return plan_pb2.AttributeValue(string_value=value)
    if isinstance(value, (list, tuple)):
        if all(isinstance(item, numbers.Integral) and not isinstance(item, bool)
               for item in value):
            result = plan_pb2.AttributeValue()
            result.int_list.SetInParent()
            result.int_list.values.extend(int(item) for item in value)
            return result
        if all(isinstance(item, numbers.Real) and not isinstance(item, bool) for item in value):
            return plan_pb2.AttributeValue(
                float_list=plan_pb2.FloatList(values=[float(item) for item in value]))
    raise ValueError(f"an attribute is a bool, int, float, string or a list of numbers, "
                     f"got {value!r}")


def constant(value):
    """An Initializer: every element VALUE."""
    return job_pb2.Initializer(constant=float(value))


def normal(std, seed, mean=0.0):
    """An Initializer: mean + std * N(0, 1), a pure function of the seed and element index."""
    return job_pb2.Initializer(normal=job_pb2.NormalInitializer(mean=mean, std=std, seed=seed))


def uniform(low, high, seed):
    """An Initializer: uniform in [low, high)."""
    return job_pb2.Initializer(uniform=job_pb2.UniformInitializer(low=low, high=high, seed=seed))


def random_normal(std, seed, mean=0.0):
    """An Input source: seeded normal values, a new batch every step."""
    return job_pb2.Input(random_normal=job_pb2.NormalInitializer(mean=mean, std=std, seed=seed))


def random_uniform(low, high, seed):
    """An Input source: seeded uniform values in [low, high), a new batch every step."""
    return job_pb2.Input(
        random_uniform=job_pb2.UniformInitializer(low=low, high=high, seed=seed))


def random_integers(below, seed, data_type_name="int32"):
    """An Input source: random integers in [0, below) (token ids, labels)."""
    return job_pb2.Input(random_integers_below=below, seed=seed,
                         data_type=data_type(data_type_name))


def token_file(path, format="bytes", targets=False, **fields):
    """An Input source: token ids read from a file (Input.token_file); targets=True gives the
    next-token targets. More TokenFile fields by keyword."""
    source = job_pb2.Input(token_file=job_pb2.TokenFile(path=path, format=format,
                                                        targets=targets))
    set_fields(source.token_file, "token_file", **fields)
    return source


def token_source(paths, format=None, weight=None, **fields):
    """A TokenSource, one dataset of a blend (docs/DATA.md): PATHS, a string or a list of them,
    each a token file, a directory or a pattern ("/data/web/*.bin"); FORMAT "bytes", "uint16" or
    "uint32" (None: unset, which is bytes unless token_dataset's format fills it); WEIGHT its
    share of the blend (None: unset, which counts as 1). More TokenSource fields by keyword."""
    if isinstance(paths, str):
        paths = [paths]
    elif isinstance(paths, bytes) or not hasattr(paths, "__iter__"):
        raise ValueError(f"a token source's paths are a string or a list of strings, got "
                         f"{paths!r}")
    paths = list(paths)
    for path in paths:
        if not isinstance(path, str):
            raise ValueError(f"a token source's paths are strings, got {path!r}")
    source = job_pb2.TokenSource(paths=paths)
    if format is not None:
        source.format = format
    if weight is not None:
        source.weight = float(weight)
    set_fields(source, "token_source", **fields)
    return source


def _token_sources(sources):
    """SOURCES of token_dataset as a list of TokenSource messages."""
    if isinstance(sources, (str, job_pb2.TokenSource)):
        sources = [sources]
    elif isinstance(sources, bytes) or not hasattr(sources, "__iter__"):
        raise ValueError(f"token_dataset takes a path, a list of paths or a list of token "
                         f"sources (loom.token_source), got {sources!r}")
    sources = list(sources)
    if sources and all(isinstance(item, str) for item in sources):
        return [token_source(sources)]  # one source of these paths
    result = []
    for index, item in enumerate(sources):
        if isinstance(item, job_pb2.TokenSource):
            copy = job_pb2.TokenSource()
            copy.CopyFrom(item)
            result.append(copy)
        elif isinstance(item, dict):
            result.append(set_fields(job_pb2.TokenSource(), f"token source {index}", **item))
        else:
            raise ValueError(f"token source {index}: a blend's sources are loom.token_source(...) "
                             f"(or dicts of TokenSource fields), got {item!r}; one source of "
                             "several paths is token_dataset([path, path, ...])")
    return result


def token_dataset(sources, format=None, end_of_text=None, in_order=False, targets=False, seed=0,
                  data_type_name="int32", **fields):
    """An Input source: token ids from a dataset of token files, shuffled each epoch by SEED
    (Input.seed), or a weighted blend of datasets (Input.token_dataset; docs/DATA.md).

    SOURCES: a path (a file, a directory or a pattern) or a list of paths, for one dataset; or
    a list of loom.token_source(...) for a blend. FORMAT ("bytes", "uint16", "uint32") is set on
    every source that sets none. END_OF_TEXT: the token that ends a document (None: each file
    is one document). IN_ORDER: documents and samples in file order, not shuffled. TARGETS=True
    gives the next-token targets y (the same samples, shifted by one). The input's data type
    is int32 unless job.input(data_type=...) says otherwise. More TokenDataset fields by
    keyword."""
    dataset = job_pb2.TokenDataset(sources=_token_sources(sources), in_order=in_order,
                                   targets=targets)
    if format is not None:
        for source in dataset.sources:
            if not source.format:
                source.format = format
    if end_of_text is not None:
        dataset.end_of_text = end_of_text
    set_fields(dataset, "token_dataset", **fields)
    return job_pb2.Input(token_dataset=dataset, seed=seed, data_type=data_type(data_type_name))


def adamw(learning_rate, beta1=0.9, beta2=0.999, epsilon=1e-8, weight_decay=0.0, **fields):
    """An Optimizer: AdamW (torch.optim.AdamW's semantics); more AdamWOptimizer fields by
    keyword."""
    optimizer = job_pb2.Optimizer(adamw=job_pb2.AdamWOptimizer(
        learning_rate=learning_rate, beta1=beta1, beta2=beta2, epsilon=epsilon,
        weight_decay=weight_decay))
    set_fields(optimizer.adamw, "adamw", **fields)
    return optimizer


def sgd(learning_rate, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False, **fields):
    """An Optimizer: SGD (torch.optim.SGD's semantics); more SgdOptimizer fields by keyword."""
    optimizer = job_pb2.Optimizer(sgd=job_pb2.SgdOptimizer(
        learning_rate=learning_rate, momentum=momentum, dampening=dampening,
        weight_decay=weight_decay, nesterov=nesterov))
    set_fields(optimizer.sgd, "sgd", **fields)
    return optimizer
