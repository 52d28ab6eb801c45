"""The `statsd` package (PyPI) over UDP: counters, gauges (set and delta), sets and timers,
which the server aggregates per flush interval (timers into one histogram)."""

import statsd

from common import (STATSD, check, fetch, finish, now_ms, poll, prom, prom_available,
                    prom_instant, quantile_range, run_checks, within)

# Timer values (ms) away from llhist bin edges: (m + 0.5)·10^k.
TIMINGS = [(10 + (i * 53) % 90 + 0.5) * 10.0 ** (i % 2) for i in range(200)]


def main():
    host, port = STATSD.rsplit(":", 1)
    client = statsd.StatsClient(host, int(port), maxudpsize=1400)
    t0 = now_ms()
    for _ in range(10):
        client.incr("e2e_statsd_requests")
    client.incr("e2e_statsd_requests", 5)
    client.incr("e2e_statsd_requests", 5)
    # One datagram: set then delta, so both land in the same flush interval.
    with client.pipeline() as pipe:
        pipe.gauge("e2e_statsd_temp", 40)
        pipe.gauge("e2e_statsd_temp", 3, delta=True)
    with client.pipeline() as pipe:
        for member in ["alice", "bob", "alice", "carol", "bob"]:
            pipe.set("e2e_statsd_users", member)
    # A pipeline packs the timings into few datagrams (≤ maxudpsize), so a burst cannot
    # overflow the server's socket buffer on a loaded machine.
    with client.pipeline() as pipe:
        for ms in TIMINGS:
            pipe.timing("e2e_statsd_latency", ms)
    start = t0 - 120_000

    def count_of(series):
        return sum(d["value"] for d in series["data"] if d.get("value"))

    def timers_flushed():
        found = fetch("and(__name:e2e_statsd_latency)", start, now_ms() + 60_000,
                      transform="count")
        return found if found and count_of(found[0]) == len(TIMINGS) else None

    found = poll(timers_flushed, "the statsd timers to be flushed")
    check("statsd timers: histogram holds all 200 timings",
          bool(found) and count_of(found[0]) == len(TIMINGS), found)
    end = now_ms() + 60_000

    def values():
        s = fetch("and(__name:e2e_statsd_requests)", start, end)
        total = sum(d.get("sum", 0) for x in s for d in x["data"] if d.get("count"))
        check("statsd counter: increments sum to 20", len(s) == 1 and total == 20, s)
        s = fetch("and(__name:e2e_statsd_temp)", start, end)
        lasts = [d["last"] for x in s for d in x["data"] if d.get("count")]
        check("statsd gauge: 40 then +3 = 43", lasts[-1:] == [43], s)
        s = fetch("and(__name:e2e_statsd_users)", start, end)
        total = sum(d.get("sum", 0) for x in s for d in x["data"] if d.get("count"))
        check("statsd set: 3 distinct members in one datagram", total == 3, s)
        qs = [0.5, 0.9, 0.99]
        s = fetch("and(__name:e2e_statsd_latency)", start, end, period="3600s",
                  transform="quantile:" + ",".join(map(str, qs)))
        vals = [d["value"] for x in s for d in x["data"] if d.get("value")]
        for i, q in enumerate(qs):
            lo, hi = quantile_range(TIMINGS, q)
            got = vals[0][i] if len(vals) == 1 else None
            check(f"statsd timer quantile {q} in [{lo:.4g}, {hi:.4g}] (fetch)",
                  within(got, lo, hi), vals)
        if prom_available():
            t = now_ms() / 1000
            r = prom_instant("sum_over_time(e2e_statsd_requests[1h])", t)
            check("statsd counter: sum_over_time = 20 (PromQL)", list(r.values()) == [20.0], r)
            lo, hi = quantile_range(TIMINGS, 0.9)
            r = prom_instant("histogram_quantile(0.9, e2e_statsd_latency)", t)
            got = list(r.values())[0] if len(r) == 1 else None
            check(f"statsd timer histogram_quantile(0.9) in [{lo:.4g}, {hi:.4g}] (PromQL)",
                  within(got, lo, hi), r)
            m = prom("/api/v1/metadata", {}, post=False)
            kinds = {n: [e.get("type") for e in m.get(n, [])]
                     for n in ("e2e_statsd_requests", "e2e_statsd_temp", "e2e_statsd_latency")}
            check("statsd types in /api/v1/metadata (counter, gauge, histogram)",
                  kinds == {"e2e_statsd_requests": ["counter"], "e2e_statsd_temp": ["gauge"],
                            "e2e_statsd_latency": ["histogram"]}, kinds)
    run_checks("statsd values", values)
    finish()


if __name__ == "__main__":
    main()
