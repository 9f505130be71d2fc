#!/usr/bin/env python3
"""End-to-end checks of `loomctl compile` and `loomctl run` (no NumPy needed).

usage:
  check_compile_run.py explain LOOMCTL JOB DEVICES COLLECTIVE COUNT
      `loomctl compile JOB --devices DEVICES --explain` mentions exactly COUNT boxings done by
      COLLECTIVE (e.g. all-reduce), and its memory section lists every device.
  check_compile_run.py outputs LOOMCTL JOB DEVICES NODES WORK_DIRECTORY
      `--out`, `--out` with a .pb name, `--dot` and `--node-plans` write what they say.
  check_compile_run.py equivalence LOOMCTL JOB DEVICES_A DEVICES_B WORK_DIRECTORY
      `loomctl run JOB --fetch-dir` on DEVICES_A and on DEVICES_B fetch the same values
      (within 1e-5), every step of every fetched tensor.
  check_compile_run.py list-ops LOOMCTL OP...
      `loomctl compile --list-ops` lists every OP.
  check_compile_run.py terminated LOOMCTL JOB DEVICES
      SIGTERM to `loomctl run JOB` ends it as SIGTERM ends a command, without a crash report (a
      stack trace of where it was waiting).
"""
import ast
import json
import math
import os
import re
import shutil
import signal
import struct
import subprocess
import sys

NPY_TYPES = {"<f4": ("f", 4), "<i4": ("i", 4), "<i8": ("q", 8), "|u1": ("B", 1), "<u2": ("H", 2)}
TOLERANCE = 1e-5


def fail(message):
    print("check_compile_run.py: " + message, file=sys.stderr)
    sys.exit(1)


def run(command):
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        fail(f"{' '.join(command)} exited with {result.returncode}:\n{result.stderr}")
    return result.stdout


def read_npy(path):
    """Returns (type string, shape, values) of a version 1.0 .npy file."""
    with open(path, "rb") as file:
        data = file.read()
    if data[:8] != b"\x93NUMPY\x01\x00":
        fail(f"{path}: bad magic or version {data[:8]!r}")
    header_length = struct.unpack("<H", data[8:10])[0]
    header = data[10:10 + header_length].decode("latin1")
    fields = ast.literal_eval(header.strip())
    if fields["fortran_order"]:
        fail(f"{path}: fortran_order is set")
    code, size = NPY_TYPES[fields["descr"]]
    count = math.prod(fields["shape"])
    body = data[10 + header_length:]
    if len(body) != count * size:
        fail(f"{path}: {len(body)} data bytes for shape {fields['shape']} of {fields['descr']}")
    return fields["descr"], tuple(fields["shape"]), struct.unpack(f"<{count}{code}", body)


def check_explain(loomctl, job, devices, collective, count):
    text = run([loomctl, "compile", job, "--devices", devices, "--explain"])
    boxings = [line for line in text.splitlines() if line.strip().startswith("boxing of input")]
    # Every collective step of a boxing is one indented line under it: "    all-reduce(sum) P -> B".
    steps = [line for line in text.splitlines()
             if re.match(r"^\s+" + re.escape(collective) + r"\b", line)]
    if len(steps) != int(count):
        fail(f"expected {count} {collective} boxing step(s), found {len(steps)} in:\n{text}")
    if int(count) > 0 and not boxings:
        fail(f"no 'boxing of input' line in:\n{text}")
    cpus = int(devices.split(":")[1])
    memory = text[text.index("memory:"):].splitlines()[1:]
    if len([line for line in memory if "of registers" in line]) != cpus:
        fail(f"the memory section does not list {cpus} devices:\n{text}")
    print(f"ok: {len(steps)} {collective} boxing step(s), {len(boxings)} boxing(s)")


def check_outputs(loomctl, job, devices, nodes, work):
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    plan = os.path.join(work, "plan.pbtxt")
    binary = os.path.join(work, "plan.pb")
    dot = os.path.join(work, "plan.dot")
    node_plans = os.path.join(work, "nodes")
    text = run([loomctl, "compile", job, "--devices", devices, "--nodes", nodes, "--out", plan,
                "--dot", dot, "--node-plans", node_plans])
    for expected in [f"plan: {plan}", f"dot: {dot}", f"node plans: {nodes} file"]:
        if expected not in text:
            fail(f"the output does not say '{expected}':\n{text}")
    with open(plan) as file:
        plan_text = file.read()
    task_count = len(re.findall(r"^tasks \{", plan_text, re.MULTILINE))
    if not re.search(r'^job_name: ".+"', plan_text, re.MULTILINE) or task_count == 0:
        fail(f"{plan} is not a text-format plan with tasks")
    with open(dot) as file:
        dot_text = file.read()
    if not dot_text.startswith("digraph ") or "subgraph cluster_" not in dot_text:
        fail(f"{dot} is not a Graphviz graph with clusters")
    node_files = sorted(os.listdir(node_plans))
    expected_files = [f"node{k}.pbtxt" for k in range(int(nodes))]
    if node_files != expected_files:
        fail(f"{node_plans} holds {node_files}, expected {expected_files}")
    node_tasks = 0
    for k, name in enumerate(node_files):
        with open(os.path.join(node_plans, name)) as file:
            node_text = file.read()
        node_tasks += len(re.findall(r"^tasks \{", node_text, re.MULTILINE))
        if k > 0 and f"node: {k}" not in node_text:
            fail(f"{name} does not say node: {k}")
    if node_tasks != task_count:
        fail(f"the node plans hold {node_tasks} tasks, the whole plan {task_count}")
    run([loomctl, "compile", job, "--devices", devices, "--out", binary])
    with open(binary, "rb") as file:
        if file.read(64).startswith(b"job_name:"):
            fail(f"{binary} is text, not binary")
    print(f"ok: {task_count} tasks, {len(node_files)} node plans, dot and binary plan")


