"""Against a real local cluster (`loomctl cluster up`, 1 node of 2 CPU devices): the tiny GPT
built in Python is submitted, watched to its end with its fetched losses, checkpointed; the
checkpoint loads into PyTorch, whose loss of the next batch equals the one Loom reports when the
job resumes from it; a job that evaluates reports validation losses in its steps and metrics; a
bad job raises naming the op; the other calls answer."""

import json
import math

import numpy
import pytest

import loom

STEPS = 5
TINY = dict(layers=2, width=32, heads=2, mlp_width=64, context=16, batch=4, dp=2)


@pytest.fixture(scope="module")
def cluster(local_cluster, source_dir):
    tokens = (source_dir / "README.md").read_bytes()[:20000]
    (local_cluster.data / "tokens.bin").write_bytes(tokens)
    client = loom.Client(local_cluster.address, timeout=30, watch_timeout=120)
    yield local_cluster, client
    client.close()


def tiny_gpt(cluster, **settings):
    return loom.models.gpt(**TINY, data=str(cluster.data / "tokens.bin"), **settings)


def test_nodes(cluster):
    local, client = cluster
    (node,) = client.nodes()
    assert node.state == "READY" and node.coordinator
    assert node.devices == ["node0/cpu:0", "node0/cpu:1"]


def test_trains_checkpoints_and_matches_pytorch(cluster, oracle):
    local, client = cluster
    torch = pytest.importorskip("torch")
    path = local.checkpoints / "gpt.safetensors"
    with client.submit(tiny_gpt(local, steps=STEPS), watch=True, fetch=True,
                       checkpoint=path) as run:
        steps = list(run.progress(use_tqdm=False))
    assert [step.step for step in steps] == list(range(1, STEPS + 1))
    assert all(math.isfinite(step.loss) and step.num_steps == STEPS for step in steps)
    assert run.states[-1] == "SUCCEEDED" and run.finished.succeeded
    assert "RUNNING" in run.states
    # The fetched loss of every step, as float32, is the step's loss.
    assert [float(piece) for piece in run.fetched["loss"]] == \
        [float(numpy.float32(step.loss)) for step in steps]
    assert [(saved.step, saved.path) for saved in run.checkpoints] == [(STEPS, str(path))]
    status = run.status()
    assert (status.state, status.steps_done, status.checkpoint_step) == \
        ("SUCCEEDED", STEPS, STEPS)
    assert status.last_loss == pytest.approx(steps[-1].loss)
    assert run.job_id in [job.job_id for job in client.jobs(states=["succeeded"])]
    assert len(client.plan(run.job_id).tasks) > 0

    # The checkpoint in PyTorch: the loss of the next batch (step STEPS, 0-based).
    parameters = loom.checkpoint.load(path, torch=True, optimizer_state=False)
    assert loom.checkpoint.optimizer_step(path) == STEPS
    models, datasets = oracle["models"], oracle["datasets"]
    config = models.GPTConfig(vocab=256, context=TINY["context"], width=TINY["width"],
                              layers=TINY["layers"], heads=TINY["heads"],
                              mlp_width=TINY["mlp_width"])
    dataset = datasets.Dataset(datasets.Source(str(local.data / "tokens.bin")))
    x, y = (torch.from_numpy(rows) for rows in
            dataset.batch(STEPS, TINY["batch"], TINY["context"]))
    with torch.no_grad():
        pytorch_loss, _ = models.gpt_forward(parameters, config, x, y)
    # Loom resumes from the checkpoint (optimizer state and step included) for one step.
    resumed = client.submit(tiny_gpt(local, steps=1), init=path, watch=True)
    (step,) = list(resumed)
    assert step.loss == pytest.approx(pytorch_loss.item(), abs=1e-4)


def test_bad_job_raises_naming_the_op(cluster):
    local, client = cluster
    job = tiny_gpt(local, steps=1)
    job.op("relu", "mystery.relu", ["no.such.tensor"])
    with pytest.raises(loom.JobInvalid, match="op 'mystery.relu' reads tensor 'no.such.tensor'"):
        client.submit(job)
    job = tiny_gpt(local, steps=1)
    job.op("no_such_op", "mystery", ["x"])
    with pytest.raises(loom.InvalidArgument) as raised:
        client.submit(job, validate=False)
    assert raised.value.code.name == "INVALID_ARGUMENT" and "mystery" in raised.value.message


def test_errors_carry_the_code(cluster):
    local, client = cluster
    with pytest.raises(loom.NotFound) as raised:
        client.status("job-404")
    assert "job-404" in raised.value.message
    finished = client.jobs(states=["SUCCEEDED"])[0]
    with pytest.raises(loom.FailedPrecondition):
        client.cancel(finished.job_id)


def test_trace_of_a_traced_job(cluster, tmp_path):
    local, client = cluster
    run = client.submit(tiny_gpt(local, steps=1), trace=True)
    run.wait()
    document = json.loads(run.trace(tmp_path / "trace.json"))
    assert document["traceEvents"]
    assert json.loads((tmp_path / "trace.json").read_text()) == document


def test_a_cancelled_job_raises_job_failed(cluster):
    local, client = cluster
    run = client.submit(tiny_gpt(local, steps=100000))
    client.cancel(run.job_id, reason="enough")
    with pytest.raises(loom.JobFailed) as raised:
        run.wait()
    assert raised.value.state == "CANCELLED" and "enough" in raised.value.message


def test_evaluation_reports_validation_losses_in_steps_and_metrics(cluster):
    # Every 2 steps from step 1, on held-out data: the Step events carry val_loss, and the
    # coordinator's loom_validation_loss gauge holds the last one.
    import urllib.request

    local, client = cluster
    held_out = local.data / "held_out.bin"
    held_out.write_bytes(bytes(range(256)) * 8)
    job = tiny_gpt(local, steps=5, eval_every=2, eval_data=str(held_out))
    with client.submit(job, watch=True) as run:
        steps = list(run)
    assert [step.step for step in steps] == [1, 2, 3, 4, 5]
    evaluated = {step.step: step.val_loss for step in steps}
    assert [number for number, value in evaluated.items() if value is not None] == [1, 3, 5]
    assert all(math.isfinite(evaluated[number]) for number in (1, 3, 5))
    state = json.loads((local.state / "cluster.json").read_text())
    urls = [node["metrics"] for node in state["nodes"] if node.get("metrics")]
    if not urls:
        pytest.skip("the cluster serves no metrics")
    url = urls[0] if urls[0].startswith("http") else f"http://{urls[0]}/metrics"
    with urllib.request.urlopen(url, timeout=30) as response:
        text = response.read().decode()
    gauge = [line for line in text.splitlines() if line.startswith("loom_validation_loss")]
    assert gauge and float(gauge[0].split()[-1]) == pytest.approx(evaluated[5], rel=1e-6)
