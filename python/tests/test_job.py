"""loom.Job: building, local validation naming the culprit, passthrough of proto fields, and
round trips through the three file formats loomctl reads."""

import pathlib

import pytest

import loom
from loom.protos import job_pb2, plan_pb2


def mlp_job():
    job = loom.Job("mlp", placement=["cpu:0", "cpu:1"], num_steps=3)
    x = job.input("x", [8, 16], loom.random_normal(std=1.0, seed=1), sbp=["S(0)"])
    labels = job.input("labels", [8], loom.random_integers(below=4, seed=2), sbp=["Shard(0)"])
    w = job.variable("w", [16, 4], loom.normal(std=0.02, seed=3), sbp=["Replicate"])
    b = job.variable("b", [4], 0.0)
    y = job.bias_add("y", job.matmul("xw", x, w), b, output_sbp=["S(0)"])
    loss = job.op("reduce_mean", "loss", [job.op("sparse_cross_entropy", "ce", [y, labels])])
    job.train(loss, loom.sgd(learning_rate=0.1, momentum=0.9))
    job.fetch(loss)
    return job


def test_builds_the_proto_vocabulary():
    message = mlp_job().to_proto()
    assert message.name == "mlp"
    assert list(message.placement.devices) == ["cpu:0", "cpu:1"]
    assert message.num_steps == 3
    assert [variable.name for variable in message.variables] == ["w", "b"]
    assert message.variables[1].initializer.WhichOneof("kind") == "constant"
    assert message.inputs[1].random_integers_below == 4
    assert message.inputs[1].data_type == plan_pb2.INT32
    ops = {op.name: op for op in message.ops}
    assert list(ops["y"].output_sbp[0].sbp) == ["S(0)"]
    assert ops["xw"].type == "matmul" and list(ops["xw"].inputs) == ["x", "w"]
    assert message.optimizer.sgd.momentum == pytest.approx(0.9)
    assert message.loss == "loss" and list(message.fetch) == ["loss"]


def test_attributes_stages_and_hierarchies():
    job = loom.Job("pipeline", placement=["cpu:0", "cpu:1", "cpu:2", "cpu:3"], hierarchy=[2, 2])
    assert job.add_stage(["cpu:0", "cpu:1"]) == 0
    assert job.add_stage(["cpu:2", "cpu:3"], hierarchy=[2]) == 1
    job.set_schedule("gpipe")
    job.variable("w", [4, 4], loom.uniform(-1, 1, seed=1), sbp=["B", "S(1)"])
    job.op("reshape", "r", ["w"], {"shape": [2, -1], "flag": True, "scale": 0.5, "name": "n",
                                  "empty": [], "floats": [1, 2.5]}, stage=1, keep_float32=True)
    op = job.proto_message.ops[0]
    assert list(op.attributes["shape"].int_list.values) == [2, -1]
    assert op.attributes["flag"].bool_value is True
    assert op.attributes["scale"].float_value == 0.5
    assert op.attributes["name"].string_value == "n"
    assert op.attributes["empty"].WhichOneof("value") == "int_list"
    assert list(op.attributes["floats"].float_list.values) == [1.0, 2.5]
    assert op.stage == 1 and op.keep_float32
    assert job.proto_message.pipeline_schedule == job_pb2.GPIPE
    job.validate()


def test_fields_pass_through_by_proto_name():
    job = mlp_job()
    job.set(register_memory="register_memory_separate", gradient_bucket_bytes=-1,
            initial_state={"path": "/c/a.safetensors", "first_step": 4},
            matmul_data_type="bfloat16")
    message = job.proto_message
    assert message.register_memory == job_pb2.REGISTER_MEMORY_SEPARATE
    assert message.initial_state.first_step == 4
    assert message.matmul_data_type == plan_pb2.BFLOAT16
    job.op("identity", "copy", ["loss"], backward=True, once_per_step=True)
    assert message.ops[-1].backward and message.ops[-1].once_per_step
    with pytest.raises(loom.FieldError, match="no field 'no_such_field'"):
        job.set(no_such_field=1)
    with pytest.raises(loom.FieldError, match="op 'x2'.*no field 'colour'"):
        job.op("identity", "x2", ["loss"], colour="red")
    with pytest.raises(loom.FieldError, match="not a value of RegisterMemory"):
        job.set(register_memory="sometimes")
    with pytest.raises(TypeError, match="unknown setting"):
        loom.models.gpt(widht=3)
    # Every Job field of the proto, also ones added after this test was written, can be set.
    for field in job_pb2.Job.DESCRIPTOR.fields:
        assert hasattr(message, field.name)


