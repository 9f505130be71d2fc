"""Self-tests of the PyTorch reference (tests/oracle/).

Run:  /usr/bin/python3 -m unittest discover -s tests/oracle -v
  or  cd tests/oracle && /usr/bin/python3 -m unittest test_reference -v
"""

import contextlib
import io
import json
import math
import os
import struct
import subprocess
import sys
import tempfile
import unittest

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import torch  # noqa: E402

import data  # noqa: E402
import models  # noqa: E402
import reference  # noqa: E402
import safetensors_io  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "data"))
import token_dataset_reference  # noqa: E402

torch.set_num_threads(1)

REFERENCE = os.path.join(HERE, "reference.py")
GPL3 = "/usr/share/common-licenses/GPL-3"


def run_ref(*argv, check=True, subproc=False):
    """Runs reference.py, as a subprocess or (faster) in-process via main()."""
    if subproc:
        p = subprocess.run([sys.executable, REFERENCE, *map(str, argv)],
                           capture_output=True, text=True)
    else:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = reference.main([str(a) for a in argv])
        p = subprocess.CompletedProcess(argv, rc, out.getvalue(), err.getvalue())
    if check and p.returncode != 0:
        raise AssertionError(f"reference.py {' '.join(map(str, argv))} failed "
                             f"({p.returncode}):\n{p.stdout}\n{p.stderr}")
    return p


class SafetensorsTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.path = os.path.join(self.tmp.name, "t.safetensors")

    def tearDown(self):
        self.tmp.cleanup()

    def test_round_trip(self):
        g = torch.Generator().manual_seed(1)
        ts = {
            "f32": torch.randn(3, 5, generator=g),
            "f64": torch.randn(2, generator=g, dtype=torch.float64),
            "bf16": torch.randn(4, 2, generator=g).to(torch.bfloat16),
            "f16": torch.randn(7, generator=g).to(torch.float16),
            "i64": torch.tensor([-(2 ** 40), 0, 2 ** 40 + 3], dtype=torch.int64),
            "i32": torch.tensor([[-7, 8], [9, 2 ** 31 - 1]], dtype=torch.int32),
            "u8": torch.tensor([0, 1, 255], dtype=torch.uint8),
            "u16": torch.tensor([0, 1, 32767, 32768, 65535], dtype=torch.int32),
            "scalar": torch.tensor(5, dtype=torch.int64),
            "empty": torch.zeros(0, 3),
        }
        safetensors_io.save(self.path, ts, metadata={"k": "v"}, dtypes={"u16": "U16"})
        back, meta = safetensors_io.load(self.path)
        self.assertEqual(meta, {"k": "v"})
        self.assertEqual(set(back), set(ts))
        for k, t in ts.items():
            self.assertEqual(back[k].dtype, t.dtype, k)
            self.assertEqual(list(back[k].shape), list(t.shape), k)
            self.assertTrue(torch.equal(back[k], t), k)
        # On-disk layout: u64 LE header length (multiple of 8), JSON, buffer.
        with open(self.path, "rb") as f:
            blob = f.read()
        (n,) = struct.unpack("<Q", blob[:8])
        self.assertEqual(n % 8, 0)
        header = json.loads(blob[8:8 + n])
        self.assertEqual(header["u16"]["dtype"], "U16")
        self.assertEqual(header["bf16"]["dtype"], "BF16")
        self.assertEqual(header["scalar"]["shape"], [])
        b, e = header["u16"]["data_offsets"]
        self.assertEqual(struct.unpack("<5H", blob[8 + n + b:8 + n + e]), (0, 1, 32767, 32768, 65535))
        b, e = header["f32"]["data_offsets"]
        self.assertEqual(struct.unpack("<f", blob[8 + n + b:8 + n + b + 4])[0], float(ts["f32"][0, 0]))

    def _write_raw(self, header, buf):
        h = json.dumps(header).encode()
        with open(self.path, "wb") as f:
            f.write(struct.pack("<Q", len(h)) + h + buf)

    def test_reads_foreign_file(self):
        # Unpadded header, tensors out of name order, metadata present.
        buf = struct.pack("<3i", 1, -2, 3) + struct.pack("<2f", 0.5, -1.25)
        self._write_raw({"b": {"dtype": "I32", "shape": [3], "data_offsets": [0, 12]},
                         "a": {"dtype": "F32", "shape": [1, 2], "data_offsets": [12, 20]},
                         "__metadata__": {"format": "pt"}}, buf)
        t, meta = safetensors_io.load(self.path)
        self.assertEqual(meta, {"format": "pt"})
        self.assertEqual(t["b"].tolist(), [1, -2, 3])
        self.assertEqual(t["a"].tolist(), [[0.5, -1.25]])

    def test_rejects_malformed(self):
        bad = [
            ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}}, b"\0" * 4),  # size
            ({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, b"\0" * 8),  # hole
            ({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}, b"\0" * 8),  # tail
            ({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 8]}}, b"\0" * 4),  # bounds
            ({"a": {"dtype": "X9", "shape": [1], "data_offsets": [0, 4]}}, b"\0" * 4),   # dtype
        ]
        for header, buf in bad:
            self._write_raw(header, buf)
            with self.assertRaises(safetensors_io.SafetensorsError, msg=str(header)):
                safetensors_io.load(self.path)


