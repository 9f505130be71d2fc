"""loom.LocalCluster starts and stops a cluster of loomd processes; loom.plot_losses draws a run's
losses (as text where matplotlib is missing): the README's first Python lines."""

import io

import loom


def test_a_local_cluster_trains_a_scheduled_gpt_and_the_losses_plot(binary, source_dir, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "tokens.bin").write_bytes((source_dir / "README.md").read_bytes()[:20000])
    with loom.LocalCluster(loomctl=binary("loomctl"), data_roots=[data],
                           directory=tmp_path / "cluster") as cluster:
        job = loom.models.gpt(layers=2, width=32, heads=2, mlp_width=64, context=16, batch=4,
                              steps=4, lr_warmup=2, lr_decay="cosine", data=str(data / "tokens.bin"),
                              eval_every=2, eval_data=str(data / "tokens.bin"))
        with cluster.client(timeout=30).submit(job, watch=True) as run:
            steps = list(run.progress(use_tqdm=False))
    assert [step.step for step in steps] == [1, 2, 3, 4]
    chart = io.StringIO()
    loom.plot_losses(steps, file=chart, use_matplotlib=False)
    lines = chart.getvalue().splitlines()
    assert len(lines) == 5 and "val_loss" in lines[1] and "val_loss" not in lines[2]
    assert not (tmp_path / "cluster" / "state" / "cluster.json").exists()