@pytest.mark.parametrize("mutate, culprit, words", [
    (lambda job: job.op("relu", "act", ["nowhere"]), "op 'act'", "reads tensor 'nowhere'"),
    (lambda job: job.op("relu", "xw", ["x"], outputs=["other"]), "op 'xw'", "used twice"),
    (lambda job: job.op("relu", "act", ["x"], outputs=["y"]), "op 'act'", "produced by both"),
    (lambda job: job.variable("w", [1], 0.0), "variable 'w'", "used twice"),
    (lambda job: job.op("relu", "act", ["x"], output_sbp=["S(x)"]), "op 'act'",
     "cannot parse SBP 'S(x)'"),
    (lambda job: job.variable("v", [4], 0.0, sbp=["Split(0)"]), "variable 'v'",
     "cannot parse SBP"),
    (lambda job: job.variable("v", [4], 0.0, sbp=["P"]), "variable 'v'", "partial"),
    (lambda job: job.variable("v", [4], 0.0, sbp=["B", "B"]), "variable 'v'", "2 entries"),
    (lambda job: job.op("relu", "act", ["x"], stage=2), "op 'act'", "stage 2 has no placement"),
    (lambda job: job.op("relu", "act", ["x"], placement=["cpu:0", "cpu:1", "cpu:2"],
                        hierarchy=[2, 2]), "op 'act'", "4 places for 3 devices"),
    (lambda job: job.fetch("missing"), "missing", "nothing produces"),
    (lambda job: job.sum_over_step("ce"), "ce", "does not fetch"),
    (lambda job: job.sum_over_step("loss"), "loss", "always the mean"),
    (lambda job: job.op("", "act", ["x"]), "op 'act'", "no type"),
])
def test_validation_names_the_culprit(mutate, culprit, words):
    job = mlp_job()
    mutate(job)
    with pytest.raises(loom.JobInvalid) as raised:
        job.to_proto()
    assert culprit in str(raised.value) and words in str(raised.value), str(raised.value)
    assert isinstance(raised.value, loom.LoomError) and isinstance(raised.value, ValueError)


def test_gradients_of_a_training_job_may_be_fetched():
    job = mlp_job()
    job.fetch("grad/w")
    job.validate()


def test_sbp_spellings():
    assert loom.sbp.parse("Shard(2)") == "S(2)" == loom.sbp.parse(" S( 2 ) ")
    assert loom.sbp.parse("Replicate") == "B" == loom.sbp.parse("Replicate()")
    assert loom.sbp.parse("Partial") == "P" == loom.sbp.parse("P(sum)")
    assert loom.sbp.parse("Partial(max)") == "P(max)"
    assert loom.sbp.Shard(1) == "Shard(1)" and loom.sbp.S(0) == "S(0)"
    with pytest.raises(ValueError, match=r"cannot parse SBP 'S\(-1\)'"):
        loom.sbp.parse("S(-1)")


@pytest.mark.parametrize("suffix", [".pbtxt", ".pb", ".json"])
def test_round_trips_through_every_file_format(tmp_path, suffix):
    job = mlp_job()
    path = tmp_path / f"job{suffix}"
    job.save(path)
    assert loom.Job.from_file(path) == job
    assert loom.Job.from_file(str(path)).to_proto() == job.to_proto()
    assert loom.Job.from_text(job.to_text()) == job


def test_reads_the_example_jobs(source_dir):
    examples = sorted((source_dir / "examples" / "jobs").glob("*.pbtxt"))
    assert examples
    for path in examples:
        job = loom.Job.from_file(path)
        job.validate()
        assert loom.Job.from_proto(job.to_proto().SerializeToString()) == job


