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


if __name__ == "__main__":
    unittest.main()
