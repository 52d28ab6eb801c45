#!/usr/bin/env python3
"""Strata, VictoriaMetrics and Prometheus side by side on the same request bodies.

Run by `bench/compare/run.sh` (which builds the three servers first); see README.md. For each
workload, each round starts every system that takes it on a fresh data directory, pinned to
core 0 (`taskset`), sends it the same bodies with `serve-load` pinned to core 1 (the bodies are
generated once and kept in the plan cache), and measures:

- samples per server CPU-second while ingesting (`utime + stime` from /proc, by serve-load);
- resident memory per series right after the ingest and after a quiet minute with queries
  (steady state), as (RSS − RSS before the ingest) / series;
- server CPU per query for a fixed set of PromQL range queries, each asked `QUERY_REPEATS` times;
- bytes on disk per sample once the data is persisted: Strata's blocks, index and manifest
  after a clean stop; VictoriaMetrics' data and indexdb after `/internal/force_flush`;
  Prometheus's blocks from a snapshot that includes the head.

Rounds alternate the systems (their order rotates every round) and every figure is the median
over rounds. The table gives each figure beside Strata's, with the ratio: the median of the
ratios within each round (the systems of a round ran in the same minutes).
"""

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

CACHE = os.environ.get("CACHE", os.path.expanduser("~/.cache/strata-bench"))
BIN = os.path.join(CACHE, "bin")
SERVER_CPU = os.environ.get("SERVER_CPU", "0")
LOADER_CPU = os.environ.get("LOADER_CPU", "1")
READY_TIMEOUT_S = 120
QUERY_REPEATS = 5
STEADY_WAIT_S = int(os.environ.get("STEADY_WAIT_S", "60"))
TICKS = os.sysconf("SC_CLK_TCK")


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def http(url, data=None, method=None, timeout=600):
    req = urllib.request.Request(url, data=data, method=method)
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return r.read()


def cpu_s(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def rss_bytes(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def du(paths):
    total = 0
    for p in paths:
        if os.path.isfile(p):
            total += os.path.getsize(p)
            continue
        for root, _, files in os.walk(p):
            for name in files:
                try:
                    total += os.path.getsize(os.path.join(root, name))
                except OSError:
                    pass
    return total


def free_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """One system under test: started fresh, pinned, stopped and cleaned up."""

    def __init__(self, system, bins, work, strata_config=None, vm_flags=()):
        self.system = system
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix=f"{system}-", dir=work)
        self.url = f"http://127.0.0.1:{self.port}"
        # Only the system started is looked at: a run without a peer has no binary for it.
        args = {
            "strata": lambda: [
                bins["strata"], "serve", "--http", f"127.0.0.1:{self.port}",
                "--statsd", "off", "--graphite", "off", "--data-dir", self.dir,
            ] + (["--config", strata_config] if strata_config else []),
            "victoriametrics": lambda: [
                bins["victoriametrics"], f"-httpListenAddr=127.0.0.1:{self.port}",
                f"-storageDataPath={self.dir}", "-retentionPeriod=100y",
                # VictoriaMetrics closes every connection after 2 minutes by default (to spread
                # load behind a TCP balancer), and one idle for a minute: serve-load keeps its
                # connections for a whole run, and at a million series on a loaded machine a
                # step's bodies can take it longer than a minute to make.
                "-loggerLevel=ERROR", "-http.connTimeout=0", "-http.idleConnTimeout=10m",
            ] + list(vm_flags),
            "prometheus": lambda: [
                bins["prometheus"], f"--config.file={self.write_prom_config()}",
                f"--storage.tsdb.path={self.dir}/tsdb",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--web.enable-remote-write-receiver", "--web.enable-admin-api",
                "--storage.tsdb.retention.time=100y", "--log.level=error",
                # Remote write refuses native histograms without it ("native histograms are
                # disabled").
                "--enable-feature=native-histograms",
            ],
        }[system]()
        self.log = open(os.path.join(self.dir, "server.log"), "w")
        self.proc = subprocess.Popen(
            ["taskset", "-c", SERVER_CPU] + args,
            stdout=self.log, stderr=subprocess.STDOUT, env=dict(os.environ, RUST_LOG="warn"),
        )
        self.wait_ready()

    def write_prom_config(self):
        path = os.path.join(self.dir, "prometheus.yml")
        with open(path, "w") as f:
            # Four connections deliver a series' consecutive steps in any order (Strata and
            # VictoriaMetrics take samples out of order); without a window Prometheus refuses
            # a step that arrives after the next one ("out of order sample") and the run stops.
            f.write("global:\n  scrape_interval: 1h\nscrape_configs: []\n"
                    "storage:\n  tsdb:\n    out_of_order_time_window: 1h\n")
        return path

    def wait_ready(self):
        probe = {
            "strata": "/api/v1/status/buildinfo",
            "victoriametrics": "/health",
            "prometheus": "/-/ready",
        }[self.system]
        deadline = time.time() + READY_TIMEOUT_S
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.system} exited; see {self.dir}/server.log")
            try:
                http(self.url + probe, timeout=2)
                return
            except Exception:
                time.sleep(0.2)
        raise RuntimeError(f"{self.system} not ready in {READY_TIMEOUT_S} s")

    @property
    def pid(self):
        return self.proc.pid

    def persisted_bytes(self):
        """Bytes of the persisted data (see the module comment); stops Strata."""
        if self.system == "victoriametrics":
            http(self.url + "/internal/force_flush")
            time.sleep(2)
            return du([os.path.join(self.dir, d) for d in ("data", "indexdb")])
        if self.system == "prometheus":
            reply = json.loads(http(
                self.url + "/api/v1/admin/tsdb/snapshot?skip_head=false", data=b"",
                method="POST"))
            snap = os.path.join(self.dir, "tsdb", "snapshots", reply["data"]["name"])
            return du([snap])
        self.stop()
        keep = [os.path.join(self.dir, "blocks"), os.path.join(self.dir, "index"),
                os.path.join(self.dir, "MANIFEST")]
        keep += [os.path.join(self.dir, n) for n in os.listdir(self.dir) if n.startswith("state-")]
        return du(keep)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=300)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def close(self):
        self.stop()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