def test_file_errors_name_the_file(tmp_path):
    path = tmp_path / "broken.pbtxt"
    path.write_text("name: 'x'\nops { nonsense: 1 }\n")
    with pytest.raises(loom.JobInvalid, match="broken.pbtxt is not a valid job"):
        loom.Job.from_file(path)
    path = tmp_path / "broken.json"
    path.write_text("{\"name\": 3,")
    with pytest.raises(loom.JobInvalid, match="broken.json is not a valid JSON job"):
        loom.Job.from_file(path)
    path = pathlib.Path(tmp_path / "broken.pb")
    path.write_bytes(b"\xff\xff\xff")
    with pytest.raises(loom.JobInvalid, match="broken.pb is not a binary job"):
        loom.Job.from_file(path)


def token_job(source, shape=(8, 16), **options):
    job = loom.Job("tokens", placement=["cpu:0", "cpu:1"])
    job.input("x", list(shape), source, **options)
    return job


def test_token_dataset_of_one_source_and_of_a_blend():
    single = loom.token_dataset("/data/web", format="uint16", end_of_text=50256, seed=1)
    assert single.seed == 1 and single.data_type == plan_pb2.INT32
    dataset = single.token_dataset
    assert [list(source.paths) for source in dataset.sources] == [["/data/web"]]
    assert dataset.sources[0].format == "uint16" and dataset.sources[0].weight == 0  # unset
    assert dataset.HasField("end_of_text") and dataset.end_of_text == 50256
    assert not dataset.in_order and not dataset.targets
    # Without end_of_text the field is unset (each file one document), not 0.
    assert not loom.token_dataset("/d").token_dataset.HasField("end_of_text")
    assert loom.token_dataset("/d", end_of_text=0).token_dataset.HasField("end_of_text")

    blend = loom.token_dataset(
        [loom.token_source("/data/web/*.bin", weight=3, format="uint16"),
         loom.token_source(["/data/code/a.bin", "/data/code/b"], weight=1),
         {"paths": ["/data/books"], "format": "uint32"}],
        format="bytes", in_order=True, targets=True, seed=-7)
    sources = blend.token_dataset.sources
    assert [list(source.paths) for source in sources] == [
        ["/data/web/*.bin"], ["/data/code/a.bin", "/data/code/b"], ["/data/books"]]
    # format= fills the sources that set none.
    assert [source.format for source in sources] == ["uint16", "bytes", "uint32"]
    assert [source.weight for source in sources] == [3.0, 1.0, 0.0]
    assert blend.token_dataset.in_order and blend.token_dataset.targets and blend.seed == -7

    # A list of paths is one source of those files.
    many = loom.token_dataset(["/d/a.bin", "/d/b.bin"]).token_dataset
    assert len(many.sources) == 1 and list(many.sources[0].paths) == ["/d/a.bin", "/d/b.bin"]
    assert loom.token_dataset(loom.token_source("/d")).token_dataset.sources[0].paths == ["/d"]


def test_token_dataset_inputs_carry_the_seed_and_validate(tmp_path):
    job = token_job(loom.token_dataset("/d", seed=5), sbp=["S(0)"])
    job.input("y", [8, 16], loom.token_dataset("/d", seed=5, targets=True), data_type="int64")
    message = job.to_proto()
    assert [tensor.seed for tensor in message.inputs] == [5, 5]
    assert message.inputs[0].data_type == plan_pb2.INT32
    assert message.inputs[1].data_type == plan_pb2.INT64
    assert message.inputs[1].token_dataset.targets
    # An input's fields by keyword too: the seed, and TokenDataset fields on the builder.
    job.input("z", [8, 16], loom.token_dataset("/d", in_order=True), seed=9)
    assert job.proto_message.inputs[2].seed == 9
    path = tmp_path / "tokens.pbtxt"
    job.save(path)
    assert loom.Job.from_file(path) == job