class DataTest(unittest.TestCase):
    def test_batch_formula_bytes(self):
        N, B, T = 100, 3, 5
        tokens = data.tokens_from_bytes(bytes(range(N)), "bytes")
        self.assertEqual(tokens.dtype, torch.int64)
        span = N - T - 1
        for t in range(0, 40, 7):
            x, y = data.get_batch(tokens, t, B, T)
            self.assertEqual(list(x.shape), [B, T])
            for i in range(B):
                off = ((t * B + i) * T) % span
                self.assertEqual(x[i].tolist(), list(range(off, off + T)))
                self.assertEqual(y[i].tolist(), list(range(off + 1, off + T + 1)))
        # A couple of values spelled out: t=7, i=2 -> (23*5) mod 94 = 21.
        x, y = data.get_batch(tokens, 7, B, T)
        self.assertEqual(x[2].tolist(), [21, 22, 23, 24, 25])
        self.assertEqual(y[2].tolist(), [22, 23, 24, 25, 26])

    def test_uint16_little_endian(self):
        vals = [0, 1, 255, 256, 32767, 32768, 65535, 4660] * 3
        tokens = data.tokens_from_bytes(struct.pack(f"<{len(vals)}H", *vals), "uint16")
        self.assertEqual(tokens.tolist(), vals)
        x, y = data.get_batch(tokens, 1, 2, 3)  # span = 24-3-1 = 20; offsets 6, 9
        self.assertEqual(x.tolist(), [vals[6:9], vals[9:12]])
        self.assertEqual(y.tolist(), [vals[7:10], vals[10:13]])
        with self.assertRaises(ValueError):
            data.tokens_from_bytes(b"\0\0\0", "uint16")

    def test_file(self):
        with tempfile.NamedTemporaryFile(suffix=".bin") as f:
            f.write(bytes([200, 3, 7, 9, 11]))
            f.flush()
            self.assertEqual(data.load_tokens(f.name).tolist(), [200, 3, 7, 9, 11])

    def test_too_short(self):
        with self.assertRaises(ValueError):
            data.batch_offsets(0, 1, 8, 9)


def expected_gpt_names(L=4, D=128, V=256, T=64, Fw=512):
    out = [("wte", [V, D]), ("wpe", [T, D])]
    for i in range(L):
        p = f"h.{i}."
        out += [(p + "ln_1.weight", [D]), (p + "ln_1.bias", [D])]
        for w in ("q", "k", "v"):
            out += [(p + f"attn.{w}.weight", [D, D]), (p + f"attn.{w}.bias", [D])]
        out += [(p + "attn.c_proj.weight", [D, D]), (p + "attn.c_proj.bias", [D]),
                (p + "ln_2.weight", [D]), (p + "ln_2.bias", [D]),
                (p + "mlp.c_fc.weight", [D, Fw]), (p + "mlp.c_fc.bias", [Fw]),
                (p + "mlp.c_proj.weight", [Fw, D]), (p + "mlp.c_proj.bias", [D])]
    out += [("ln_f.weight", [D]), ("ln_f.bias", [D]), ("lm_head.weight", [D, V])]
    return out


