#!/usr/bin/python3
"""A real Prometheus server scrapes a running three-node Loom cluster.

    /usr/bin/python3 tests/cluster/prometheus_scrape_test.py --bin-dir build/bin [--tls]

Starts three loomd processes (a coordinator and two workers, each with --metrics-listen on a free
port), checks every daemon's /metrics with `promtool check metrics`, trains a small data-parallel
GPT across the three nodes with `loomctl submit --watch`, runs Debian's `prometheus` with a scrape
configuration naming the three daemons, and queries it until the acts counter of every node and
the coordinator's finished-jobs counter are there. Exit 77 (ctest: skipped) when prometheus or
promtool is not installed.

--tls: the same with mutual TLS (certificates from scripts/make-certs): the daemons serve
/metrics over HTTPS to scrapers with a certificate of their authority, Prometheus scrapes with
`scheme: https` and a `tls_config`, and a scrape without a client certificate is refused.
"""

import argparse
import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

START_TIMEOUT = 30
JOB_TIMEOUT = 240
SCRAPE_TIMEOUT = 60


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Loomd:
    """One loomd on free ports; its gRPC and metrics addresses read from its first lines."""

    def __init__(self, binary, name, coordinator=None, rank=None, tls_flags=()):
        command = [binary, "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
                   "--node-name", name, "--devices", "cpu:1",
                   # The GPT's default training text.
                   "--data-root", "/usr/share/common-licenses", *tls_flags]
        if coordinator:
            command += ["--coordinator", coordinator, "--node-rank", str(rank)]
        self.name = name
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, text=True)
        self.output = []
        self.address = None
        self.metrics = None
        self.scheme = None
        ready = threading.Event()

        def read_output():
            for line in self.process.stdout:
                self.output.append(line)
                if match := re.search(r"listening on (\S+)", line):
                    self.address = match.group(1)
                if match := re.search(r"metrics on (https?)://(\S+)/metrics", line):
                    self.scheme, self.metrics = match.group(1), match.group(2)
                    ready.set()
            ready.set()

        threading.Thread(target=read_output, daemon=True).start()
        if not ready.wait(START_TIMEOUT) or self.metrics is None:
            self.stop()
            raise RuntimeError(f"{name} did not print its addresses:\n{''.join(self.output)}")

    def stop(self):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def get(url, timeout=10, context=None):
    with urllib.request.urlopen(url, timeout=timeout, context=context) as response:
        return response.read().decode()


class Certificates:
    """scripts/make-certs in `directory`: an authority, a certificate per daemon (naming
    127.0.0.1) and one for the clients (loomctl, Prometheus, this script)."""

    def __init__(self, directory):
        make_certs = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                  "scripts", "make-certs")
        for name, roles, hosts in [("daemon", ["--role", "node"], ["127.0.0.1"]),
                                   ("client", [], [])]:
            subprocess.run([make_certs, *roles, directory, name, *hosts], check=True,
                           stdout=subprocess.DEVNULL)
        self.ca = os.path.join(directory, "ca.pem")
        self.directory = directory

    def flags(self, name):
        return ["--tls-ca", self.ca, "--tls-cert", os.path.join(self.directory, f"{name}.pem"),
                "--tls-key", os.path.join(self.directory, f"{name}.key")]

    def context(self, with_client_certificate=True):
        context = ssl.create_default_context(cafile=self.ca)
        if with_client_certificate:
            context.load_cert_chain(os.path.join(self.directory, "client.pem"),
                                    os.path.join(self.directory, "client.key"))
        return context