@pytest.mark.parametrize("source, options, words", [
    (loom.token_dataset("/d", data_type_name="float32"), {}, "need data_type INT32 or INT64"),
    (loom.token_dataset("/d"), dict(shape=(8, 16, 2)),
     "a token-dataset input is [batch, sequence], not rank 3"),
    (loom.token_dataset([]), {}, "token_dataset has no sources"),
    (loom.token_dataset([loom.token_source("/a"), loom.token_source([])]), {},
     "token_dataset source 1 has no paths"),
    (loom.token_dataset([loom.token_source(["/a", ""])]), {},
     "token_dataset source 0: path 1 is empty"),
    (loom.token_dataset([loom.token_source("/a"), loom.token_source("/b", format="utf8")]), {},
     "token_dataset source 1 format 'utf8' is not \"bytes\", \"uint16\" or \"uint32\""),
    (loom.token_dataset([loom.token_source("/a", weight=-1)]), {},
     "token_dataset source 0: weight -1.0 is not finite and >= 0"),
    (loom.token_dataset([loom.token_source("/a"), loom.token_source("/b", weight=float("nan"))]),
     {}, "token_dataset source 1: weight nan is not finite"),
    (loom.token_dataset([loom.token_source("/a", weight=float("inf"))]), {},
     "token_dataset source 0: weight inf is not finite"),
    (loom.token_dataset([loom.token_source("/a", weight=1e5), loom.token_source("/b")]), {},
     "token_dataset source 1: weight 1 is under 1/10000 of the blend's total"),
    (loom.token_dataset("/d", end_of_text=-1), {},
     "token_dataset end_of_text must be >= 0, got -1"),
    (loom.token_file("/d", format="utf8"), dict(data_type="int32"),
     "token_file format 'utf8' is not"),
    (loom.token_file(""), dict(data_type="int32"), "token_file has no path"),
    (loom.token_file("/d"), {}, "token ids need data_type INT32 or INT64"),
])
def test_bad_token_inputs_are_refused_naming_the_input(source, options, words):
    options = dict(options)
    job = token_job(source, shape=options.pop("shape", (8, 16)), **options)
    with pytest.raises(loom.JobInvalid) as raised:
        job.validate()
    assert "input 'x'" in str(raised.value) and words in str(raised.value), str(raised.value)


def test_a_blend_at_the_quota_edge_is_accepted():
    # 1 of 10000 is exactly one sample of the pattern: accepted.
    token_job(loom.token_dataset([loom.token_source("/a", weight=9999),
                                  loom.token_source("/b", weight=1)])).validate()
    # 0.6 of a sample rounds up: the sample left over goes to the largest remainder.
    token_job(loom.token_dataset([loom.token_source("/a", weight=9999.4),
                                  loom.token_source("/b", weight=0.6)])).validate()
    # Three sources of 0.4 samples each: of the two left over, source 0 (0.8) takes one and
    # source 1 (the lower of equal remainders) the other; source 2 gets none.
    with pytest.raises(loom.JobInvalid, match="token_dataset source 2: weight 0.4 is under"):
        token_job(loom.token_dataset([loom.token_source("/a", weight=9998.8)] +
                                     [loom.token_source(f"/{name}", weight=0.4)
                                      for name in "bcd"])).validate()


def test_token_dataset_builder_errors_name_the_argument():
    with pytest.raises(ValueError, match="paths are a string or a list of strings, got 3"):
        loom.token_source(3)
    with pytest.raises(ValueError, match="paths are strings, got 4"):
        loom.token_source(["/a", 4])
    with pytest.raises(ValueError, match="token source 1: a blend's sources are"):
        loom.token_dataset([loom.token_source("/a"), "/b"])
    with pytest.raises(loom.FieldError, match="token source 0.*no field 'colour'"):
        loom.token_dataset([{"paths": ["/a"], "colour": "red"}])
    with pytest.raises(loom.FieldError, match="token_dataset.*no field 'shuffle'"):
        loom.token_dataset("/a", shuffle=True)


