"""loom.models.gpt() builds the job `loom-gpt --emit` writes, field for field, for a matrix of
flag sets (dense and MoE, every parallel layout, learning-rate schedules and the "no_decay"
parameter group), and refuses bad settings as loom-gpt does."""

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
])
def test_bad_settings_are_refused_as_loom_gpt_refuses_them(settings, words):
    with pytest.raises(ValueError) as raised:
        loom.models.gpt(**settings)
    assert "GPT config: " in str(raised.value) and words in str(raised.value)


def test_parameters_in_canonical_order():
    config = loom.models.GptConfig(layers=1, experts=2, moe_layers=(0,))
    names = [parameter.name for parameter in loom.models.gpt_parameters(config)]
    assert names[:3] == ["wte", "wpe", "h.0.ln_1.weight"]
    assert "h.0.moe.experts.c_fc.weight" in names and names[-1] == "lm_head.weight"


def test_job_fields_pass_through_gpt():
    job = loom.models.gpt(layers=1, register_memory="REGISTER_MEMORY_SEPARATE")
    assert job.proto_message.register_memory == job_pb2.REGISTER_MEMORY_SEPARATE
