"""loom.models.gpt() builds the job `loom-gpt --emit` writes, field for field, for a matrix of
flag sets (dense and MoE, every parallel layout, learning-rate schedules, the "no_decay"
parameter group, token datasets and evaluation on held-out data), and refuses bad settings as
loom-gpt does."""

import subprocess

import pytest
from google.protobuf import text_format

import loom
from loom.protos import job_pb2

# loom-gpt flags -> gpt() keywords of the same settings.
FLAG_SETS = [
    ([], {}),
    (["--dp", "2", "--tp", "2"], dict(dp=2, tp=2)),
    (["--tp", "2"], dict(tp=2)),
    (["--pp", "2", "--micro-batches", "2", "--schedule", "gpipe", "--layers", "3"],
     dict(pp=2, micro_batches=2, schedule="gpipe", layers=3)),
    (["--pp", "2", "--micro-batches", "4", "--schedule", "zero-bubble"],
     dict(pp=2, micro_batches=4, schedule="zero-bubble")),
    (["--pp", "2", "--virtual-stages", "2", "--micro-batches", "4", "--schedule", "interleaved"],
     dict(pp=2, virtual_stages=2, micro_batches=4, schedule="interleaved")),
    (["--pp", "2", "--micro-batches", "4", "--schedule", "zb-h2"],
     dict(pp=2, micro_batches=4, schedule="zb-h2")),
    (["--pp", "2", "--micro-batches", "4", "--schedule", "zb-v", "--max-grad-norm", "1.0"],
     dict(pp=2, micro_batches=4, schedule="zb-v", max_grad_norm=1.0)),
    (["--dp", "2", "--tp", "2", "--pp", "2", "--micro-batches", "4", "--devices-per-node", "4"],
     dict(dp=2, tp=2, pp=2, micro_batches=4, devices_per_node=4)),
    (["--experts", "4", "--dp", "4", "--ep", "2", "--top-k", "1", "--capacity-factor", "2",
      "--aux-loss-coefficient", "0.02", "--moe-layers", "0,2"],
     dict(experts=4, dp=4, ep=2, top_k=1, capacity_factor=2.0, aux_loss_coefficient=0.02,
          moe_layers=[0, 2])),
    (["--experts", "4", "--dp", "2", "--ep", "2", "--pp", "2", "--micro-batches", "2"],
     dict(experts=4, dp=2, ep=2, pp=2, micro_batches=2)),
    (["--experts", "2", "--moe-layers", "1"], dict(experts=2, moe_layers=[1])),
    (["--device-type", "cuda", "--matmul-data-type", "bfloat16", "--max-grad-norm", "1.0",
      "--dp", "2"],
     dict(device_type="cuda", matmul_data_type="bfloat16", max_grad_norm=1.0, dp=2)),
    (["--vocab", "512", "--context", "32", "--width", "64", "--layers", "2", "--heads", "2",
      "--mlp-width", "96", "--ln-eps", "1e-6", "--lr", "3e-4", "--beta1", "0.8", "--beta2",
      "0.99", "--eps", "1e-6", "--weight-decay", "0", "--seed", "7", "--data",
      "/data/tokens.u16", "--data-format", "uint16", "--batch", "8", "--steps", "5"],
     dict(vocab=512, context=32, width=64, layers=2, heads=2, mlp_width=96, ln_eps=1e-6,
          lr=3e-4, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.0, seed=7,
          data="/data/tokens.u16", data_format="uint16", batch=8, steps=5)),
    (["--vocab", "70000", "--data-format", "uint32"], dict(vocab=70000, data_format="uint32")),
    # Learning-rate schedules and the parameter group "no_decay".
    (["--lr-warmup", "5"], dict(lr_warmup=5)),
    (["--lr-warmup", "10", "--lr-decay", "cosine", "--lr-decay-steps", "100", "--min-lr",
      "1e-4", "--steps", "50"],
     dict(lr_warmup=10, lr_decay="cosine", lr_decay_steps=100, min_lr=1e-4, steps=50)),
    (["--lr-decay", "linear", "--min-lr", "2.5e-5"], dict(lr_decay="linear", min_lr=2.5e-5)),
    (["--weight-decay-on", "matrices"], dict(weight_decay_on="matrices")),
    (["--weight-decay-on", "matrices", "--no-decay-lr-scale", "0.5", "--lr-warmup", "2",
      "--lr-decay", "cosine", "--tp", "2", "--pp", "2", "--micro-batches", "2"],
     dict(weight_decay_on="matrices", no_decay_lr_scale=0.5, lr_warmup=2, lr_decay="cosine",
          tp=2, pp=2, micro_batches=2)),
    # Data: token datasets and blends (docs/DATA.md).
    (["--data", "/d/a", "--data", "/d/b/*.bin", "--data-weights", "3,1", "--eot-token", "0",
      "--data-seed", "-5", "--data-in-order"],
     dict(data=["/d/a", "/d/b/*.bin"], data_weights=[3, 1], eot_token=0, data_seed=-5,
          data_in_order=True)),
    (["--data", "/d/web", "--data-format", "uint16", "--vocab", "50304", "--eot-token",
      "50256", "--data-seed", "3", "--pp", "2", "--micro-batches", "2"],
     dict(data="/d/web", data_format="uint16", vocab=50304, eot_token=50256, data_seed=3, pp=2,
          micro_batches=2)),
    (["--data", "/d/a.bin", "--data", "/d/b", "--data", "/d/c/shard-?.bin", "--data-format",
      "uint32", "--vocab", "70000", "--dp", "2"],
     dict(data=["/d/a.bin", "/d/b", "/d/c/shard-?.bin"], data_format="uint32", vocab=70000,
          dp=2)),
    (["--data-weights", "2.5", "--eot-token", "255"], dict(data_weights=[2.5], eot_token=255)),
    # Activation recomputation: Job.recompute, and every block's ops in their Op.block.
    (["--recompute", "full", "--pp", "2", "--micro-batches", "2"],
     dict(recompute="full", pp=2, micro_batches=2)),
    (["--recompute", "selective", "--experts", "4", "--dp", "2", "--ep", "2"],
     dict(recompute="selective", experts=4, dp=2, ep=2)),
    # Activation offload: Job.offload_activations.
    (["--offload-activations", "all", "--pp", "2", "--micro-batches", "4"],
     dict(offload_activations="all", pp=2, micro_batches=4)),
    (["--offload-activations", "over-budget"], dict(offload_activations="over-budget")),
    (["--zero-stage", "2", "--dp", "2", "--pp", "2", "--micro-batches", "2"],
     dict(zero_stage=2, dp=2, pp=2, micro_batches=2)),
    (["--zero-stage", "3", "--dp", "2", "--tp", "2"], dict(zero_stage=3, dp=2, tp=2)),
    # Evaluation on held-out data (Job.evaluation): read as the training data is; the MoE GPT
    # evaluates its cross-entropy.
    (["--eval-every", "3", "--eval-data", "/d/valid"], dict(eval_every=3, eval_data="/d/valid")),
    (["--eval-every", "1", "--eval-data", "/d/v.u16", "--eval-data", "/d/w/*.bin",
      "--data-format", "uint16", "--vocab", "50304", "--eot-token", "50256", "--data-seed",
      "-2", "--data-in-order", "--dp", "2", "--tp", "2"],
     dict(eval_every=1, eval_data=["/d/v.u16", "/d/w/*.bin"], data_format="uint16",
          vocab=50304, eot_token=50256, data_seed=-2, data_in_order=True, dp=2, tp=2)),
    (["--eval-every", "5", "--eval-data", "/d/valid", "--pp", "2", "--micro-batches", "2",
      "--data", "/d/a", "--data", "/d/b", "--data-weights", "3,1"],
     dict(eval_every=5, eval_data="/d/valid", pp=2, micro_batches=2, data=["/d/a", "/d/b"],
          data_weights=[3, 1])),
    (["--experts", "4", "--dp", "2", "--ep", "2", "--pp", "2", "--micro-batches", "2",
      "--eval-every", "4", "--eval-data", "/d/valid", "--data-seed", "7"],
     dict(experts=4, dp=2, ep=2, pp=2, micro_batches=2, eval_every=4, eval_data="/d/valid",
          data_seed=7)),
]