# name, serve-load arguments, systems that take it, series, queries (PromQL, range).
NUMERIC_QUERIES = [
    "sum(rate(cpu_usage_user[5m]))",
    "max_over_time(cpu_usage_system{hostname=\"host_7\"}[10m])",
    "avg by (region) (cpu_usage_idle)",
]
HIST_QUERIES = ["histogram_quantile(0.99, sum(rate(latency[5m])))"]
WORKLOADS = {
    "influx": (["--workload", "influx"], ["strata", "victoriametrics"], 10_000,
               NUMERIC_QUERIES),
    "influx-gauge": (["--workload", "influx", "--values", "gauge"],
                     ["strata", "victoriametrics"], 10_000, NUMERIC_QUERIES),
    "remote-write": (["--workload", "remote-write"],
                     ["strata", "victoriametrics", "prometheus"], 10_000, NUMERIC_QUERIES),
    "remote-write-gauge": (["--workload", "remote-write", "--values", "gauge"],
                           ["strata", "victoriametrics", "prometheus"], 10_000,
                           NUMERIC_QUERIES),
    "native-hist": (["--workload", "remote-write-hist", "--hist-steps", "30"],
                    ["strata", "prometheus"], 10_000, HIST_QUERIES),
    "httptrap-hist": (["--workload", "httptrap-hist", "--hist-steps", "30"], ["strata"],
                      10_000, HIST_QUERIES),
}


def run_load(bins, server, load_args, plans, connections, extra=()):
    cmd = ["taskset", "-c", LOADER_CPU, bins["serve-load"], *load_args, "--url", server.url,
           "--pid", str(server.pid), "--runs", "1", "--connections", str(connections),
           *extra]
    if plans:
        cmd += ["--plan-cache", plans]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"serve-load failed: {out.stderr.strip()}")
    m = re.search(r"run 0: .*?: (\d+) samples in .*?-> (\d+) samples/server-CPU-s", out.stdout)
    if not m:
        raise RuntimeError(f"serve-load said: {out.stdout}")
    return int(m.group(1)), float(m.group(2))


def query_cpu_ms(server, queries, span_s):
    end = time.time()
    start = end - span_s - 600
    before = cpu_s(server.pid)
    for _ in range(QUERY_REPEATS):
        for q in queries:
            params = urllib.parse.urlencode({"query": q, "start": f"{start:.0f}",
                                             "end": f"{end:.0f}", "step": "60"})
            http(f"{server.url}/api/v1/query_range?{params}")
    return (cpu_s(server.pid) - before) * 1000 / (QUERY_REPEATS * len(queries))