class ModelTest(unittest.TestCase):
    def test_bfloat16_linear_product_rounds_inputs_output_and_gradients(self):
        cfg = models.GPTConfig(matmul_dtype="bfloat16")
        g = torch.Generator().manual_seed(0)
        x = torch.randn(5, 7, generator=g, requires_grad=True)
        w = torch.randn(7, 3, generator=g, requires_grad=True)
        y = models.linear_product(x, w, cfg)
        self.assertEqual(y.dtype, torch.float32)
        rounded = lambda t: t.bfloat16().float()
        exact = rounded(x.detach()).double() @ rounded(w.detach()).double()
        self.assertTrue(torch.equal(y.detach(), rounded(exact.float())))
        self.assertFalse(torch.equal(y.detach(), x.detach() @ w.detach()))
        dy = torch.randn(5, 3, generator=g)
        y.backward(dy)
        # dx = round(round(dy) @ round(w)^T), every value a bfloat16.
        self.assertTrue(torch.equal(x.grad, rounded(x.grad)))
        expected = rounded((rounded(dy).double() @ rounded(w.detach()).double().T).float())
        self.assertTrue(torch.equal(x.grad, expected))
        with self.assertRaises(ValueError):
            models.GPTConfig(matmul_dtype="float16").validate()

    def test_gpt_names_and_shapes(self):
        specs = models.gpt_param_specs(models.GPTConfig())
        self.assertEqual(sorted((n, s) for n, s, _ in specs), sorted(expected_gpt_names()))
        self.assertEqual(len(specs), 2 + 16 * 4 + 3)

    def test_mlp_names_and_shapes(self):
        specs = models.mlp_param_specs(models.MLPConfig())
        self.assertEqual([(n, s) for n, s, _ in specs],
                         [("wte", [256, 64]), ("fc1.weight", [64, 128]), ("fc1.bias", [128]),
                          ("fc2.weight", [128, 256]), ("fc2.bias", [256])])

    def test_init_statistics(self):
        cfg = models.GPTConfig()
        p = models.init_params(models.gpt_param_specs(cfg), 0)
        self.assertTrue(torch.equal(p["h.0.ln_1.weight"], torch.ones(128)))
        self.assertTrue(torch.equal(p["h.3.attn.q.bias"], torch.zeros(128)))
        self.assertAlmostEqual(float(p["h.1.mlp.c_fc.weight"].std()), 0.02, delta=0.001)
        self.assertAlmostEqual(float(p["h.1.mlp.c_proj.weight"].std()), 0.02 / math.sqrt(8),
                               delta=0.0005)
        self.assertAlmostEqual(float(p["h.0.attn.c_proj.weight"].std()), 0.02 / math.sqrt(8),
                               delta=0.0005)
        self.assertAlmostEqual(float(p["wte"].mean()), 0.0, delta=0.001)
        q = models.init_params(models.gpt_param_specs(cfg), 0)
        self.assertTrue(all(torch.equal(p[k], q[k]) for k in p))  # deterministic

    def test_gpt_loss_at_init(self):
        cfg = models.GPTConfig()
        p = models.init_params(models.gpt_param_specs(cfg), 0)
        tokens = data.load_tokens(GPL3)
        with torch.no_grad():
            loss, logits = models.gpt_forward(p, cfg, *data.get_batch(tokens, 0, 16, 64))
        self.assertEqual(list(logits.shape), [16, 64, 256])
        self.assertLess(abs(float(loss) - math.log(256)), 0.15)

    def test_gpt_causal(self):
        cfg = models.GPTConfig(layers=2)
        p = models.init_params(models.gpt_param_specs(cfg), 3)
        g = torch.Generator().manual_seed(0)
        x = torch.randint(0, 256, (2, 64), generator=g)
        x2 = x.clone()
        x2[:, 40:] = torch.randint(0, 256, (2, 24), generator=g)
        with torch.no_grad():
            _, a = models.gpt_forward(p, cfg, x)
            _, b = models.gpt_forward(p, cfg, x2)
        self.assertTrue(torch.allclose(a[:, :40], b[:, :40], atol=1e-6))
        self.assertFalse(torch.allclose(a[:, 40:], b[:, 40:], atol=1e-3))

    def test_gpt_matches_torch_transformer_layer(self):
        # Independent check of one block (head split, 1/sqrt(Dh), causal mask,
        # pre-LN, exact GELU, [in,out] weights) against nn.TransformerEncoderLayer.
        cfg = models.GPTConfig(layers=1, context=16, width=32, heads=4, mlp_width=48, vocab=50)
        p = models.init_params(models.gpt_param_specs(cfg), 7)
        g = torch.Generator().manual_seed(1)
        for k in p:  # make every parameter non-trivial
            p[k] = p[k] + 0.3 * torch.randn(p[k].shape, generator=g)
        layer = torch.nn.TransformerEncoderLayer(32, 4, dim_feedforward=48, dropout=0.0,
                                                 activation="gelu", layer_norm_eps=1e-5,
                                                 batch_first=True, norm_first=True)
        with torch.no_grad():
            a = "h.0.attn."
            layer.self_attn.in_proj_weight.copy_(torch.cat(
                [p[a + "q.weight"].t(), p[a + "k.weight"].t(), p[a + "v.weight"].t()]))
            layer.self_attn.in_proj_bias.copy_(torch.cat(
                [p[a + "q.bias"], p[a + "k.bias"], p[a + "v.bias"]]))
            layer.self_attn.out_proj.weight.copy_(p[a + "c_proj.weight"].t())
            layer.self_attn.out_proj.bias.copy_(p[a + "c_proj.bias"])
            layer.linear1.weight.copy_(p["h.0.mlp.c_fc.weight"].t())
            layer.linear1.bias.copy_(p["h.0.mlp.c_fc.bias"])
            layer.linear2.weight.copy_(p["h.0.mlp.c_proj.weight"].t())
            layer.linear2.bias.copy_(p["h.0.mlp.c_proj.bias"])
            layer.norm1.weight.copy_(p["h.0.ln_1.weight"])
            layer.norm1.bias.copy_(p["h.0.ln_1.bias"])
            layer.norm2.weight.copy_(p["h.0.ln_2.weight"])
            layer.norm2.bias.copy_(p["h.0.ln_2.bias"])
            x = torch.randint(0, 50, (3, 16), generator=g)
            mask = torch.triu(torch.full((16, 16), float("-inf")), diagonal=1)
            h = torch.nn.functional.embedding(x, p["wte"]) + p["wpe"]
            h = layer.train()(h, src_mask=mask)
            h = torch.nn.functional.layer_norm(h, (32,), p["ln_f.weight"], p["ln_f.bias"], 1e-5)
            want = h @ p["lm_head.weight"]
            _, got = models.gpt_forward(p, cfg, x)
        self.assertTrue(torch.allclose(got, want, atol=2e-5, rtol=1e-5),
                        float((got - want).abs().max()))

    def test_check_params_names_problems(self):
        specs = models.mlp_param_specs(models.MLPConfig())
        good = models.init_params(specs, 0)
        models.check_params(specs, good)
        bad = dict(good)
        del bad["fc1.bias"]
        bad["fc3.weight"] = torch.zeros(2)
        bad["fc2.weight"] = torch.zeros(128, 255)
        with self.assertRaises(ValueError) as cm:
            models.check_params(specs, bad)
        msg = str(cm.exception)
        for s in ("fc1.bias", "fc3.weight", "fc2.weight", "[128, 255]"):
            self.assertIn(s, msg)


class CliTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.d = self.tmp.name

    def tearDown(self):
        self.tmp.cleanup()

    def f(self, name):
        return os.path.join(self.d, name)

    def train(self, model, init, steps, out, *extra):
        run_ref("--model", model, "--init", init, "--data", GPL3, "--steps", steps,
                "--output", self.f(out), *extra)
        with open(self.f(out)) as fh:
            return json.load(fh)

    def test_evaluation_on_the_training_data_is_the_training_loss(self):
        # Evaluated before each update on the batch the step then trains on: the step's loss.
        run_ref("--model", "gpt", "--write-init", self.f("init.st"), "--seed", "0")
        r = self.train("gpt", self.f("init.st"), 3, "eval.json", "--eval-every", 1,
                       "--eval-data", GPL3)
        self.assertEqual(r["validation_losses"],
                         {str(t + 1): loss for t, loss in enumerate(r["losses"])})
        r = self.train("gpt", self.f("init.st"), 5, "eval2.json", "--eval-every", 2,
                       "--eval-data", GPL3)
        self.assertEqual(sorted(r["validation_losses"], key=int), ["1", "3", "5"])

    def test_gpt_adamw_5_steps(self):
        run_ref("--model", "gpt", "--write-init", self.f("init.st"), "--seed", "0")
        run_ref("--model", "gpt", "--init", self.f("init.st"), "--data", GPL3, "--steps", 5,
                "--output", self.f("l.json"), "--save-final", self.f("final.st"), subproc=True)
        with open(self.f("l.json")) as fh:
            r = json.load(fh)
        losses = r["losses"]
        self.assertEqual(len(losses), 5)
        self.assertLess(abs(losses[0] - math.log(256)), 0.15)
        self.assertLess(losses[-1], losses[0] - 0.3)
        self.assertEqual(r["config"]["optimizer"], "adamw")
        self.assertEqual(r["config"]["weight_decay"], 0.1)
        self.assertEqual(r["config"]["betas"], [0.9, 0.95])
        final, _ = safetensors_io.load(self.f("final.st"))
        names = [n for n, _ in expected_gpt_names()]
        want = set(names) | {f"optimizer.{k}.{n}" for k in ("exp_avg", "exp_avg_sq")
                             for n in names} | {"optimizer.step"}
        self.assertEqual(set(final), want)
        self.assertEqual(int(final["optimizer.step"]), 5)

    def test_mlp_adamw_5_steps(self):
        run_ref("--model", "mlp", "--write-init", self.f("init.st"), "--seed", "1")
        # Default lr 1e-3 moves this small-init model slowly but steadily.
        losses = self.train("mlp", self.f("init.st"), 5, "l.json")["losses"]
        self.assertLess(abs(losses[0] - math.log(256)), 0.05)
        self.assertTrue(all(b < a for a, b in zip(losses, losses[1:])), losses)
        losses = self.train("mlp", self.f("init.st"), 5, "l.json", "--lr", "1e-2")["losses"]
        self.assertLess(losses[-1], losses[0] - 0.1)

    def test_mlp_sgd_clip_and_grads(self):
        run_ref("--model", "mlp", "--write-init", self.f("init.st"))
        r = self.train("mlp", self.f("init.st"), 3, "l.json", "--optimizer", "sgd", "--lr", "0.5",
                       "--momentum", "0.9", "--max-norm", "0.5", "--save-grads", self.f("g.st"),
                       "--save-final", self.f("final.st"))
        self.assertEqual(r["config"]["weight_decay"], 0.0)
        self.assertLess(r["losses"][-1], r["losses"][0])
        grads, _ = safetensors_io.load(self.f("g.st"))
        gn = math.sqrt(sum(float(g.double().pow(2).sum()) for g in grads.values()))
        self.assertAlmostEqual(gn, r["grad_norms"][0], places=4)
        final, _ = safetensors_io.load(self.f("final.st"))
        self.assertIn("optimizer.momentum_buffer.fc1.weight", final)

    def test_resume_is_exact(self):
        run_ref("--model", "mlp", "--write-init", self.f("init.st"), "--seed", "2")
        for opt in (["--optimizer", "adamw"], ["--optimizer", "sgd", "--momentum", "0.9"]):
            full = self.train("mlp", self.f("init.st"), 4, "a.json", *opt,
                              "--save-final", self.f("a.st"))
            self.train("mlp", self.f("init.st"), 2, "b.json", *opt, "--save-final", self.f("b.st"))
            part = self.train("mlp", self.f("b.st"), 2, "c.json", *opt, "--resume",
                              "--save-final", self.f("c.st"))
            self.assertEqual(part["config"]["start_step"], 2)
            self.assertEqual(part["losses"], full["losses"][2:])
            a, _ = safetensors_io.load(self.f("a.st"))
            c, _ = safetensors_io.load(self.f("c.st"))
            self.assertEqual(set(a), set(c))
            for k in a:
                self.assertTrue(torch.equal(a[k], c[k]), k)

    def test_rejects_wrong_init(self):
        run_ref("--model", "mlp", "--write-init", self.f("init.st"), "--width", "32")
        p = run_ref("--model", "mlp", "--init", self.f("init.st"), "--data", GPL3,
                    "--steps", 1, "--output", self.f("l.json"), check=False, subproc=True)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("wte", p.stderr)
        self.assertIn("[256, 32]", p.stderr)
        # A checkpoint with optimizer state needs --resume.
        run_ref("--model", "mlp", "--write-init", self.f("init2.st"))
        self.train("mlp", self.f("init2.st"), 1, "l.json", "--save-final", self.f("f.st"))
        p = run_ref("--model", "mlp", "--init", self.f("f.st"), "--data", GPL3,
                    "--steps", 1, "--output", self.f("l.json"), check=False)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("optimizer.exp_avg.wte", p.stderr)

    def test_timing_mode(self):
        p = run_ref("--model", "mlp", "--steps-timing", 3, "--warmup", 1,
                    "--output", self.f("t.json"))
        self.assertIn("median_step_ms", p.stdout)
        self.assertIn("gemm_1024_gflops", p.stdout)
        with open(self.f("t.json")) as fh:
            r = json.load(fh)
        self.assertGreater(r["gemm_1024_gflops"], 0)
        self.assertGreater(r["gemm_1024_gflops_cpu"], 0)
        self.assertGreater(r["median_step_cpu_ms"], 0)
        self.assertEqual(r["steps_timed"], 3)


