#!/usr/bin/env python3
"""loomctl's cluster commands end to end against a real loomd binary.

check_cluster_commands.py LOOMCTL LOOMD

Starts `loomd --listen 127.0.0.1:0 --devices cpu:2` (the address is read from its first line),
then runs submit --watch (text and JSON), a failing job, a checkpoint and a job resumed from it,
a rejected job, status, jobs, trace, Ctrl-C of a watch, cancel, fetched tensors streamed to --fetch-dir, nodes, plan and the unreachable-daemon case, checking exit
codes, stderr and that every --output json line parses. Run from the repository root (the job
files are relative to it).
"""
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile

LOOMCTL, LOOMD = sys.argv[1], sys.argv[2]
TIMEOUT = 120
failures = []


def check(condition, message):
    if not condition:
        failures.append(message)
        print("FAIL: " + message, file=sys.stderr)


def loomctl(*arguments):
    result = subprocess.run([LOOMCTL, *arguments], capture_output=True, text=True, timeout=TIMEOUT)
    print("$ loomctl " + " ".join(arguments) + f"  -> {result.returncode}")
    print(result.stdout[:2000], end="")
    print(result.stderr, end="", file=sys.stderr)
    return result


def json_lines(text, what):
    objects = []
    for line in text.splitlines():
        try:
            objects.append(json.loads(line))
        except json.JSONDecodeError as error:
            check(False, f"{what}: a line is not JSON ({error}): {line!r}")
    return objects


def interrupt(process, signal_number):
    """Sends the signal and waits (30 s, then SIGKILL) for the process to end; its stderr."""
    process.send_signal(signal_number)
    try:
        _, err = process.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        _, err = process.communicate()
    return err


def safetensors_contents(path):
    """A safetensors file's tensors (name -> dtype, shape, bytes) and its metadata."""
    with open(path, "rb") as file:
        contents = file.read()
    header_length = int.from_bytes(contents[:8], "little")
    header = json.loads(contents[8:8 + header_length])
    data = contents[8 + header_length:]
    metadata = header.pop("__metadata__", {})
    tensors = {name: (entry["dtype"], entry["shape"],
                      data[entry["data_offsets"][0]:entry["data_offsets"][1]])
               for name, entry in header.items()}
    return tensors, metadata


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


# No memory budget, so that a job too large for this host runs and fails (allocation_failure).
# Its jobs read the examples' files and this run's temporary files, and write checkpoints there.
daemon = subprocess.Popen([LOOMD, "--listen", "127.0.0.1:0", "--devices", "cpu:2",
                           "--shutdown-grace", "0s", "--memory-budget-per-device", "0",
                           "--data-root", os.path.abspath("examples"),
                           "--data-root", tempfile.gettempdir(),
                           "--checkpoint-root", tempfile.gettempdir()],
                          stdout=subprocess.PIPE, text=True)
