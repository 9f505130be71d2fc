#!/usr/bin/env python3
"""loomctl cluster up / down end to end.

check_local_cluster.py LOOMCTL STATE_DIR NODES [--tls] [--bind]

Starts a local cluster of NODES loomds (the loomd next to loomctl) in STATE_DIR, checks that a
second `up` is refused, that `loomctl nodes` lists NODES ready nodes and that a training job
succeeds on it; then `down`: every daemon is gone and the state file removed. With one node it
also checks that a daemon that cannot start fails `up` with the end of its log, leaving nothing
running, and that Ctrl-C (SIGINT) while `up` waits stops the daemon it started. With --tls the cluster runs with mutual TLS (certificates from scripts/make-certs in
STATE_DIR/certs): the state file records the files, the commands work with them and a client
without them gets no answer. With --bind the daemons are bound (--bind-cpus auto where this
process may use a CPU per node, else one CPU list per node naming the CPUs in turn): every thread
of each daemon runs on the CPUs the state file records for it. Run from the repository root.
"""
import json
import os
import signal
import subprocess
import sys
import time

LOOMCTL, STATE_DIRECTORY, NODES = sys.argv[1], sys.argv[2], int(sys.argv[3])
TLS = "--tls" in sys.argv[4:]
BIND = "--bind" in sys.argv[4:]
STATE_FILE = os.path.join(STATE_DIRECTORY, "cluster.json")
failures = []


def check(condition, message):
    if not condition:
        failures.append(message)
        print("FAIL: " + message, file=sys.stderr)


def loomctl(*arguments):
    result = subprocess.run([LOOMCTL, *arguments], capture_output=True, text=True, timeout=180)
    print("$ loomctl " + " ".join(arguments) + f"  -> {result.returncode}")
    print(result.stdout[:2000], end="")
    print(result.stderr, end="", file=sys.stderr)
    return result