def language_model_job():
    """x, y token inputs read by the loss, and an input "noise" that the loss does not read."""
    job = loom.Job("lm", placement=["cpu:0", "cpu:1"], num_steps=6)
    x = job.input("x", [8, 16], loom.token_dataset("/d/train", seed=1))
    y = job.input("y", [8, 16], loom.token_dataset("/d/train", seed=1, targets=True))
    job.input("noise", [8, 4], loom.random_normal(std=1.0, seed=2))
    job.variable("wte", [256, 32], loom.normal(std=0.02, seed=3))
    job.variable("head", [32, 256], loom.normal(std=0.02, seed=4))
    logits = job.matmul("logits", job.op("embedding", "tokens", ["wte", x]), "head")
    cross_entropy = job.op("reduce_mean", "cross_entropy",
                           [job.op("sparse_cross_entropy", "token_loss", [logits, y])])
    loss = job.add("loss", cross_entropy, job.op("reduce_mean", "noise_mean", ["noise"]))
    job.train(loss, loom.adamw(learning_rate=1e-3))
    job.fetch(loss)
    return job


def held_out(targets=False):
    return loom.token_dataset("/d/valid", seed=1, targets=targets)


def test_evaluate_builds_job_evaluation():
    job = language_model_job()
    job.evaluate(3, {"x": held_out(), "y": held_out(targets=True)}, loss="cross_entropy")
    evaluation = job.to_proto().evaluation
    assert evaluation.every_steps == 3 and evaluation.loss == "cross_entropy"
    assert [tensor.name for tensor in evaluation.inputs] == ["x", "y"]
    x = evaluation.inputs[0]
    # The source and its seed; shape, data type, placement and SBP stay the job input's.
    assert list(x.token_dataset.sources[0].paths) == ["/d/valid"] and x.seed == 1
    assert not x.shape and x.data_type == plan_pb2.DATA_TYPE_UNSPECIFIED
    assert not x.HasField("placement") and not x.sbp
    assert evaluation.inputs[1].token_dataset.targets
    # The same from named Input messages, and from dicts of Input fields.
    named = [job_pb2.Input(name="x", token_dataset=held_out().token_dataset, seed=1),
             job_pb2.Input(name="y", token_dataset=held_out(True).token_dataset, seed=1)]
    assert language_model_job().evaluate(3, named, loss="cross_entropy") == job
    fields = {"x": {"token_dataset": held_out().token_dataset, "seed": 1},
              "y": {"token_dataset": held_out(True).token_dataset, "seed": 1}}
    assert language_model_job().evaluate(3, fields, loss="cross_entropy") == job


def test_evaluation_defaults_to_the_jobs_loss_and_survives_the_file_formats(tmp_path):
    job = language_model_job()
    job.evaluate(2, {"x": held_out(), "y": held_out(True),
                     "noise": loom.random_normal(std=1.0, seed=9)})
    assert job.to_proto().evaluation.loss == ""  # the job's loss
    for suffix in (".pbtxt", ".pb", ".json"):
        path = tmp_path / f"evaluated{suffix}"
        job.save(path)
        assert loom.Job.from_file(path) == job
    # The job's evaluation may also be set as any field.
    same = language_model_job().set(evaluation=job.proto_message.evaluation)
    assert same == job


def held_out_fields(name, targets=False):
    """An evaluation input as a dict of Input fields."""
    return {"name": name, "seed": 1, "token_dataset": held_out(targets).token_dataset}


def evaluation_of(**fields):
    """A mutation giving the job Job.evaluation FIELDS (x and y of held-out data by default)."""
    def mutate(job):
        fields.setdefault("every_steps", 3)
        fields.setdefault("loss", "cross_entropy")
        fields.setdefault("inputs", [held_out_fields("x"), held_out_fields("y", True)])
        job.set(evaluation=fields)
    return mutate


def with_input(index, **changes):
    """The default evaluation inputs with input INDEX changed."""
    inputs = [held_out_fields("x"), held_out_fields("y", True)]
    inputs[index].update(changes)
    return inputs