def scaled(workload, hosts, steps):
    """A workload's serve-load arguments and series at `hosts` hosts (None: the defaults) and
    `steps` steps per series (None: the defaults; histogram workloads take `--hist-steps`)."""
    load_args, _, series, queries = WORKLOADS[workload]
    load_args = list(load_args)
    if hosts is not None:
        load_args += ["--hosts", str(hosts)]
        series = hosts * 10
    if steps is not None:
        flag = "--hist-steps" if "hist" in workload else "--steps"
        if flag in load_args:
            i = load_args.index(flag)
            del load_args[i:i + 2]
        load_args += [flag, str(steps)]
    return load_args, series, queries


# The peers evaluate no rules, so Strata's built-in rule on silent push sources is off: grouping
# series into senders and watching them is work the peers do not do.
STRATA_CONFIG = "[alerts]\npush_sources = false\n"


def write_strata_config(work, text=STRATA_CONFIG):
    path = os.path.join(work, "strata.toml")
    with open(path, "w") as f:
        f.write(text)
    return path


# With --no-result-caches: each system evaluates every ask of a query (both keep range answers
# over the settled past by default, so the repeats of QUERY_REPEATS are mostly cache hits).
NO_CACHE = {"strata": "[limits]\nquery_result_cache_bytes_max = 0\n",
            "victoriametrics": ["-search.disableCache"]}


def one_round(bins, system, workload, plans, connections, work, span_s, hosts, steps,
              no_caches=False):
    load_args, series, queries = scaled(workload, hosts, steps)
    config = STRATA_CONFIG + (NO_CACHE["strata"] if no_caches else "")
    server = Server(system, bins, work, strata_config=write_strata_config(work, config),
                    vm_flags=NO_CACHE["victoriametrics"] if no_caches else ())
    try:
        time.sleep(1)
        rss0 = rss_bytes(server.pid)
        samples, rate = run_load(bins, server, load_args, plans, connections)
        rss_ingest = (rss_bytes(server.pid) - rss0) / series
        time.sleep(STEADY_WAIT_S)
        q_ms = query_cpu_ms(server, queries, span_s)
        rss_steady = (rss_bytes(server.pid) - rss0) / series
        disk = server.persisted_bytes() / samples
        return {"rate": rate, "rss_ingest": rss_ingest, "rss_steady": rss_steady,
                "query_ms": q_ms, "disk": disk}
    finally:
        server.close()


def fmt(figure, v):
    if figure == "rate":
        return f"{v / 1e6:.2f} M" if v >= 1e6 else f"{v / 1e3:.0f} k"
    if figure in ("rss_ingest", "rss_steady"):
        return f"{v / 1024:.1f} KB" if v >= 1024 else f"{v:.0f} B"
    if figure == "disk":
        return f"{v:.3f} B" if v < 10 else f"{v:.1f} B"
    return f"{v:.1f} ms"


FIGURES = [
    ("rate", "samples per server CPU-second", True),
    ("disk", "bytes on disk per sample", False),
    ("rss_ingest", "resident memory per series, right after ingest", False),
    ("rss_steady", "resident memory per series, steady state", False),
    ("query_ms", "server CPU per range query", False),
]
NAMES = {"strata": "Strata", "victoriametrics": "VictoriaMetrics v1.110.0",
         "prometheus": "Prometheus 3.5.0"}


def round_ratio(raw_w, system, key, higher_better):
    """The median over rounds of the ratio within each round, read "Strata is N× better"
    whichever way the figure points (rounds pair up by number: both ran in the same minutes)."""
    ratios = []
    for mine, other in zip(raw_w["strata"], raw_w[system]):
        a, b = mine[key], other[key]
        ratios.append((a / b if b else 0) if higher_better else (b / a if a else 0))
    return statistics.median(ratios)


