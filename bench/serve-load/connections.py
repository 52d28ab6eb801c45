#!/usr/bin/env python3
"""Samples per server CPU-second of one workload at several connection counts, side by side.

    bench/serve-load/connections.py --strata target/release/strata \
        --serve-load target/release/serve-load [--baseline OTHER_STRATA] \
        [--connections 1,4,16] [--rounds 3] [--workload influx] [--steps 360] \
        [-- SERVE_LOAD_ARGS...]

Every round starts a fresh `strata serve` (pinned to core `SERVER_CPU`, default 0) for each
connection count, in an order that rotates every round, and sends it the same request bodies
with `serve-load` (pinned to core `LOADER_CPU`, default 1; bodies from the plan cache). Besides
the rate it reads, around the ingest, what the server's CPU went to: user and system seconds and
minor page faults (`/proc/PID/stat`), context switches summed over its threads
(`/proc/PID/task/*/status`), and the head's bytes after the ingest (`/api/strata/v1/overview`).
Each count's figures are the medians over rounds; the ratio to the first count is taken within
each round, then the median. `--baseline` adds another build (e.g. main's), run at every count in
the same rounds.
"""

import argparse
import glob
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "compare"))
import compare  # noqa: E402


def counters(pid):
    """(user s, system s, minor faults, context switches) of a process, threads summed."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    switches = 0
    for status in glob.glob(f"/proc/{pid}/task/*/status"):
        try:
            with open(status) as f:
                for line in f:
                    if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                        switches += int(line.split()[1])
        except OSError:
            pass  # a thread that ended between the listing and the read
    return (int(fields[11]) / compare.TICKS, int(fields[12]) / compare.TICKS, int(fields[7]),
            switches)


def head_bytes(url):
    try:
        reply = json.loads(compare.http(url + "/api/strata/v1/overview?limit=1"))
        return reply.get("store", {}).get("head_points_bytes")
    except Exception:
        return None


def one(bins, build, connections, load_args, plans, work):
    server = compare.Server("strata", dict(bins, strata=build), work)
    try:
        time.sleep(1)
        before = counters(server.pid)
        samples, rate = compare.run_load(bins, server, load_args, plans, connections)
        after = counters(server.pid)
        user, system, faults, switches = (b - a for a, b in zip(before, after))
        return {"rate": rate, "user_ns": user * 1e9 / samples, "sys_ns": system * 1e9 / samples,
                "faults_per_ksample": faults * 1e3 / samples,
                "switches_per_ksample": switches * 1e3 / samples,
                "head_bytes": head_bytes(server.url)}
    finally:
        server.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--strata", required=True)
    ap.add_argument("--serve-load", required=True)
    ap.add_argument("--connections", default="1,4,16")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workload", default="influx")
    ap.add_argument("--steps", type=int, default=360)
    ap.add_argument("--plans", default=os.path.join(compare.CACHE, "plans"))
    ap.add_argument("--work", default=os.path.join(compare.CACHE, "connections"))
    ap.add_argument("--baseline", help="another strata binary, run in the same rounds")
    ap.add_argument("rest", nargs="*", help="more serve-load arguments (after --)")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    bins = {"strata": a.strata, "serve-load": a.serve_load}
    builds = {"this build": a.strata}
    if a.baseline:
        builds["baseline"] = a.baseline
    counts = [int(c) for c in a.connections.split(",")]
    runs = [(b, c) for c in counts for b in builds]
    load_args = ["--workload", a.workload, "--steps", str(a.steps), *a.rest]
    load0 = os.getloadavg()
    raw = {run: [] for run in runs}
    ratios = {run: [] for run in runs}
    for r in range(a.rounds):
        order = runs[r % len(runs):] + runs[:r % len(runs)]
        this = {}
        for b, c in order:
            figs = one(bins, builds[b], c, load_args, a.plans, a.work)
            compare.log(f"round {r + 1}/{a.rounds}, {b}, {c} connections: {figs}")
            raw[(b, c)].append(figs)
            this[(b, c)] = figs["rate"]
        for b, c in runs:
            ratios[(b, c)].append(this[(b, c)] / this[(b, counts[0])])
    load1 = os.getloadavg()
    print(f"<!-- {a.workload}, {a.steps} steps; load average {load0[0]:.1f} before, "
          f"{load1[0]:.1f} after; medians of {a.rounds} alternated rounds -->")
    print("| build | connections | samples/server-CPU-s | ratio to "
          f"{counts[0]} (within a round) | user ns/sample | system ns/sample | "
          "minor faults per 1,000 samples | context switches per 1,000 samples | head bytes |")
    print("|---|---|---|---|---|---|---|---|---|")
    for b, c in runs:
        rounds = raw[(b, c)]
        med = {k: statistics.median(f[k] for f in rounds) for k in rounds[0]
               if all(f[k] is not None for f in rounds)}
        print(f"| {b} | {c} | {compare.fmt('rate', med['rate'])} | "
              f"{statistics.median(ratios[(b, c)]):.2f} | {med['user_ns']:.0f} | "
              f"{med['sys_ns']:.0f} | {med['faults_per_ksample']:.1f} | "
              f"{med['switches_per_ksample']:.2f} | {med.get('head_bytes', '—')} |")


if __name__ == "__main__":
    main()