def query(prometheus, expression):
    body = get(f"http://{prometheus}/api/v1/query?" +
               urllib.parse.urlencode({"query": expression}))
    answer = json.loads(body)
    if answer.get("status") != "success":
        raise RuntimeError(f"query {expression!r} failed: {body}")
    return answer["data"]["result"]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin-dir", required=True)
    parser.add_argument("--tls", action="store_true", help="mutual TLS everywhere")
    arguments = parser.parse_args()
    for tool in ["prometheus", "promtool"]:
        if shutil.which(tool) is None:
            print(f"SKIP: {tool} is not installed (Debian package prometheus)")
            return 77

    work = tempfile.mkdtemp(prefix="loom_prometheus_")
    daemons = []
    prometheus = None
    try:
        certificates = Certificates(os.path.join(work, "certs")) if arguments.tls else None
        daemon_tls = certificates.flags("daemon") if certificates else []
        client_tls = certificates.flags("client") if certificates else []
        context = certificates.context() if certificates else None
        daemons.append(Loomd(os.path.join(arguments.bin_dir, "loomd"), "node0",
                             tls_flags=daemon_tls))
        for rank in (1, 2):
            daemons.append(Loomd(os.path.join(arguments.bin_dir, "loomd"), f"node{rank}",
                                 daemons[0].address, rank, tls_flags=daemon_tls))
        scheme = "https" if arguments.tls else "http"
        for daemon in daemons:
            if daemon.scheme != scheme:
                raise RuntimeError(f"{daemon.name} serves /metrics over {daemon.scheme}, "
                                   f"expected {scheme}")

        if certificates:
            # Without a client certificate: no metrics.
            try:
                get(f"https://{daemons[0].metrics}/metrics",
                    context=certificates.context(with_client_certificate=False))
                raise RuntimeError("a scrape without a client certificate got the metrics")
            except (ssl.SSLError, ConnectionError, urllib.error.URLError) as error:
                print(f"node0: a scrape without a client certificate is refused ({error})")

        # Every daemon's exposition passes Prometheus' own linter.
        for daemon in daemons:
            text = get(f"{scheme}://{daemon.metrics}/metrics", context=context)
            lint = subprocess.run(["promtool", "check", "metrics"], input=text, text=True,
                                  capture_output=True)
            if lint.returncode != 0:
                raise RuntimeError(f"promtool check metrics on {daemon.name}:\n"
                                   f"{lint.stdout}{lint.stderr}")
            print(f"{daemon.name}: /metrics at {daemon.metrics} passes promtool check metrics")

        # A data-parallel job across the three nodes.
        job = os.path.join(work, "gpt.pbtxt")
        subprocess.run([os.path.join(arguments.bin_dir, "loom-gpt"), "--dp", "3", "--batch", "6",
                        "--steps", "4", "--devices-per-node", "1", "--emit", job], check=True)
        submit = subprocess.run([os.path.join(arguments.bin_dir, "loomctl"), "submit", job,
                                 "--watch", "--coordinator", daemons[0].address, *client_tls],
                                capture_output=True, text=True, timeout=JOB_TIMEOUT)
        print(submit.stdout + submit.stderr)
        if submit.returncode != 0:
            raise RuntimeError(f"loomctl submit exited {submit.returncode}")

        web = f"127.0.0.1:{free_port()}"
        config = os.path.join(work, "prometheus.yml")
        targets = ", ".join(f"'{daemon.metrics}'" for daemon in daemons)
        tls_config = ""
        if certificates:
            tls_config = (f"    scheme: https\n    tls_config:\n"
                          f"      ca_file: {certificates.ca}\n"
                          f"      cert_file: {certificates.directory}/client.pem\n"
                          f"      key_file: {certificates.directory}/client.key\n")
        with open(config, "w") as file:
            file.write("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                       "scrape_configs:\n  - job_name: loomd\n" + tls_config +
                       f"    static_configs:\n      - targets: [{targets}]\n")
        check = subprocess.run(["promtool", "check", "config", config], capture_output=True,
                               text=True)
        if check.returncode != 0:
            raise RuntimeError(f"promtool check config:\n{check.stdout}{check.stderr}")
        prometheus = subprocess.Popen(
            ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={work}/data",
             f"--web.listen-address={web}"],
            stdout=subprocess.DEVNULL, stderr=open(os.path.join(work, "prometheus.log"), "w"))

        deadline = time.monotonic() + SCRAPE_TIMEOUT
        while True:
            try:
                acts = query(web, 'loom_actor_acts_total{job="loomd",kind="compute"} > 0')
                # Only the coordinator counts jobs (the workers' counters stay 0).
                finished = query(web, 'sum(loom_jobs_finished_total{state="succeeded"})')
                up = query(web, 'up{job="loomd"} == 1')
                if len(acts) == 3 and len(up) == 3 and finished and \
                        float(finished[0]["value"][1]) == 1:
                    break
            except OSError:
                pass  # Prometheus is still starting
            if time.monotonic() > deadline or prometheus.poll() is not None:
                log = open(os.path.join(work, "prometheus.log")).read()[-3000:]
                try:
                    targets = get(f"http://{web}/api/v1/targets")
                except OSError as error:
                    targets = str(error)
                raise RuntimeError(f"Prometheus did not report the acts of 3 nodes within "
                                   f"{SCRAPE_TIMEOUT} s; its targets: {targets}\n"
                                   f"its log ends:\n{log}")
            time.sleep(0.5)
        for sample in acts:
            print(f"prometheus: {sample['metric']['instance']} "
                  f"loom_actor_acts_total{{kind=\"compute\"}} = {sample['value'][1]}")
        print("PASS")
        return 0
    finally:
        if prometheus is not None:
            prometheus.terminate()
            prometheus.wait(30)
        for daemon in reversed(daemons):
            daemon.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