def fetched(directory):
    """{file name: values} of every .npy file in the directory."""
    files = {}
    for name in sorted(os.listdir(directory)):
        if not re.fullmatch(r".+_step\d+\.npy", name):
            fail(f"{directory}/{name} is not named <tensor>_step<k>.npy")
        files[name] = read_npy(os.path.join(directory, name))
    return files


def check_equivalence(loomctl, job, devices_a, devices_b, work):
    shutil.rmtree(work, ignore_errors=True)
    results = []
    for devices in (devices_a, devices_b):
        directory = os.path.join(work, devices.replace(":", "_"))
        lines = run([loomctl, "run", job, "--devices", devices, "--fetch-dir", directory,
                     "--output", "json", "--stall-timeout", "30s"]).splitlines()
        summary = json.loads(lines[-1])
        if summary["status"] != "ok":
            fail(f"{devices}: status {summary['status']}")
        steps = [json.loads(line) for line in lines[:-1]]
        if len(summary["fetched_files"]) != sum(len(step["tensors"]) for step in steps):
            fail(f"{devices}: {len(summary['fetched_files'])} files for the steps {steps}")
        results.append(fetched(directory))
    a, b = results
    if not a or sorted(a) != sorted(b):
        fail(f"{devices_a} wrote {sorted(a)}, {devices_b} wrote {sorted(b)}")
    worst = 0.0
    for name in a:
        type_a, shape_a, values_a = a[name]
        type_b, shape_b, values_b = b[name]
        if (type_a, shape_a) != (type_b, shape_b):
            fail(f"{name}: {type_a}{shape_a} on {devices_a}, {type_b}{shape_b} on {devices_b}")
        for index, (x, y) in enumerate(zip(values_a, values_b)):
            if not (math.isfinite(x) and math.isfinite(y)):
                fail(f"{name}[{index}]: non-finite value {x} / {y}")
            worst = max(worst, abs(x - y))
            if abs(x - y) > TOLERANCE:
                fail(f"{name}[{index}]: {x} on {devices_a}, {y} on {devices_b}")
    print(f"ok: {len(a)} files agree, largest difference {worst:g}")


def check_list_ops(loomctl, ops):
    listed = run([loomctl, "compile", "--list-ops"]).split()
    missing = [op for op in ops if op not in listed]
    if missing:
        fail(f"--list-ops does not list {missing}: {listed}")
    if listed != sorted(listed):
        fail(f"--list-ops is not sorted: {listed}")
    print(f"ok: {len(listed)} op types")


def check_terminated(loomctl, job, devices):
    process = subprocess.Popen([loomctl, "run", job, "--devices", devices, "--steps", "100000000"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first = process.stdout.readline()  # a step line: the job runs
    process.send_signal(signal.SIGTERM)
    try:
        _, err = process.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        fail("loomctl run did not end within 30 s of SIGTERM")
    if not first.startswith("step "):
        fail(f"loomctl run printed {first!r} first, not a step line:\n{err}")
    if process.returncode != -signal.SIGTERM:
        fail(f"loomctl run ended with {process.returncode}, not by SIGTERM:\n{err}")
    if "Aborted at" in err or "stack trace" in err:
        fail(f"SIGTERM made loomctl print a crash report:\n{err}")
    print("ok: SIGTERM ends loomctl run quietly")


def main():
    if len(sys.argv) < 3:
        fail(__doc__)
    check, arguments = sys.argv[1], sys.argv[2:]
    checks = {"explain": (check_explain, 5), "outputs": (check_outputs, 5),
              "equivalence": (check_equivalence, 5), "terminated": (check_terminated, 3)}
    if check == "list-ops":
        check_list_ops(arguments[0], arguments[1:])
    elif check in checks and len(arguments) == checks[check][1]:
        checks[check][0](*arguments)
    else:
        fail(__doc__)


if __name__ == "__main__":
    main()