class MoeReferenceTest(unittest.TestCase):
    """The reference's routing: GShard slot order, drops, renormalised weights, aux loss."""

    def config(self, **changes):
        cfg = models.MoEGPTConfig(experts=3, top_k=2, capacity_factor=1.0)
        for key, value in changes.items():
            setattr(cfg, key, value)
        return cfg

    def test_slots_fill_first_choices_before_second_choices(self):
        # 4 tokens, 3 experts of ceil(0.75 * 4 * 2 / 3) = 2 slots.
        cfg = self.config(capacity_factor=0.75)
        self.assertEqual(models.moe_capacity(cfg, 4), 2)
        probs = torch.tensor([[[0.6, 0.3, 0.1], [0.5, 0.1, 0.4], [0.7, 0.2, 0.1],
                               [0.1, 0.3, 0.6]]])
        choices, weights, kept, f = models.route(probs, cfg)
        self.assertEqual(choices[0].tolist(), [[0, 1], [0, 2], [0, 1], [2, 1]])
        # e0 takes t0 and t1 (t2's first choice is dropped); e1 t0 and t2 (t3's second dropped).
        self.assertEqual(kept[0].tolist(), [[True, True], [True, True], [False, True],
                                            [True, False]])
        self.assertTrue(torch.allclose(weights[0, 0], torch.tensor([0.6 / 0.9, 0.3 / 0.9])))
        self.assertTrue(torch.allclose(f[0], torch.tensor([3 / 8, 3 / 8, 2 / 8])))

    def test_top_one_weighs_one_and_ties_go_to_the_lower_expert(self):
        cfg = self.config(top_k=1, experts=2)
        probs = torch.tensor([[[0.5, 0.5], [0.2, 0.8]]])
        choices, weights, kept, _ = models.route(probs, cfg)
        self.assertEqual(choices[0, :, 0].tolist(), [0, 1])
        self.assertEqual(weights.flatten().tolist(), [1.0, 1.0])

    def test_aux_loss_and_counts_of_a_layer(self):
        cfg = self.config(experts=2, top_k=1, capacity_factor=1.0, layers=2, moe_layers=(0,),
                          width=4, heads=1, mlp_width=8)
        specs = models.gpt_param_specs(cfg)
        params = models.init_params(specs, 0)
        m = torch.randn(2, 3, 4)
        stats = {}
        models.moe_mlp(params, "h.0.", m, cfg, stats)
        probs = torch.softmax(m @ params["h.0.moe.router.weight"], dim=-1)
        top = probs.argmax(dim=-1)
        expected = 0.0
        for b in range(2):
            f = torch.stack([(top[b] == e).float().mean() for e in range(2)])
            expected += 2 * float((f * probs[b].mean(dim=0)).sum())
        self.assertAlmostEqual(float(stats["aux_loss"]), expected / 2, places=6)
        self.assertEqual(int(stats["tokens_per_expert"].sum()), 6)
        # Capacity ceil(1.0 * 3 / 2) = 2 per expert and group: a group's 3 tokens on one expert
        # drop one.
        dropped = sum(max(0, int((top[b] == e).sum()) - 2) for b in range(2) for e in range(2))
        self.assertEqual(stats["dropped"], dropped)

    def test_router_gets_gradients_through_the_top_two_weights(self):
        cfg = self.config(experts=3, top_k=2, capacity_factor=2.0, layers=1, moe_layers=(0,),
                          width=4, heads=1, mlp_width=8, aux_loss_coefficient=0.0)
        params = models.init_params(models.gpt_param_specs(cfg), 1)
        router = params["h.0.moe.router.weight"].requires_grad_(True)
        m = torch.randn(2, 3, 4)
        out = models.moe_mlp(params, "h.0.", m, cfg, {})
        out.sum().backward()
        self.assertGreater(float(router.grad.abs().sum()), 0.0)