@pytest.mark.parametrize("mutate, culprit, words", [
    (evaluation_of(every_steps=-2), "evaluation", "every_steps must be > 0, got -2"),
    (evaluation_of(every_steps=0), "evaluation", "inputs are given, but every_steps is 0"),
    (evaluation_of(loss="nowhere"), "nowhere", "the loss to evaluate 'nowhere' is a tensor "
     "nothing produces"),
    (evaluation_of(inputs=with_input(0, name="z")), "'z'", "is no input of the job"),
    (evaluation_of(inputs=with_input(0, name="")), "evaluation", "input 0 has no name"),
    (evaluation_of(inputs=with_input(1, name="x")), "'x'", "is given twice"),
    (evaluation_of(inputs=with_input(1, name="noise")), "'noise'",
     "is not read by the loss 'cross_entropy'"),
    (evaluation_of(inputs=[held_out_fields("x"),
                           {"name": "noise", "random_normal": {"std": 1.0, "seed": 9}}],
                   loss=""), "'y'",
     "the loss 'loss' reads input 'y', which evaluation.inputs does not replace"),
    (evaluation_of(inputs=[held_out_fields("x")]), "'y'",
     "reads input 'y', which evaluation.inputs does not replace"),
    (evaluation_of(inputs=[{"name": "x"}, held_out_fields("y", True)]), "'x'",
     "has no source"),
    (evaluation_of(inputs=with_input(0, shape=[4, 16])), "'x'",
     "sets shape [4, 16], other than the job input's [8, 16]"),
    (evaluation_of(inputs=with_input(0, data_type="INT64")), "'x'",
     "sets a data type other than the job input's"),
    (evaluation_of(inputs=with_input(0, sbp=["S(0)"])), "'x'", "sets a placement or SBP"),
    (evaluation_of(inputs=with_input(1, placement={"devices": ["cpu:0"]})), "'y'",
     "sets a placement or SBP"),
    (evaluation_of(inputs=with_input(0, evaluation=True)), "'x'", "is marked evaluation"),
    (evaluation_of(inputs=with_input(0, token_dataset={"sources": [{"paths": []}]})),
     "evaluation: input 'x'", "token_dataset source 0 has no paths"),
    (evaluation_of(inputs=with_input(1, token_dataset={"sources": [{"paths": ["/v"]}],
                                                       "end_of_text": -1})),
     "evaluation: input 'y'", "end_of_text must be >= 0"),
    (lambda job: (evaluation_of()(job), job.op("relu", "evaluation/act", ["x"])),
     "op 'evaluation/act'", "starts with 'evaluation/', which the evaluation branch reserves"),
    (lambda job: (evaluation_of()(job), job.op("relu", "act", ["x"], outputs=["evaluation/a"])),
     "tensor 'evaluation/a' of op 'act'", "reserves"),
    (lambda job: job.op("relu", "act", ["x"], evaluation=True), "op 'act'",
     "is marked evaluation (the compiler marks"),
])
def test_evaluation_is_validated_naming_the_input(mutate, culprit, words):
    job = language_model_job()
    mutate(job)
    with pytest.raises(loom.JobInvalid) as raised:
        job.to_proto()
    assert culprit in str(raised.value) and words in str(raised.value), str(raised.value)


def test_evaluate_drops_the_sources_data_type_and_refuses_bad_arguments():
    job = language_model_job()
    job.proto_message.inputs[0].data_type = plan_pb2.INT64
    # loom.token_dataset fills int32; the evaluation input has the job input's type (int64).
    job.evaluate(1, {"x": held_out(), "y": held_out(True)}, loss="cross_entropy").validate()
    with pytest.raises(loom.JobInvalid, match="every_steps is a whole number of steps, got '3'"):
        job.evaluate("3", {"x": held_out()})
    with pytest.raises(loom.JobInvalid, match="inputs is a dict"):
        job.evaluate(3, "x")
    with pytest.raises(loom.JobInvalid, match="input 1 is 'y', not an Input message"):
        job.evaluate(3, [job_pb2.Input(name="x"), "y"])
    with pytest.raises(loom.FieldError, match="evaluation input 'x'.*no field 'colour'"):
        job.evaluate(3, {"x": {"colour": "red"}})
    # Every step 0 without inputs: no evaluation, valid.
    language_model_job().evaluate(0, {}).validate()
