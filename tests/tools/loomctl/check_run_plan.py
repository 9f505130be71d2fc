#!/usr/bin/env python3
"""End-to-end check of `loomctl run-plan`: runs a plan with --trace, --output json and --fetch-dir,
then checks the summary, that the Chrome trace is valid JSON with one complete event per act, and
that every sink piece came back as a readable .npy file.

usage: check_run_plan.py LOOMCTL PLAN WORK_DIRECTORY
"""
import ast
import json
import math
import os
import shutil
import struct
import subprocess
import sys

NPY_TYPES = {"<f4": ("f", 4), "<i4": ("i", 4), "<i8": ("q", 8), "|u1": ("B", 1), "<u2": ("H", 2)}


def fail(message):
    print("check_run_plan.py: " + message, file=sys.stderr)
    sys.exit(1)


def read_npy(path):
    """Returns (type string, shape, values) of a version 1.0 .npy file."""
    with open(path, "rb") as file:
        data = file.read()
    if data[:8] != b"\x93NUMPY\x01\x00":
        fail(f"{path}: bad magic or version {data[:8]!r}")
    header_length = struct.unpack("<H", data[8:10])[0]
    if (10 + header_length) % 64 != 0:
        fail(f"{path}: the data starts at {10 + header_length}, not a multiple of 64")
    header = data[10:10 + header_length].decode("latin1")
    if not header.endswith("\n"):
        fail(f"{path}: the header does not end with a newline")
    fields = ast.literal_eval(header.strip())
    if fields["fortran_order"]:
        fail(f"{path}: fortran_order is set")
    code, size = NPY_TYPES[fields["descr"]]
    count = math.prod(fields["shape"])
    body = data[10 + header_length:]
    if len(body) != count * size:
        fail(f"{path}: {len(body)} data bytes for shape {fields['shape']} of {fields['descr']}")
    return fields["descr"], tuple(fields["shape"]), struct.unpack(f"<{count}{code}", body)


def main():
    if len(sys.argv) != 4:
        fail(__doc__)
    loomctl, plan, work = sys.argv[1:]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    trace_path = os.path.join(work, "trace.json")
    fetch_directory = os.path.join(work, "fetched")
    command = [loomctl, "run-plan", plan, "--trace", trace_path, "--output", "json",
               "--fetch-dir", fetch_directory, "--stall-timeout", "30s"]
    run = subprocess.run(command, capture_output=True, text=True)
    if run.returncode != 0:
        fail(f"{' '.join(command)} exited with {run.returncode}:\n{run.stderr}")
    summary = json.loads(run.stdout)
    if summary["status"] != "ok":
        fail(f"status {summary['status']}")
    total_acts = sum(actor["acts"] for actor in summary["actors"])
    if total_acts == 0:
        fail("no actor acted")
    if summary["makespan_ms"] <= 0:
        fail("makespan is not positive")
    for device in summary["devices"]:
        if device["peak_bytes"] <= 0:
            fail(f"device {device['device']} has no peak memory")

    with open(trace_path) as file:
        trace = json.load(file)
    events = trace["traceEvents"]
    complete = [event for event in events if event["ph"] == "X"]
    if len(complete) != total_acts:
        fail(f"{len(complete)} complete events for {total_acts} acts")
    actors = {actor["name"]: actor for actor in summary["actors"]}
    for event in complete:
        if event["name"] not in actors:
            fail(f"a complete event names an unknown task {event['name']!r}")
        if event["args"]["kind"] != actors[event["name"]]["kind"]:
            fail(f"event of {event['name']} has kind {event['args']['kind']}")
        if event["dur"] < 0 or event["ts"] < 0:
            fail(f"negative time in {event}")
    processes = {event["pid"]: event["args"]["name"] for event in events
                 if event["ph"] == "M" and event["name"] == "process_name"}
    if sorted(processes.values()) != sorted(device["device"] for device in summary["devices"]):
        fail(f"trace processes {processes} are not the plan's devices")
    lanes = {(event["pid"], event["tid"]) for event in complete}
    named_threads = {(event["pid"], event["tid"]) for event in events
                     if event["ph"] == "M" and event["name"] == "thread_name"}
    if not lanes <= named_threads:
        fail(f"unnamed threads: {lanes - named_threads}")

    sink_acts = sum(actor["acts"] for actor in summary["actors"] if actor["kind"] == "sink")
    files = summary["fetched_files"]
    if len(files) != sink_acts:
        fail(f"{len(files)} fetched files for {sink_acts} sink acts")
    for path in files:
        type_string, shape, values = read_npy(path)
        if not all(math.isfinite(value) for value in values):
            fail(f"{path} holds non-finite values")
    print(f"ok: {total_acts} acts, {len(complete)} complete events, {len(files)} .npy files")


if __name__ == "__main__":
    main()
