#!/usr/bin/env python3
"""The PromQL memory estimate (32 B per sample loaded) against the server's real RSS.

Starts `strata serve` (STRATA_BIN, default target/debug/strata) with a 4 GiB query budget on a
temporary data directory, writes SERIES series x SAMPLES samples (one a second), then runs
`sum(count_over_time(m_v[...]))` over all of them (SHAPE=matrix: the raw range vector, every
sample answered), ROUNDS times, while a thread samples the server's
VmRSS every 2 ms. Prints the samples loaded, the RSS before each query and its peak, and the
peak's growth per sample (the median over the rounds). Usage:

    STRATA_BIN=/path/to/strata python3 bench/abuse/promql_memory.py
"""
import json
import os
import statistics
import subprocess
import tempfile
import threading
import time
import urllib.parse
import urllib.request

SERIES = int(os.environ.get("SERIES", "200"))
SAMPLES = int(os.environ.get("SAMPLES", "5000"))
ROUNDS = int(os.environ.get("ROUNDS", "5"))
# "count": sum(count_over_time(...)) (every sample loaded, one number out); "matrix": the raw
# range vector (every sample loaded and answered).
SHAPE = os.environ.get("SHAPE", "count")
BIN = os.environ.get("STRATA_BIN", "target/debug/strata")


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def post(url, body):
    req = urllib.request.Request(url, data=body.encode(), method="POST")
    with urllib.request.urlopen(req, timeout=120) as r:
        return r.status


def main():
    with tempfile.TemporaryDirectory() as tmp:
        config = os.path.join(tmp, "strata.toml")
        with open(config, "w") as f:
            f.write("[limits]\nquery_memory_bytes_max = 4294967296\n")
        server = subprocess.Popen(
            [BIN, "serve", "--http", "127.0.0.1:0", "--statsd", "off", "--graphite", "off",
             "--config", config, "--data-dir", os.path.join(tmp, "data")],
            stdout=subprocess.PIPE, text=True)
        try:
            line = server.stdout.readline()
            http = [w.split("=", 1)[1] for w in line.split() if w.startswith("http=")][0]
            base = f"http://{http}"
            end_s = int(time.time()) - 60
            start_s = end_s - SAMPLES + 1
            for s in range(SERIES):
                lines = "".join(f"m,s=s{s} v={i} {start_s + i}\n" for i in range(SAMPLES))
                assert post(f"{base}/write?precision=s", lines) == 204
            selector = f"m_v[{SAMPLES + 60}s]"
            expr = f"sum(count_over_time({selector}))" if SHAPE == "count" else selector
            query = urllib.parse.urlencode({"query": expr, "time": end_s + 1})
            growths, peaks, befores = [], [], []
            for _ in range(ROUNDS):
                time.sleep(1)
                before = rss_kib(server.pid)
                peak = [before]
                done = threading.Event()

                def watch():
                    while not done.is_set():
                        peak[0] = max(peak[0], rss_kib(server.pid))
                        time.sleep(0.002)

                watcher = threading.Thread(target=watch)
                watcher.start()
                with urllib.request.urlopen(f"{base}/api/v1/query?{query}", timeout=300) as r:
                    answer = json.load(r)
                done.set()
                watcher.join()
                if SHAPE == "count":
                    counted = float(answer["data"]["result"][0]["value"][1])
                else:
                    counted = sum(len(r["values"]) for r in answer["data"]["result"])
                assert counted == SERIES * SAMPLES, counted
                befores.append(before)
                peaks.append(peak[0])
                growths.append((peak[0] - before) * 1024 / counted)
            print(f"shape {SHAPE}; samples loaded per query: {SERIES * SAMPLES}")
            print(f"RSS before (KiB): {befores}")
            print(f"RSS peak (KiB): {peaks}")
            print(f"peak growth per sample (B): {[round(g, 1) for g in growths]}")
            print(f"median: {statistics.median(growths):.1f} B per sample (estimate: 32)")
        finally:
            server.terminate()
            server.wait()


if __name__ == "__main__":
    main()