def route_by_loops(probs, cfg):
    """route() written out plainly, token by token and group by group, for comparison: every
    token's first choice in token order, then every second choice; ties to the lower index."""
    B, T, E = probs.shape
    k = cfg.top_k
    capacity = models.moe_capacity(cfg, T)
    choices = [[None] * T for _ in range(B)]
    weights = [[None] * T for _ in range(B)]
    kept = [[[False] * k for _ in range(T)] for _ in range(B)]
    for b in range(B):
        for t in range(T):
            row = [float(v) for v in probs[b, t]]
            picked = []
            for _ in range(k):
                best = None
                for e in range(E):
                    if e not in picked and (best is None or row[e] > row[best]):
                        best = e
                picked.append(best)
            choices[b][t] = picked
            total = sum(row[e] for e in picked)
            weights[b][t] = [row[e] / total for e in picked]
        filled = [0] * E
        for rank in range(k):
            for t in range(T):
                e = choices[b][t][rank]
                if filled[e] < capacity:
                    filled[e] += 1
                    kept[b][t][rank] = True
    return choices, weights, kept


class MoeReferenceByHandTest(unittest.TestCase):
    """The MoE layer against hand computations and a plain-loop router; skewed routing."""

    def tiny(self, **changes):
        cfg = models.MoEGPTConfig(layers=1, moe_layers=(0,), width=2, heads=1, mlp_width=4,
                                  experts=2, top_k=1, capacity_factor=1.0)
        for key, value in changes.items():
            setattr(cfg, key, value)
        return cfg

    def expert(self, params, e, x):
        pre = "h.0.moe.experts."
        h = x @ params[pre + "c_fc.weight"][e] + params[pre + "c_fc.bias"][e]
        h = torch.nn.functional.gelu(h)
        return h @ params[pre + "c_proj.weight"][e] + params[pre + "c_proj.bias"][e]

    def test_route_matches_plain_loops(self):
        g = torch.Generator().manual_seed(5)
        for experts, top_k, factor in ((4, 2, 1.25), (4, 1, 1.0), (3, 2, 0.5), (2, 2, 2.0)):
            cfg = models.MoEGPTConfig(experts=experts, top_k=top_k, capacity_factor=factor)
            logits = torch.randn(3, 17, experts, generator=g)
            logits[0] = logits[0].round()   # many exact ties: they go to the lower index
            logits[1, :, 0] += 2.0          # skewed towards expert 0: drops
            probs = torch.softmax(logits, dim=-1)
            choices, weights, kept, _ = models.route(probs, cfg)
            want_choices, want_weights, want_kept = route_by_loops(probs, cfg)
            self.assertEqual(choices.tolist(), want_choices, (experts, top_k, factor))
            self.assertEqual(kept.tolist(), want_kept, (experts, top_k, factor))
            self.assertTrue(torch.allclose(weights, torch.tensor(want_weights), atol=1e-6))

    def test_aux_loss_drops_and_combine_by_hand(self):
        # Two groups of 3 tokens, 2 experts, top-1, capacity ceil(1.0 * 3 * 1 / 2) = 2.
        # x = [1, 0] routes with probabilities [3/4, 1/4] and x = [0, 1] with [1/4, 3/4].
        cfg = self.tiny()
        self.assertEqual(models.moe_capacity(cfg, 3), 2)
        params = models.init_params(models.gpt_param_specs(cfg), 0)
        params["h.0.moe.router.weight"] = torch.eye(2) * math.log(3.0)
        params["h.0.moe.experts.c_fc.bias"] = torch.tensor([[0.1, -0.2, 0.3, 0.0],
                                                            [0.0, 0.5, -0.1, 0.2]])
        params["h.0.moe.experts.c_proj.bias"] = torch.tensor([[0.05, -0.05], [0.2, 0.1]])
        m = torch.tensor([[[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]],
                          [[0.0, 1.0], [0.0, 1.0], [0.0, 1.0]]])
        stats = {}
        out = models.moe_mlp(params, "h.0.", m, cfg, stats)
        # Group 0: f = [2/3, 1/3], P = [(3/4 + 3/4 + 1/4) / 3, (1/4 + 1/4 + 3/4) / 3],
        #   aux = 2 * (2/3 * 7/12 + 1/3 * 5/12) = 19/18.
        # Group 1: f = [0, 1], P = [1/4, 3/4], aux = 2 * 3/4 = 3/2.
        self.assertAlmostEqual(float(stats["aux_loss"]), (19 / 18 + 3 / 2) / 2, places=6)
        # Group 1 sends all three tokens to expert 1, which has 2 slots: the third is dropped.
        self.assertEqual(stats["dropped"], 1)
        self.assertEqual(stats["tokens_per_expert"].tolist(), [2, 4])
        # Top-1 weighs 1: each kept token gets its expert's output, the dropped one nothing.
        x0, x1 = torch.tensor([1.0, 0.0]), torch.tensor([0.0, 1.0])
        want = torch.stack([torch.stack([self.expert(params, 0, x0), self.expert(params, 0, x0),
                                         self.expert(params, 1, x1)]),
                            torch.stack([self.expert(params, 1, x1), self.expert(params, 1, x1),
                                         torch.zeros(2)])])
        self.assertTrue(torch.allclose(out, want, atol=1e-6), (out, want))

    def test_top_two_combine_by_hand(self):
        # One token, 3 experts, top-2: probabilities softmax([0, ln 2, ln 5]) = [1, 2, 5] / 8,
        # choices 2 then 1, weights 5/7 and 2/7; capacity ceil(1.25 * 1 * 2 / 3) = 1: both kept.
        cfg = self.tiny(experts=3, top_k=2, capacity_factor=1.25, width=3, heads=1)
        params = models.init_params(models.gpt_param_specs(cfg), 2)
        params["h.0.moe.router.weight"] = torch.tensor([[0.0, math.log(2.0), math.log(5.0)],
                                                        [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
        x = torch.tensor([1.0, 0.0, 0.0])
        stats = {}
        out = models.moe_mlp(params, "h.0.", x.view(1, 1, 3), cfg, stats)
        want = 5 / 7 * self.expert(params, 2, x) + 2 / 7 * self.expert(params, 1, x)
        self.assertTrue(torch.allclose(out.view(3), want, atol=1e-6))
        self.assertEqual(stats["dropped"], 0)
        # f = [0, 1/2, 1/2], P = [1/8, 2/8, 5/8]: aux = 3 * (1/8 + 5/16) = 21/16.
        self.assertAlmostEqual(float(stats["aux_loss"]), 21 / 16, places=6)

    def test_loss_is_cross_entropy_plus_the_weighted_aux_loss(self):
        cfg = models.MoEGPTConfig(layers=2, moe_layers=(0, 1), aux_loss_coefficient=0.5)
        params = models.init_params(models.gpt_param_specs(cfg), 4)
        tokens = data.load_tokens(GPL3)
        x, y = data.get_batch(tokens, 0, 2, 64)
        with torch.no_grad():
            stats = {}
            loss, logits = models.moe_gpt_forward(params, cfg, x, y, stats)
            cross_entropy = torch.nn.functional.cross_entropy(logits.reshape(-1, 256),
                                                              y.reshape(-1))
        # The reported loss is the total: the aux loss summed over both MoE layers, weighted.
        self.assertAlmostEqual(float(loss), float(cross_entropy) + 0.5 * float(stats["aux_loss"]),
                               places=5)
        self.assertEqual(int(stats["tokens_per_expert"].sum()), 2 * 2 * 64 * 2)

    def skewed(self, cfg, identical_tokens):
        """Initial weights whose router sends every token's first choice to expert 0: ln_2's bias
        is 1, so sum_d m_d = D for every token (LayerNorm's output sums to 0), and the router's
        column 0 is 0.05 (logit 0.05 * D = 6.4 against about +-0.3 for the other experts).
        With identical_tokens, ln_2's weight is 0 too: every token has the same m, so its second
        choice is the same expert for all."""
        params = models.init_params(models.gpt_param_specs(cfg), 6)
        for layer in cfg.moe_layers:
            pre = f"h.{layer}."
            params[pre + "ln_2.bias"] = torch.ones(cfg.width)
            if identical_tokens:
                params[pre + "ln_2.weight"] = torch.zeros(cfg.width)
            router = params[pre + "moe.router.weight"].clone()
            router[:, 0] = 0.05
            params[pre + "moe.router.weight"] = router
        for value in params.values():
            value.requires_grad_(True)
        return params

    def test_skewed_routing_drops_the_overflow_and_stays_finite(self):
        cfg = models.MoEGPTConfig()   # 4 experts, top-2, capacity 1.25, blocks 1 and 3
        T, B = cfg.context, 4
        capacity = models.moe_capacity(cfg, T)
        self.assertEqual(capacity, 40)   # ceil(1.25 * 64 * 2 / 4)
        x, y = data.get_batch(data.load_tokens(GPL3), 0, B, T)
        layers = len(cfg.moe_layers)

        # Identical tokens: all 64 first choices on expert 0 and all 64 second choices on one
        # other expert: 24 of each are dropped, per group and layer.
        params = self.skewed(cfg, identical_tokens=True)
        stats = {}
        loss, _ = models.moe_gpt_forward(params, cfg, x, y, stats)
        self.assertTrue(math.isfinite(float(loss)))
        self.assertEqual(stats["dropped"], 2 * (T - capacity) * B * layers)
        self.assertEqual(int(stats["tokens_per_expert"][0]), T * B * layers)
        # Every token has m = 1, so logits = the router's column sums (6.4 for expert 0): f is
        # 1/2 for expert 0 and for the second choice s, P is the softmax of the column sums,
        # aux = 4 * (P_0 + P_s) / 2 per layer.
        want_aux = 0.0
        for layer in cfg.moe_layers:
            probs = torch.softmax(params[f"h.{layer}.moe.router.weight"].detach().sum(dim=0), 0)
            second = 1 + int(probs[1:].argmax())
            want_aux += 4 * float(probs[0] + probs[second]) / 2
        self.assertAlmostEqual(float(stats["aux_loss"]), want_aux, places=5)
        loss.backward()
        for name, value in params.items():
            self.assertTrue(bool(torch.isfinite(value.grad).all()), name)

        # Most tokens: LayerNorm as usual, so second choices spread over experts 1-3; every
        # first choice is still expert 0 (24 dropped per group and layer), and the second
        # choices' drops are those of the plain-loop router on the same probabilities.
        params = self.skewed(cfg, identical_tokens=False)
        probabilities = []
        original_route = models.route

        def recording_route(probs, route_cfg):
            probabilities.append(probs.detach().clone())
            return original_route(probs, route_cfg)

        models.route = recording_route
        try:
            stats = {}
            loss, _ = models.moe_gpt_forward(params, cfg, x, y, stats)
        finally:
            models.route = original_route
        self.assertTrue(math.isfinite(float(loss)))
        self.assertEqual(len(probabilities), layers)
        dropped = 0
        for probs in probabilities:
            choices, _, kept = route_by_loops(probs, cfg)
            self.assertTrue(all(c[0] == 0 for group in choices for c in group))
            dropped += sum(not a for group in kept for token in group for a in token)
        self.assertGreaterEqual(dropped, (T - capacity) * B * layers)
        self.assertEqual(stats["dropped"], dropped)
        loss.backward()
        self.assertGreater(float(params["h.1.moe.router.weight"].grad.abs().sum()), 0.0)

    def test_moe_gpt_trains_from_a_checkpoint(self):
        with tempfile.TemporaryDirectory() as tmp:
            init, out = os.path.join(tmp, "init.st"), os.path.join(tmp, "r.json")
            run_ref("--model", "moe-gpt", "--write-init", init, "--seed", "0")
            run_ref("--model", "moe-gpt", "--init", init, "--data", GPL3, "--steps", 3,
                    "--batch", 4, "--output", out)
            with open(out) as fh:
                r = json.load(fh)
            self.assertEqual(len(r["losses"]), 3)
            self.assertEqual(len(r["dropped"]), 3)
            for counts in r["tokens_per_expert"]:   # k * T * B * layers assignments
                self.assertEqual(sum(counts), 2 * 64 * 4 * 2)
            self.assertEqual((r["config"]["experts"], r["config"]["top_k"]), (4, 2))
            # Step 0's loss is the forward pass on the checkpoint and batch 0.
            tensors, _ = safetensors_io.load(init)
            cfg = models.MoEGPTConfig()
            params = models.check_params(models.gpt_param_specs(cfg), tensors)
            stats = {}
            # loom-gpt's batches: the GPL text as a token dataset, shuffled with seed 0.
            x, y = token_dataset_reference.Dataset(
                token_dataset_reference.Source(GPL3)).batch(0, 4, 64)
            with torch.no_grad():
                loss, _ = models.moe_gpt_forward(params, cfg, torch.from_numpy(x),
                                                 torch.from_numpy(y), stats=stats)
            self.assertAlmostEqual(r["losses"][0], float(loss), places=5)
            self.assertEqual(r["dropped"][0], stats["dropped"])


if __name__ == "__main__":
    unittest.main()