def emitted_job(loom_gpt, flags):
    result = subprocess.run([loom_gpt, "--emit", "-", *flags], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    return text_format.Parse(result.stdout, job_pb2.Job())


@pytest.mark.parametrize("flags, settings", FLAG_SETS,
                         ids=[" ".join(flags) or "defaults" for flags, _ in FLAG_SETS])
def test_gpt_is_the_job_loom_gpt_emits(binary, flags, settings):
    expected = emitted_job(binary("loom-gpt"), flags)
    built = loom.models.gpt(**settings).to_proto()
    if built != expected:
        # The first difference, to read: the text of both.
        built_text = text_format.MessageToString(built).splitlines()
        expected_text = text_format.MessageToString(expected).splitlines()
        first = next((index for index, (a, b) in enumerate(zip(built_text, expected_text))
                      if a != b), min(len(built_text), len(expected_text)))
        pytest.fail(f"line {first}: gpt() {built_text[first:first + 3]} vs loom-gpt "
                    f"{expected_text[first:first + 3]}")
    # Byte-equal too: presence of empty submessages and the order of repeated fields count.
    assert built.SerializeToString(deterministic=True) == \
        expected.SerializeToString(deterministic=True)


@pytest.mark.parametrize("settings, words", [
    (dict(heads=3), "width 128 is not divisible by heads 3"),
    (dict(tp=3, heads=4), "heads 4 is not divisible by the tensor-parallel degree 3"),
    (dict(experts=4, dp=2, ep=3), "expert-parallel degree 3 must divide"),
    (dict(ep=2, dp=2), "expert parallelism needs experts"),
    (dict(experts=4, moe_layers=[7]), "MoE layer 7 is not a block (0 to 3)"),
    (dict(pp=5), "layers 4 < pipeline stages 5"),
    (dict(pp=2**62, virtual_stages=4, schedule="interleaved"),
     "pipeline stages 4611686018427387904 x 4 per device group overflow int64"),
    (dict(pp=2**40, dp=2**20, tp=8), "devices pipeline_stages x data_parallel x tensor_parallel"),
    (dict(batch=10, dp=4), "batch 10 is not divisible by data_parallel x micro_batches"),
    (dict(schedule="zigzag"), "unknown pipeline schedule"),
    (dict(data_format="uint8"), 'data format must be "bytes", "uint16" or "uint32"'),
    (dict(vocab=100), "vocab 100 < 256"),
    (dict(lr=0), "learning rate must be > 0"),
    (dict(lr_warmup=-1), "learning-rate warmup and decay steps must be >= 0, got -1 and 0"),
    (dict(lr_decay_steps=2.5), "lr_decay_steps must be an integer"),
    (dict(lr_decay="step"), "unknown learning-rate decay 'step' (constant, linear or cosine)"),
    (dict(min_lr=0.01), "the minimum learning rate must be in [0, lr], got 0.01"),
    (dict(min_lr=-1.0), "the minimum learning rate must be in [0, lr], got -1"),
    (dict(weight_decay_on="biases"), "weight decay applies to 'all' or 'matrices', got 'biases'"),
    (dict(no_decay_lr_scale=-0.5), "the no-decay group's learning-rate scale must be >= 0"),
    (dict(data=[]), "no data file (data is empty)"),
    (dict(data=["/d/a", ""]), "no data file (data is empty)"),
    (dict(data=3), "data is a path or a list of paths, got 3"),
    (dict(data_weights=[1, 2]), "2 data weights for 1 data paths"),
    (dict(data=["/d/a", "/d/b"], data_weights=[1]), "1 data weights for 2 data paths"),
    (dict(data=["/d/a", "/d/b"], data_weights=[1, 0]), "data weight 0 (of /d/b) must be finite "
     "and > 0"),
    (dict(data_weights=[float("inf")]), "data weight inf (of /usr/share/common-licenses/GPL-3)"),
    (dict(data_weights=["3"]), "data weight '3' (of /usr/share/common-licenses/GPL-3) is not a "
     "number"),
    (dict(eot_token=-1), "eot_token must be >= 0, got -1"),
    (dict(eot_token=1.5), "eot_token must be an integer"),
    (dict(eot_token=256), "eot_token 256 is not a byte: the bytes format has tokens 0 to 255"),
    (dict(eot_token=256, vocab=512), "eot_token 256 is not a byte"),
    (dict(data_format="uint16", vocab=50000, eot_token=50256),
     "vocab 50000 must exceed eot_token 50256"),
    (dict(data_format="uint16", vocab=300, eot_token=300), "vocab 300 must exceed eot_token 300"),
    (dict(data_in_order="yes"), "data_in_order is True or False"),
    (dict(data_seed=1.5), "data_seed must be a 64-bit integer"),
    (dict(data_seed=2**63), "data_seed must be a 64-bit integer"),
    (dict(eval_every=-1, eval_data="/d/v"), "eval_every must be >= 0 (0: no evaluation), got -1"),
    (dict(eval_every=2), "evaluation needs held-out data (eval_data is empty)"),
    (dict(eval_every=2, eval_data=[]), "evaluation needs held-out data (eval_data is empty)"),
    (dict(eval_data="/d/v"), "held-out data is given, but eval_every is 0"),
    (dict(eval_every=2, eval_data=["/d/v", ""]), "an evaluation data path is empty"),
    (dict(eval_every=1.5, eval_data="/d/v"), "eval_every must be an integer"),
    (dict(eval_every=2, eval_data=3), "eval_data is a path or a list of paths, got 3"),
])
def test_bad_settings_are_refused_as_loom_gpt_refuses_them(settings, words):
    with pytest.raises(ValueError) as raised:
        loom.models.gpt(**settings)
    assert "GPT config: " in str(raised.value) and words in str(raised.value)


def test_gpt_reads_a_token_dataset():
    """The inputs' form that loom-gpt writes (docs/DATA.md), checked without loom-gpt."""
    job = loom.models.gpt(data=["/d/a", "/d/b/*.bin"], data_weights=[3, 1], eot_token=0,
                          data_seed=-5, data_in_order=True, layers=1)
    for tensor_input, targets in zip(job.to_proto().inputs, (False, True)):
        expected = job_pb2.Input()
        text_format.Parse(f"""
            name: "{'y' if targets else 'x'}" shape: 16 shape: 64 data_type: INT32 sbp: "S(0)"
            seed: -5
            token_dataset {{
              sources {{ paths: "/d/a" format: "bytes" weight: 3 }}
              sources {{ paths: "/d/b/*.bin" format: "bytes" weight: 1 }}
              end_of_text: 0 in_order: true targets: {str(targets).lower()}
            }}""", expected)
        assert tensor_input == expected
    # The defaults: one source, no weight, no end_of_text, shuffled, seed 0 (unset).
    x = loom.models.gpt(layers=1).proto_message.inputs[0]
    assert x.seed == 0 and not x.token_dataset.HasField("end_of_text")
    assert not x.token_dataset.in_order
    assert [(list(source.paths), source.format, source.weight)
            for source in x.token_dataset.sources] == [
        (["/usr/share/common-licenses/GPL-3"], "bytes", 0.0)]
    # A GptConfig with lists works as the keywords do; the keywords' lists become tuples.
    config = loom.models.GptConfig(layers=1, data=["/d/a", "/d/b"], data_weights=[1, 2])
    assert loom.models.gpt(config) == loom.models.gpt(layers=1, data=("/d/a", "/d/b"),
                                                      data_weights=(1.0, 2.0))


def test_gpt_evaluates_held_out_data():
    """The evaluation's form that loom-gpt writes, checked without loom-gpt."""
    job = loom.models.gpt(layers=1, eval_every=3, eval_data=["/d/v", "/d/w"], eot_token=0,
                          data_seed=5, data_in_order=True)
    expected = job_pb2.Evaluation()
    text_format.Parse("""
        every_steps: 3
        inputs { name: "x" seed: 5 token_dataset {
          sources { paths: "/d/v" format: "bytes" } sources { paths: "/d/w" format: "bytes" }
          end_of_text: 0 in_order: true } }
        inputs { name: "y" seed: 5 token_dataset {
          sources { paths: "/d/v" format: "bytes" } sources { paths: "/d/w" format: "bytes" }
          end_of_text: 0 in_order: true targets: true } }""", expected)
    message = job.to_proto()  # validated, the evaluation too
    assert message.evaluation == expected
    # No evaluation by default; the MoE GPT evaluates the cross-entropy, not the loss with the
    # auxiliary loss.
    assert not loom.models.gpt(layers=1).proto_message.HasField("evaluation")
    moe = loom.models.gpt(experts=2, moe_layers=[0], layers=1, eval_every=2, eval_data="/d/v")
    assert moe.to_proto().evaluation.loss == "cross_entropy"
    assert loom.models.gpt(layers=1, eval_every=1, eval_data=("/d/v",)) == \
        loom.models.gpt(layers=1, eval_every=1, eval_data=["/d/v"])


def test_parameters_in_canonical_order():
    config = loom.models.GptConfig(layers=1, experts=2, moe_layers=(0,))
    names = [parameter.name for parameter in loom.models.gpt_parameters(config)]
    assert names[:3] == ["wte", "wpe", "h.0.ln_1.weight"]
    assert "h.0.moe.experts.c_fc.weight" in names and names[-1] == "lm_head.weight"


def test_job_fields_pass_through_gpt():
    job = loom.models.gpt(layers=1, register_memory="REGISTER_MEMORY_SEPARATE")
    assert job.proto_message.register_memory == job_pb2.REGISTER_MEMORY_SEPARATE