def running(pid, start_ticks):
    """Whether the process runs: /proc/PID/stat exists, is no zombie, and started then."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return fields[0] not in ("Z", "X") and int(fields[19]) == start_ticks


state_flag = ["--state-dir", STATE_DIRECTORY]
loomctl("cluster", "down", *state_flag)  # leftovers of an earlier run, if any

tls_flags = []
if TLS:
    certificates = os.path.join(STATE_DIRECTORY, "certs")
    subprocess.run(["rm", "-rf", certificates], check=True)
    subprocess.run(["scripts/make-certs", "--role", "node", "--role", "admin", certificates, "local",
                    "127.0.0.1"], check=True,
                   stdout=subprocess.DEVNULL)
    tls_flags = ["--tls-ca", os.path.join(certificates, "ca.pem"),
                 "--tls-cert", os.path.join(certificates, "local.pem"),
                 "--tls-key", os.path.join(certificates, "local.key")]

bind_flags = []
if BIND:
    allowed = sorted(os.sched_getaffinity(0))
    binding = "auto" if len(allowed) >= NODES else "/".join(
        str(allowed[rank % len(allowed)]) for rank in range(NODES))
    bind_flags = ["--bind-cpus", binding]


def cpu_list(text):
    """The CPUs of a CPU list such as '0-3,8'."""
    cpus = set()
    for part in text.split(","):
        first, _, last = part.partition("-")
        cpus.update(range(int(first), int(last or first) + 1))
    return cpus


def bound_cpus(pid):
    """The CPU list of every thread of the process, as a set of strings."""
    lists = set()
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/status") as status:
                for line in status:
                    if line.startswith("Cpus_allowed_list:"):
                        lists.add(line.split(":", 1)[1].strip())
        except OSError:
            pass  # a thread that ended meanwhile
    return lists


result = loomctl("cluster", "up", "--nodes", str(NODES), "--devices-per-node", "2",
                 "--timeout", "60s", *state_flag, *tls_flags, *bind_flags)
if result.returncode != 0:
    print(f"FAIL: cluster up exited {result.returncode}", file=sys.stderr)
    sys.exit(1)
address = result.stdout.strip()
nodes = []
try:
    with open(STATE_FILE) as file:
        state = json.load(file)
    nodes = state["nodes"]
    check(state["coordinator"] == address, "the state file records the printed coordinator")
    check(len(nodes) == NODES, f"{NODES} nodes recorded")
    check(all(running(node["pid"], node["start_ticks"]) for node in nodes), "every daemon runs")
    check(all(os.path.exists(node["log"]) for node in nodes), "every daemon has its log")
    if BIND:
        recorded = [node.get("cpus", "") for node in nodes]
        check(all(recorded), f"the state file records every daemon's CPUs: {recorded}")
        for node in nodes:
            threads = bound_cpus(node["pid"])
            check(len(threads) == 1 and cpu_list(threads.pop()) == cpu_list(node["cpus"]),
                  f"every thread of {node['name']} runs on CPUs {node['cpus']}: {threads}")
            check(f"bound to CPUs {node['cpus']}" in result.stderr,
                  f"up says which CPUs {node['name']} is bound to")
        if bind_flags[1] == "auto":
            sets = [cpu_list(cpus) for cpus in recorded]
            check(sum(len(cpus) for cpus in sets) == len(set().union(*sets)),
                  f"auto gives every daemon CPUs of its own: {recorded}")
    else:
        check(all("cpus" not in node for node in nodes), "unbound daemons record no CPUs")
    if TLS:
        check(state.get("tls", {}).get("ca") == tls_flags[1], "the state file records the TLS files")
        check("metrics https://" in result.stderr, "the daemons serve /metrics over HTTPS")
except (OSError, ValueError, KeyError) as error:
    check(False, f"the state file {STATE_FILE}: {error}")

try:
    result = loomctl("cluster", "up", "--nodes", "1", *state_flag)
    check(result.returncode == 1 and "still running" in result.stderr,
          "a second up from the same state directory is refused")

    if TLS:
        result = loomctl("nodes", "--coordinator", address)
        check(result.returncode == 5, f"a client without TLS gets no answer (exit 5): "
                                      f"{result.returncode}")
    result = loomctl("nodes", "--coordinator", address, "--output", "json", *tls_flags)
    listed = json.loads(result.stdout)["nodes"] if result.returncode == 0 else []
    check(len(listed) == NODES, f"nodes lists {NODES}: {len(listed)}")
    check(all(node["state"] == "NODE_STATE_READY" for node in listed), "every node is ready")

    result = loomctl("submit", "examples/jobs/mlp_regression.pbtxt", "--watch", "--steps", "3",
                     "--coordinator", address, *tls_flags)
    check(result.returncode == 0 and "step 3/3" in result.stdout, "a job runs on the cluster")
finally:
    result = loomctl("cluster", "down", *state_flag)
check(result.returncode == 0, f"cluster down exited {result.returncode}")
check(all(not running(node["pid"], node["start_ticks"]) for node in nodes),
      "no daemon runs after down")
check(not os.path.exists(STATE_FILE), "down removes the state file")

result = loomctl("cluster", "down", *state_flag)
check(result.returncode == 0 and "nothing to stop" in result.stderr, "a second down: nothing to do")

if NODES == 1:
    # More nodes than CPUs to bind them to: a usage error naming the flag, nothing started.
    too_many = str(len(os.sched_getaffinity(0)) + 1)
    result = loomctl("cluster", "up", "--nodes", too_many, "--bind-cpus", "auto", *state_flag)
    check(result.returncode == 2 and f"--bind-cpus auto: {too_many} nodes" in result.stderr,
          f"--bind-cpus auto with more nodes than CPUs is a usage error: {result.returncode}")
    result = loomctl("cluster", "up", "--bind-cpus", "0-", *state_flag)
    check(result.returncode == 2 and "--bind-cpus '0-', node0" in result.stderr,
          f"a malformed --bind-cpus list is a usage error: {result.returncode}")
    check(not os.path.exists(STATE_FILE), "no state file after a refused --bind-cpus")

    # A daemon that cannot start: up fails with the end of its log and leaves nothing behind.
    result = loomctl("cluster", "up", "--memory-budget-per-device", "lots", *state_flag)
    check(result.returncode == 1, f"up with a bad loomd flag exits 1, not {result.returncode}")
    check("node0.log" in result.stderr and "memory-budget-per-device" in result.stderr,
          "the failure shows the end of the daemon's log")
    check(not os.path.exists(STATE_FILE), "no state file after a failed up")

    # Ctrl-C while up waits for a daemon stops what it started: nothing is left running
    # unrecorded. The daemon here passes up's --help check and never listens.
    fake_loomd = os.path.join(STATE_DIRECTORY, "never-listening-loomd")
    pid_file = fake_loomd + ".pid"
    with open(fake_loomd, "w") as script:
        script.write('#!/bin/sh\ncase "$1" in --help) echo "--listen"; exit 0;; esac\n'
                     f'echo $$ > {pid_file}\nexec sleep 600\n')
    os.chmod(fake_loomd, 0o755)
    if os.path.exists(pid_file):
        os.remove(pid_file)
    up = subprocess.Popen([LOOMCTL, "cluster", "up", "--loomd", fake_loomd, "--timeout", "120s",
                           *state_flag], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while not os.path.exists(pid_file) and time.monotonic() < deadline and up.poll() is None:
        time.sleep(0.05)
    time.sleep(0.2)  # the pid is written: up is waiting for the daemon's addresses
    up.send_signal(signal.SIGINT)
    try:
        out, err = up.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        up.kill()
        out, err = up.communicate()
    print(f"$ loomctl cluster up --loomd {fake_loomd} (SIGINT)  -> {up.returncode}\n{err}",
          file=sys.stderr)
    check(up.returncode == 130, f"up interrupted by SIGINT exits 130, not {up.returncode}")
    check("interrupted by SIGINT while node0 was starting" in err and "node0 (pid" in err,
          "up says it was interrupted and stops the daemon it started")
    try:
        with open(pid_file) as file:
            fake_pid = int(file.read())
        check(not os.path.exists(f"/proc/{fake_pid}") or
              open(f"/proc/{fake_pid}/stat").read().rsplit(")", 1)[1].split()[0] in ("Z", "X"),
              "the interrupted up's daemon does not run")
    except (OSError, ValueError) as error:
        check(False, f"the fake daemon's pid file: {error}")
    check(not os.path.exists(STATE_FILE), "no state file after an interrupted up")

if failures:
    print(f"{len(failures)} checks failed", file=sys.stderr)
    sys.exit(1)
print("all checks passed")
