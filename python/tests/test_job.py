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