try:
    first_line = daemon.stdout.readline()
    print(first_line, end="")
    address = first_line.split("listening on ")[1].split()[0]
    coordinator = ["--coordinator", address]

    # submit --watch: the training job succeeds and prints its steps.
    result = loomctl("submit", "examples/jobs/mlp_regression.pbtxt", "--watch", "--steps", "5",
                     *coordinator)
    check(result.returncode == 0, f"submit --watch exited {result.returncode}")
    lines = result.stdout.splitlines()
    check(lines and lines[0].startswith("job-"), "submit prints the job id first")
    job_id = lines[0] if lines else ""
    check(sum(line.startswith("step ") for line in lines) == 5, "five step lines")
    check("step 5/5" in result.stdout, "the last step line says 5/5")
    check(any(line.endswith("RUNNING") for line in lines), "a RUNNING line")
    check(any("SUCCEEDED" in line for line in lines), "a SUCCEEDED line")

    # The same with --output json: one object per line, the events of the job.
    result = loomctl("submit", "examples/jobs/mlp_regression.pbtxt", "--watch", "--steps", "3",
                     "--output", "json", *coordinator)
    check(result.returncode == 0, f"submit --watch --output json exited {result.returncode}")
    objects = json_lines(result.stdout, "submit --watch --output json")
    check(objects and objects[0].get("state") == "JOB_STATE_PENDING", "first the JobInfo")
    steps = [o["step"] for o in objects[1:] if "step" in o]
    check([int(s["step"]) for s in steps] == [1, 2, 3], f"three step events: {steps}")
    states = [o["state_change"]["state"] for o in objects[1:] if "state_change" in o]
    check(states and states[-1] == "JOB_STATE_SUCCEEDED", f"ends SUCCEEDED: {states}")

    # --trace with --trace-steps: the trace holds the acts of those steps only.
    with tempfile.TemporaryDirectory() as scratch:
        trace_path = os.path.join(scratch, "trace.json")
        result = loomctl("submit", "examples/jobs/mlp_regression.pbtxt", "--watch", "--steps", "6",
                         "--trace", trace_path, "--trace-steps", "3-4", *coordinator)
        check(result.returncode == 0, f"submit --trace-steps exited {result.returncode}")
        with open(trace_path) as trace_file:
            acts = [event for event in json.load(trace_file)["traceEvents"]
                    if event.get("ph") == "X"]
        check(acts and {event["args"]["step"] for event in acts} == {3, 4},
              f"the trace holds steps 3 and 4 only: {sorted({e['args']['step'] for e in acts})}")
        # loomctl trace writes the same trace again, from the job's id.
        traced_job = result.stdout.splitlines()[0] if result.stdout else ""
        again_path = os.path.join(scratch, "again.json")
        result = loomctl("trace", traced_job, again_path, *coordinator)
        check(result.returncode == 0 and f"trace: {again_path}" in result.stderr,
              f"loomctl trace exited {result.returncode}")
        with open(trace_path) as first, open(again_path) as again:
            check(first.read() == again.read(), "loomctl trace writes the job's trace")
        result = loomctl("trace", "job-1", again_path, *coordinator)
        check(result.returncode == 4 and "submitted without trace" in result.stderr,
              f"loomctl trace of a job without trace: FAILED_PRECONDITION, 4: {result.returncode}")
    result = loomctl("submit", "examples/jobs/mlp_regression.pbtxt", "--trace-steps", "3",
                     *coordinator)
    check(result.returncode == 2 and "--trace-steps needs --trace" in result.stderr,
          f"--trace-steps without --trace: exit 2, not {result.returncode}")
    result = loomctl("submit", "examples/jobs/mlp_regression.pbtxt", "--watch", "--steps", "2",
                     "--trace", "/tmp/unused.json", "--trace-steps", "2-5", *coordinator)
    check(result.returncode == 4 and "INVALID_ARGUMENT" in result.stderr
          and "trace_steps 2-5" in result.stderr,
          f"a window beyond the job's steps: exit 4 naming it, not {result.returncode}")

    # A job that fails while running: exit 1, its error on stderr.
    result = loomctl("submit", "tests/tools/loomctl/jobs/allocation_failure.pbtxt", "--watch",
                     *coordinator)
    check(result.returncode == 1, f"a failing job exits 1, not {result.returncode}")
    check("failed: RESOURCE_EXHAUSTED" in result.stderr, "the job's error on stderr")
    check("cpu:0" in result.stderr, "the error names the device")

    # --checkpoint: the trained variables, byte for byte what `loomctl run --save-dir` writes.
    with tempfile.TemporaryDirectory() as scratch:
        saved = os.path.join(scratch, "trained.safetensors")
        # Also every 2 steps: the one at the end replaces them.
        result = loomctl("submit", "examples/jobs/mlp_regression.pbtxt", "--watch", "--steps", "4",
                         "--checkpoint", saved, "--checkpoint-every", "2", *coordinator)
        check(result.returncode == 0, f"submit --checkpoint exited {result.returncode}")
        check(f"checkpoint: {saved}" in result.stderr, "submit says where the checkpoint is")
        check(f"checkpoint after step 4 saved to {saved}" in result.stdout,
              f"--watch reports the checkpoint at the end: {result.stdout}")
        local = os.path.join(scratch, "local")
        result = loomctl("run", "examples/jobs/mlp_regression.pbtxt", "--devices", "cpu:2",
                         "--steps", "4", "--save-dir", local)
        check(result.returncode == 0, f"run --save-dir exited {result.returncode}")
        cluster_tensors, cluster_metadata = safetensors_contents(saved)
        local_tensors, _ = safetensors_contents(os.path.join(local, "step-4.safetensors"))
        check(cluster_tensors == local_tensors,
              "the cluster's checkpoint holds loomctl run's tensors, byte for byte")
        check("loomd_job" in cluster_metadata,
              f"the cluster's checkpoint names the job that wrote it: {cluster_metadata}")
        check(sorted(os.listdir(scratch)) == ["local", "trained.safetensors"],
              f"no checkpoint parts left: {os.listdir(scratch)}")
        # --init resumes from it: its two steps are steps 5 and 6 of a 6-step run.
        result = loomctl("submit", "examples/jobs/mlp_regression.pbtxt", "--watch", "--steps", "2",
                         "--init", saved, "--output", "json", *coordinator)
        check(result.returncode == 0, f"submit --init exited {result.returncode}: {result.stderr}")
        resumed = [float(o["step"]["loss"])
                   for o in json_lines(result.stdout, "submit --init --output json")[1:]
                   if "step" in o]
        result = loomctl("run", "examples/jobs/mlp_regression.pbtxt", "--devices", "cpu:2",
                         "--steps", "6", "--output", "json")
        straight = [o["loss"] for o in json_lines(result.stdout, "run --output json")
                    if "step" in o and "loss" in o]
        check(len(resumed) == 2 and len(straight) == 6
              and all(abs(a - b) <= 1e-6 * max(1.0, abs(b))
                      for a, b in zip(resumed, straight[4:])),
              f"the resumed steps are steps 5 and 6 of the whole run: {resumed} {straight}")
        result = loomctl("submit", "examples/jobs/mlp_regression.pbtxt", "--init",
                         os.path.join(scratch, "none.safetensors"), *coordinator)
        check(result.returncode == 2 and "none.safetensors" in result.stderr,
              f"--init of a missing file: exit 2 naming it, not {result.returncode}")
        result = loomctl("submit", "examples/jobs/mlp_regression.pbtxt", "--checkpoint-every", "2",
                         *coordinator)
        check(result.returncode == 2 and "--checkpoint-every" in result.stderr,
              f"--checkpoint-every without --checkpoint: exit 2, not {result.returncode}")
        missing = os.path.join(scratch, "missing", "x.safetensors")
        result = loomctl("submit", "examples/jobs/mlp_regression.pbtxt", "--checkpoint", missing,
                         *coordinator)
        check(result.returncode == 4 and "INVALID_ARGUMENT" in result.stderr
              and missing in result.stderr,
              f"a checkpoint directory that does not exist: exit 4 naming it, not "
              f"{result.returncode}")

    # A job the compiler rejects: exit 4, INVALID_ARGUMENT naming the op.
    result = loomctl("submit", "tests/tools/loomctl/jobs/shape_mismatch.pbtxt", *coordinator)
    check(result.returncode == 4, f"a rejected job exits 4, not {result.returncode}")
    check("INVALID_ARGUMENT" in result.stderr and "op 'project'" in result.stderr,
          "the rejection names the op")

    # A job file that cannot be read: exit 2.
    result = loomctl("submit", "no/such/job.pbtxt", *coordinator)
    check(result.returncode == 2, f"an unreadable job file exits 2, not {result.returncode}")

    # status, text and JSON.
    result = loomctl("status", job_id, *coordinator)
    check(result.returncode == 0 and "SUCCEEDED" in result.stdout, "status says SUCCEEDED")
    result = loomctl("status", job_id, "--output", "json", *coordinator)
    info = json_lines(result.stdout, "status --output json")
    check(info and info[0]["job_id"] == job_id and info[0]["state"] == "JOB_STATE_SUCCEEDED",
          "status --output json is the JobInfo")
    check(info and int(info[0]["steps_done"]) == 5, "five steps done")
    result = loomctl("status", "job-999", *coordinator)
    check(result.returncode == 4 and "NOT_FOUND" in result.stderr, "an unknown job: NOT_FOUND, 4")

    # jobs, with and without a filter.
    result = loomctl("jobs", *coordinator)
    check(result.returncode == 0 and job_id in result.stdout, "jobs lists the job")
    result = loomctl("jobs", "--output", "json", "--state", "succeeded", *coordinator)
    listed = json_lines(result.stdout, "jobs --output json")
    ids = [job["job_id"] for job in listed[0]["jobs"]] if listed else []
    check(len(ids) == 5 and job_id in ids,
          f"five jobs succeeded (text, JSON, traced, checkpoint, resumed): {ids}")
    result = loomctl("jobs", "--state", "finished", *coordinator)
    check(result.returncode == 2 and "succeeded" in result.stderr, "a bad --state lists states")

    # cancel: a finished job is FAILED_PRECONDITION; a running one is cancelled.
    result = loomctl("cancel", job_id, *coordinator)
    check(result.returncode == 4 and "FAILED_PRECONDITION" in result.stderr,
          "cancelling a finished job: FAILED_PRECONDITION, 4")
    # Ctrl-C (SIGINT) or SIGTERM stops following a job, not the job: exit 128 + the signal,
    # saying how to follow or cancel it.
    watcher = subprocess.Popen([LOOMCTL, "submit", "examples/jobs/mlp_regression.pbtxt",
                                "--steps", "100000", "--watch", "--trace", "/tmp/unused.json",
                                "--trace-steps", "1", *coordinator],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    long_job = watcher.stdout.readline().strip()
    for line in watcher.stdout:
        if line.startswith("step 2/"):
            break
    err = interrupt(watcher, signal.SIGINT)
    print(f"$ loomctl submit ... --watch (SIGINT)  -> {watcher.returncode}\n{err}", file=sys.stderr)
    check(watcher.returncode == 130, f"submit --watch ended by SIGINT exits 130, "
                                     f"not {watcher.returncode}")
    check(f"stopped following job {long_job} (SIGINT); the job goes on (RUNNING, step " in err
          and f"'loomctl cancel {long_job}' cancels it" in err,
          "an interrupted watch says the job goes on and how to cancel it")
    check(f"'loomctl trace {long_job} /tmp/unused.json' writes its trace once it ends" in err,
          "an interrupted watch says how to get the trace it would have written")
    result = loomctl("status", long_job, "--output", "json", *coordinator)
    info = json_lines(result.stdout, "status --output json")
    check(info and info[0]["state"] == "JOB_STATE_RUNNING", "the job runs on after the watch")
    watcher = subprocess.Popen([LOOMCTL, "watch", long_job, *coordinator],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    watcher.stdout.readline()
    err = interrupt(watcher, signal.SIGTERM)
    check(watcher.returncode == 143 and "(SIGTERM); the job goes on" in err,
          f"watch ended by SIGTERM exits 143: {watcher.returncode}, {err!r}")
    result = loomctl("cancel", long_job, "--reason", "enough", "--output", "json", *coordinator)
    cancelled = json_lines(result.stdout, "cancel --output json")
    check(result.returncode == 0 and cancelled and
          cancelled[0]["state"] == "JOB_STATE_CANCELLED", "cancel cancels")
    check(cancelled and "enough" in cancelled[0]["error"]["message"], "the reason is recorded")
    result = loomctl("watch", long_job, *coordinator)
    check(result.returncode == 3 and "enough" in result.stderr,
          f"watching a cancelled job exits 3, not {result.returncode}")

    # submit --fetch-dir: the fetched tensors come over the watch and are written as
    # `loomctl run --fetch-dir` writes them.
    with tempfile.TemporaryDirectory() as scratch:
        job_file = os.path.join(scratch, "fetching.pbtxt")
        with open("examples/jobs/mlp_regression.pbtxt") as source, open(job_file, "w") as out:
            out.write(source.read() + '\nfetch: [ "y", "h" ]\n')
        streamed = os.path.join(scratch, "streamed")
        result = loomctl("submit", job_file, "--watch", "--steps", "3", "--fetch-dir", streamed,
                         *coordinator)
        check(result.returncode == 0, f"submit --fetch-dir exited {result.returncode}")
        streamed_job = result.stdout.splitlines()[0] if result.stdout else ""
        check(f"fetched: 9 .npy files in {streamed}" in result.stderr,
              f"submit --fetch-dir counts the files (y, h, loss x 3 steps): {result.stderr}")
        local = os.path.join(scratch, "local")
        result = loomctl("run", job_file, "--devices", "cpu:2", "--steps", "3", "--fetch-dir",
                         local)
        check(result.returncode == 0, f"run --fetch-dir exited {result.returncode}")
        names = sorted(os.listdir(local))
        check(len(names) == 9 and sorted(os.listdir(streamed)) == names,
              f"the same files as loomctl run's: {sorted(os.listdir(streamed))} {names}")

        def same_files(directory):
            for name in names:
                path = os.path.join(directory, name)
                if not os.path.exists(path):
                    return False
                with open(path, "rb") as one, open(os.path.join(local, name), "rb") as other:
                    if one.read() != other.read():
                        return False
            return True

        check(same_files(streamed), "every streamed file equals loomctl run's byte for byte")
        # watch --fetch-dir: the coordinator still holds them.
        rewatched = os.path.join(scratch, "rewatched")
        result = loomctl("watch", streamed_job, "--fetch-dir", rewatched, *coordinator)
        check(result.returncode == 0 and same_files(rewatched),
              f"watch --fetch-dir writes them again: exit {result.returncode}")
        # --output json: the fetched events, without their data.
        result = loomctl("submit", job_file, "--watch", "--steps", "1", "--fetch-dir",
                         os.path.join(scratch, "json"), "--output", "json", *coordinator)
        fetched = [o["fetched"] for o in json_lines(result.stdout, "submit --fetch-dir json")[1:]
                   if "fetched" in o]
        check(result.returncode == 0 and sorted(f["tensor"] for f in fetched) == ["h", "loss", "y"]
              and all(not f.get("data") for f in fetched),
              f"one fetched event per tensor, without data: {fetched}")
        # That job started streaming: the first one's were released.
        result = loomctl("watch", streamed_job, "--fetch-dir", os.path.join(scratch, "late"),
                         *coordinator)
        check(result.returncode == 1 and "released" in result.stderr,
              f"watch --fetch-dir of a released job: exit 1 saying why, not {result.returncode}")
        result = loomctl("submit", job_file, "--fetch-dir", streamed, *coordinator)
        check(result.returncode == 2 and "--fetch-dir" in result.stderr,
              f"--fetch-dir without --watch: exit 2, not {result.returncode}")

    # nodes.
    result = loomctl("nodes", *coordinator)
    check(result.returncode == 0 and "coordinator" in result.stdout and "READY" in result.stdout,
          "nodes shows the coordinator READY")
    result = loomctl("nodes", "--output", "json", *coordinator)
    nodes = json_lines(result.stdout, "nodes --output json")
    check(nodes and len(nodes[0]["nodes"]) == 1 and len(nodes[0]["nodes"][0]["devices"]) == 2,
          "one node with two devices")

    # plan: text format, JSON, one node, a node that does not exist.
    result = loomctl("plan", job_id, *coordinator)
    check(result.returncode == 0 and "tasks {" in result.stdout, "plan prints the text format")
    result = loomctl("plan", job_id, "--node", "0", "--output", "json", *coordinator)
    plans = json_lines(result.stdout, "plan --output json")
    check(result.returncode == 0 and plans and plans[0].get("tasks"), "the node's plan as JSON")
    result = loomctl("plan", job_id, "--node", "7", *coordinator)
    check(result.returncode == 4 and "INVALID_ARGUMENT" in result.stderr
          and "no node 7" in result.stderr, "plan --node 7: the daemon refuses it, exit 4")
    # The compiler's plans name shared kernels by position; --inline-kernels writes them in.
    result = loomctl("plan", job_id, "--output", "json", *coordinator)
    shared = json_lines(result.stdout, "plan --output json")
    result = loomctl("plan", job_id, "--inline-kernels", "--output", "json", *coordinator)
    inlined = json_lines(result.stdout, "plan --inline-kernels --output json")
    check(result.returncode == 0 and shared and inlined and shared[0].get("kernels")
          and any("kernel_index" in task for task in shared[0]["tasks"]),
          "the plan holds shared kernels, named by position")
    if shared and inlined:
        tasks = inlined[0]["tasks"]
        check(not inlined[0].get("kernels") and not any("kernel_index" in task for task in tasks)
              and len(tasks) == len(shared[0]["tasks"])
              and all(task.get("kernel") == shared[0]["kernels"][int(original["kernel_index"])]
                      for task, original in zip(tasks, shared[0]["tasks"])
                      if "kernel_index" in original),
              "plan --inline-kernels writes each task's kernel into it")
    result = loomctl("plan", job_id, "--inline-kernels", *coordinator)
    check(result.returncode == 0 and "kernel {" in result.stdout
          and "kernel_index" not in result.stdout, "plan --inline-kernels in text format")

    # No daemon: exit 5, the address named.
    nowhere = f"127.0.0.1:{free_port()}"
    result = loomctl("jobs", "--coordinator", nowhere, "--timeout", "1s")
    check(result.returncode == 5 and nowhere in result.stderr,
          f"no daemon: exit 5 naming {nowhere}, not {result.returncode}")
finally:
    daemon.send_signal(signal.SIGTERM)
    try:
        daemon.wait(timeout=30)
    except subprocess.TimeoutExpired:
        daemon.kill()

if failures:
    print(f"{len(failures)} checks failed", file=sys.stderr)
    sys.exit(1)
print("all checks passed")