def table(results, raw, commit, date, command):
    """Markdown rows: figure | value | anchor | command | commit | date."""
    rows = []
    for workload, per_system in results.items():
        for key, label, higher_better in FIGURES:
            mine = per_system.get("strata", {}).get(key)
            if mine is None:
                continue
            anchors = []
            for system, figs in per_system.items():
                if system == "strata" or figs.get(key) is None:
                    continue
                other = figs[key]
                ratio = round_ratio(raw[workload], system, key, higher_better)
                anchors.append(f"{NAMES[system]} {fmt(key, other)} (Strata {ratio:.2f}× better)"
                               if ratio >= 1 else
                               f"{NAMES[system]} {fmt(key, other)} (Strata at {ratio:.2f}×)")
            rows.append(f"| {workload}: {label} | **{fmt(key, mine)}** | "
                        f"{'; '.join(anchors) or '—'} | `{command} {workload}` | {commit} | {date} |")
    return "\n".join(rows)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("workloads", nargs="*", default=list(WORKLOADS))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--connections", type=int, default=4)
    ap.add_argument("--hosts", type=int, help="hosts (10 series each); default serve-load's")
    ap.add_argument("--steps", type=int,
                    help="samples per series; default serve-load's (4 hours at 10 s)")
    ap.add_argument("--strata", required=True)
    ap.add_argument("--serve-load", required=True)
    ap.add_argument("--victoriametrics", default=os.path.join(BIN, "victoria-metrics-v1.110.0"))
    ap.add_argument("--prometheus", default=os.path.join(BIN, "prometheus"))
    ap.add_argument("--systems", default="strata,victoriametrics,prometheus")
    ap.add_argument("--no-result-caches", action="store_true",
                    help="Strata and VictoriaMetrics evaluate every ask of a query (by default "
                    "both answer repeats from their range result caches)")
    ap.add_argument("--plans", default=os.path.join(CACHE, "plans"))
    ap.add_argument("--work", default=os.path.join(CACHE, "compare"))
    ap.add_argument("--commit", default="")
    ap.add_argument("--json", help="where the raw per-round figures are kept, written after every "
                    "round (default: WORK/raw.json)")
    ap.add_argument("--table-from", metavar="JSON",
                    help="print the table of a run's saved raw figures, and run nothing")
    a = ap.parse_args()
    if a.table_from:
        with open(a.table_from) as f:
            saved = json.load(f)
        print_table(saved["raw"], saved["load"], saved["rounds"], saved["commit"], saved["date"],
                    saved["command"])
        return
    bins = {"strata": a.strata, "serve-load": a.serve_load,
            "victoriametrics": a.victoriametrics, "prometheus": a.prometheus}
    os.makedirs(a.work, exist_ok=True)
    wanted = set(a.systems.split(","))
    load0 = os.getloadavg()
    raw = {}
    json_path = a.json or os.path.join(a.work, "raw.json")
    command = "bench/compare/run.sh"
    if a.hosts is not None:
        command += f" --hosts {a.hosts}"
    if a.steps is not None:
        command += f" --steps {a.steps}"
    if a.no_result_caches:
        command += " --no-result-caches"
    date = time.strftime("%Y-%m-%d")

    def save():
        with open(json_path, "w") as f:
            json.dump({"raw": raw, "load": [load0, os.getloadavg()], "rounds": a.rounds,
                       "commit": a.commit, "date": date, "command": command}, f, indent=1)

    for workload in a.workloads:
        systems = [s for s in WORKLOADS[workload][1] if s in wanted]
        default_steps = 30 if "hist" in workload else 4 * 360
        span_s = (a.steps or default_steps) * 10
        for r in range(a.rounds):
            order = systems[r % len(systems):] + systems[:r % len(systems)]
            for system in order:
                log(f"{workload} round {r + 1}/{a.rounds}: {system}")
                try:
                    figs = one_round(bins, system, workload, a.plans, a.connections, a.work,
                                     span_s, a.hosts, a.steps, a.no_result_caches)
                except RuntimeError as e:
                    # One system failing a workload loses neither the others' figures nor the
                    # rest of the run; the table leaves that system out of the workload.
                    log(f"  {system} failed {workload}: {e}")
                    raw.setdefault(workload, {}).setdefault("failed", []).append(system)
                    continue
                log(f"  {figs}")
                raw.setdefault(workload, {}).setdefault(system, []).append(figs)
                save()
    save()
    print_table(raw, [load0, os.getloadavg()], a.rounds, a.commit, date, command)


def print_table(raw, load, rounds, commit, date, command):
    """The Markdown rows of a run's raw figures: medians over rounds; a system that failed a
    workload in any round is left out of it (its rounds would not pair up with Strata's)."""
    whole = {
        w: {s: r for s, r in per.items() if s != "failed" and s not in per.get("failed", [])}
        for w, per in raw.items()
    }
    results = {
        w: {s: {k: statistics.median(f[k] for f in rs) for k in rs[0]} for s, rs in per.items()}
        for w, per in whole.items()
    }
    print(f"<!-- load average {load[0][0]:.1f} before, {load[1][0]:.1f} after; medians of "
          f"{rounds} alternated rounds -->")
    for w, per in raw.items():
        if per.get("failed"):
            print(f"<!-- {w}: failed: {', '.join(sorted(set(per['failed'])))} -->")
    print(table(results, whole, commit, date, command))


if __name__ == "__main__":
    main()
