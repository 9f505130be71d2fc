#!/usr/bin/python3
"""scripts/trace_overlap.py TRACE.json: in a Chrome trace of a Loom job (loomctl run --trace,
loomctl submit --trace, of every step or of --trace-steps), the token exchanges (the all-to-all
collectives: the MoE layers' dispatched slots and expert outputs forward, and their gradients
backward; a trace names each collective act's kind in args.collective) that overlap compute of
another micro-batch on the same device: how many of those collectives do, and the longest
overlaps. Pipeline parallelism makes this overlap: while one micro-batch's tokens move between
the expert-parallel ranks on the communication stream, the device's compute stream works on
another micro-batch. (A piece is a
micro-batch counted over the job: piece p is micro-batch p mod M of step p div M + 1.)"""
import json
import sys


def main(path):
    with open(path) as f:
        document = json.load(f)
    events = document["traceEvents"] if isinstance(document, dict) else document
    acts = [e for e in events if e.get("ph") == "X"]
    exchanges = [e for e in acts if e.get("cat") == "collective"
                 and e.get("args", {}).get("collective") == "all_to_all"]
    compute = {}
    for e in acts:
        if e.get("cat") == "compute":
            compute.setdefault(e["pid"], []).append(e)
    overlaps = []
    for c in exchanges:
        best = None
        for k in compute.get(c["pid"], []):
            if k["args"].get("piece") == c["args"].get("piece"):
                continue
            shared = min(c["ts"] + c["dur"], k["ts"] + k["dur"]) - max(c["ts"], k["ts"])
            if shared > 0 and (best is None or shared > best[0]):
                best = (shared, k)
        if best is not None:
            overlaps.append((best[0], c, best[1]))
    print(f"token exchanges (all-to-all collectives, forward and backward): {len(exchanges)}; "
          f"overlapping compute of another micro-batch on their device: {len(overlaps)}")
    for shared, c, k in sorted(overlaps, key=lambda o: -o[0])[:5]:
        print(f"  {c['name']} (piece {c['args'].get('piece')}) overlaps "
              f"{k['name']} (piece {k['args'].get('piece')}) for {shared:.0f} us")
    return 0 if exchanges else 1


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1]))
