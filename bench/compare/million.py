#!/usr/bin/env python3
"""One million active series, 30 minutes of data at a 10 s interval, into every system.

Run by `bench/compare/run.sh million`. Starts every system on a fresh data directory (pinned to
core 0, as compare.py does) and keeps them all running; then, one system after the other,
`serve-load --stream 1` (pinned to core 1) generates and sends 100,000 hosts × 10 metrics × 180
steps of remote write (a gauge with noise in its second decimal, 2,000 series a request) —
180 M samples, generated while sent, the same bytes for each. It prints samples per server
CPU-second, and resident memory per active series ((RSS − RSS before) / 1,000,000) right after
each system's ingest and again once all are done (steady state, `STEADY_WAIT_S` later).
`--baseline PATH` adds another Strata build (e.g. main's) as a fourth system.
"""

import argparse
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare  # noqa: E402

SERIES = 1_000_000
STEPS = 180
# Strata's cardinality limits hold one source to 100,000 new series a minute and a million
# active (`strata config print-defaults`): a million series from one loader in a few minutes
# is this benchmark's intent, so it raises them, as an operator expecting it would. The
# built-in rule on silent push sources is off, as in compare.py: here 100,000 of the series
# would be judged silent sources (their sample times trail the clock: a 30-minute window ending
# a minute before the run) and fire.
STRATA_CONFIG = """[cardinality]
series_new_per_minute_max = 4000000
series_active_max = 4000000
source_series_new_per_minute_max = 4000000
source_series_active_max = 4000000

""" + compare.STRATA_CONFIG


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--strata", required=True)
    ap.add_argument("--serve-load", required=True)
    ap.add_argument("--victoriametrics", required=True)
    ap.add_argument("--prometheus", required=True)
    ap.add_argument("--baseline", help="another strata binary, measured as a fourth system")
    ap.add_argument("--systems", default="strata,victoriametrics,prometheus")
    ap.add_argument("--steps", type=int, default=STEPS)
    ap.add_argument("--connections", type=int, default=4)
    ap.add_argument("--work", default=os.path.join(compare.CACHE, "million"))
    ap.add_argument("--commit", default="")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    systems = a.systems.split(",")
    bins = {"strata": a.strata, "victoriametrics": a.victoriametrics,
            "prometheus": a.prometheus}
    if a.baseline:
        systems.append("baseline")
    load0 = os.getloadavg()
    servers, rss0, out = {}, {}, {}
    config = compare.write_strata_config(a.work, STRATA_CONFIG)
    try:
        for s in systems:
            kind = "strata" if s == "baseline" else s
            b = dict(bins, strata=a.baseline if s == "baseline" else a.strata)
            servers[s] = compare.Server(kind, b, a.work, strata_config=config)
        time.sleep(2)
        for s, server in servers.items():
            rss0[s] = compare.rss_bytes(server.pid)
        for s, server in servers.items():
            compare.log(f"{s}: sending {SERIES:,} series x {a.steps} steps")
            cmd = ["taskset", "-c", compare.LOADER_CPU, a.serve_load, "--workload",
                   "remote-write", "--values", "gauge", "--hosts", str(SERIES // 10),
                   "--steps", str(a.steps), "--stream", "1", "--runs", "1",
                   "--connections", str(a.connections), "--url", server.url,
                   "--pid", str(server.pid)]
            res = subprocess.run(cmd, capture_output=True, text=True)
            if res.returncode != 0:
                raise RuntimeError(f"serve-load: {res.stderr.strip()}")
            m = re.search(r": (\d+) samples in .*?server CPU ([\d.]+) s.*?-> (\d+) "
                          r"samples/server-CPU-s", res.stdout)
            if not m:
                raise RuntimeError(f"serve-load said: {res.stdout}")
            samples, cpu = int(m.group(1)), float(m.group(2))
            out[s] = {"samples": samples, "cpu_s": cpu, "rate": float(m.group(3)),
                      "rss_ingest": (compare.rss_bytes(server.pid) - rss0[s]) / SERIES}
            compare.log(f"  {out[s]}")
        time.sleep(compare.STEADY_WAIT_S)
        for s, server in servers.items():
            out[s]["rss_steady"] = (compare.rss_bytes(server.pid) - rss0[s]) / SERIES
            out[s]["rss_total"] = compare.rss_bytes(server.pid)
    finally:
        for server in servers.values():
            server.close()
    load1 = os.getloadavg()
    print(f"<!-- one million series x {a.steps} steps; load average {load0[0]:.1f} before, "
          f"{load1[0]:.1f} after -->")
    for s, figs in out.items():
        print(f"<!-- {s}: {figs} -->")
    date = time.strftime("%Y-%m-%d")
    mine = out.get("strata")
    if mine is None:
        return  # no Strata in this run: the raw figures above are all there is
    for key, label, higher in [("rate", "samples per server CPU-second", True),
                               ("rss_ingest", "resident memory per active series, after ingest",
                                False),
                               ("rss_steady", "resident memory per active series, steady state",
                                False)]:
        anchors = []
        for s, figs in out.items():
            if s == "strata":
                continue
            ratio = mine[key] / figs[key] if higher else figs[key] / mine[key]
            name = "Strata at main" if s == "baseline" else compare.NAMES[s]
            anchors.append(f"{name} {compare.fmt(key, figs[key])} (Strata {ratio:.2f}×)")
        print(f"| 1 M series × {a.steps} steps, remote write: {label} | "
              f"**{compare.fmt(key, mine[key])}** | {'; '.join(anchors)} | "
              f"`bench/compare/run.sh million` | {a.commit} | {date} |")


if __name__ == "__main__":
    main()
