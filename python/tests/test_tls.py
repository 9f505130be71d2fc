"""A local cluster with mutual TLS (scripts/make-certs' certificates): a client with its own
certificate trains a job and owns it; a client without TLS is refused."""

import pytest

import loom


@pytest.fixture(scope="module")
def tls_cluster(binary, make_certs, tmp_path_factory, source_dir):
    from conftest import LocalCluster

    certificates = tmp_path_factory.mktemp("certs")
    make_certs(certificates, "local", "127.0.0.1", roles=["node", "admin"])
    make_certs(certificates, "alice", roles=["client"])
    flags = ["--tls-ca", str(certificates / "ca.pem"), "--tls-cert",
             str(certificates / "local.pem"), "--tls-key", str(certificates / "local.key")]
    cluster = LocalCluster(binary("loomctl"), tmp_path_factory.mktemp("tls-cluster"),
                           devices_per_node=1, tls_flags=flags)
    (cluster.data / "tokens.bin").write_bytes((source_dir / "README.md").read_bytes()[:20000])
    yield cluster, certificates
    cluster.stop()


def test_client_certificate_trains_and_owns_its_job(tls_cluster):
    cluster, certificates = tls_cluster
    tls = loom.TLS(certificates / "ca.pem", certificates / "alice.pem",
                   certificates / "alice.key")
    with loom.Client(cluster.address, tls=tls, timeout=30, watch_timeout=120) as client:
        job = loom.models.gpt(layers=1, width=32, heads=2, mlp_width=64, context=16, batch=2,
                              steps=2, data=str(cluster.data / "tokens.bin"))
        run = client.submit(job, watch=True)
        assert [step.step for step in run] == [1, 2]
        assert run.status().owner == "alice"


def test_plaintext_client_is_refused(tls_cluster):
    cluster, _ = tls_cluster
    with loom.Client(cluster.address, timeout=5) as client:
        with pytest.raises(loom.Unavailable):
            client.nodes()
