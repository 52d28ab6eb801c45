"""Prometheus remote write 1.0 from the upstream prompb protobuf definitions as compiled for
Python by the `prometheus-remote-writer` package: float series through its RemoteWriter client,
and a native histogram (schema 0) plus a classic `_bucket{le}` histogram as raw WriteRequests,
snappy block-compressed with python-snappy."""

import snappy
from prometheus_remote_writer import RemoteWriter
from prometheus_remote_writer.proto import remote_pb2, types_pb2

from common import (BASE, check, close, fetch, finish, http, llhist_bin, now_ms,
                    prom_available, prom_instant, prom_range, run_checks, within)

T0 = (now_ms() // 60_000 - 15) * 60_000
N = 40
STEP_MS = 15_000

# Native histogram, schema 0 (bucket i = (2^(i-1), 2^i]): buckets 1..4 hold 10, 20, 30, 10.
SCHEMA = 0
FIRST_INDEX = 1
COUNTS = [10, 20, 30, 10]
T_HIST = T0 + 5 * 60_000

CLASSIC = [("0.1", 10), ("0.5", 30), ("1", 60), ("+Inf", 70)]  # cumulative counts


def temp(i):
    return 20 + 0.5 * i


def send_raw(req):
    body = snappy.compress(req.SerializeToString())
    return http("POST", "/api/v1/write", body, {
        "Content-Type": "application/x-protobuf", "Content-Encoding": "snappy",
        "X-Prometheus-Remote-Write-Version": "0.1.0"})


def native_quantile_range(q):
    """Bounds of the llhist bins overlapping the native bucket holding rank q·count."""
    total = sum(COUNTS)
    rank = q * total
    cum = 0
    base = 2.0 ** (2.0 ** -SCHEMA)
    for k, c in enumerate(COUNTS):
        cum += c
        if cum >= rank:
            i = FIRST_INDEX + k
            lo, hi = base ** (i - 1), base ** i
            return llhist_bin(lo)[0], llhist_bin(hi)[1]
    raise AssertionError("rank beyond count")


def classic_quantile(q):
    """Prometheus' classic histogram_quantile: linear interpolation inside the bucket."""
    total = CLASSIC[-1][1]
    rank = q * total
    prev_le, prev_c = 0.0, 0
    for le, c in CLASSIC:
        if c >= rank:
            return prev_le + (float(le) - prev_le) * (rank - prev_c) / (c - prev_c)
        prev_le, prev_c = float(le), c
    raise AssertionError


def main():
    writer = RemoteWriter(url=BASE + "/api/v1/write", retries=0)
    result = writer.send([
        {"metric": {"__name__": "e2e_rw_temp", "host": "a"},
         "values": [temp(i) for i in range(N)],
         "timestamps": [T0 + i * STEP_MS for i in range(N)]},
        {"metric": {"__name__": "e2e_rw_temp", "host": "b"},
         "values": [-temp(i) for i in range(N)],
         "timestamps": [T0 + i * STEP_MS for i in range(N)]},
    ])
    status = result.last_response.status_code if result.last_response is not None else None
    check("remote write client: floats accepted (2xx)", status is not None and 200 <= status < 300,
          status)

    req = remote_pb2.WriteRequest()
    ts = req.timeseries.add()
    ts.labels.add(name="__name__", value="e2e_rw_latency")
    ts.labels.add(name="job", value="e2e")
    h = ts.histograms.add()
    h.count_int = sum(COUNTS)
    h.sum = 300.0
    h.schema = SCHEMA
    h.zero_threshold = 1e-128
    h.zero_count_int = 0
    h.positive_spans.add(offset=FIRST_INDEX, length=len(COUNTS))
    prev = 0
    for c in COUNTS:
        h.positive_deltas.append(c - prev)
        prev = c
    h.reset_hint = types_pb2.Histogram.GAUGE
    h.timestamp = T_HIST
    for le, c in CLASSIC:
        series = req.timeseries.add()
        series.labels.add(name="__name__", value="e2e_rw_classic_bucket")
        series.labels.add(name="le", value=le)
        series.samples.add(value=float(c), timestamp=T_HIST)
    status, _, body = send_raw(req)
    check("remote write: native + classic histograms accepted (2xx)", 200 <= status < 300,
          (status, body[:300]))

    def native():
        s = fetch("and(__name:e2e_rw_temp,host:a)", T0, T0 + N * STEP_MS - 1)
        pts = [d for x in s for d in x["data"] if d.get("count")]
        check("remote write: 10 slices of 4 samples for host a",
              len(pts) == 10 and all(d["count"] == 4 for d in pts), pts[:2])
        want = [sum(temp(i) for i in range(4 * k, 4 * k + 4)) for k in range(10)]
        check("remote write: per-slice sums", [d["sum"] for d in pts] == want,
              ([d["sum"] for d in pts], want))
        s = fetch("and(__name:e2e_rw_latency)", T_HIST - 60_000, T_HIST + 60_000,
                  transform="count")
        counts = [d["value"] for x in s for d in x["data"] if d.get("value")]
        check("remote write: native histogram count = 70", counts == [70], s)
        qs = [0.1, 0.5, 0.9]
        s = fetch("and(__name:e2e_rw_latency)", T_HIST - 60_000, T_HIST + 60_000,
                  transform="quantile:" + ",".join(map(str, qs)))
        vals = [d["value"] for x in s for d in x["data"] if d.get("value")]
        for i, q in enumerate(qs):
            lo, hi = native_quantile_range(q)
            got = vals[0][i] if len(vals) == 1 else None
            check(f"remote write: native quantile {q} in [{lo}, {hi}] (fetch)",
                  within(got, lo, hi), vals)
        s = fetch("and(__name:e2e_rw_classic_bucket)", T_HIST - 60_000, T_HIST + 60_000)
        les = sorted(t for x in s for t in x["tags"] if t.startswith("le:"))
        check("remote write: classic buckets stay numeric series with le tags",
              les == sorted(f"le:{le}" for le, _ in CLASSIC)
              and all(x["kind"] == "numeric" for x in s), s)
    run_checks("remote write native read", native)

    if prom_available():
        def grafana():
            r = prom_range('e2e_rw_temp{host="b"}', T0 // 1000,
                           (T0 + (N - 1) * STEP_MS) // 1000, 15)
            got = list(r.values())[0] if len(r) == 1 else []
            want = [(T0 / 1000 + i * 15, -temp(i)) for i in range(N)]
            check("remote write: query_range returns every sample of host b", got == want,
                  got[:3])
            # A histogram is stored per base period (60 s); query at the period's end so the
            # answer holds whether the period is placed at its start or its end.
            t = T_HIST / 1000 + 60
            for q in [0.1, 0.5, 0.9]:
                lo, hi = native_quantile_range(q)
                r = prom_instant(f"histogram_quantile({q}, e2e_rw_latency)", t)
                got = list(r.values())[0] if len(r) == 1 else None
                check(f"remote write: native histogram_quantile({q}) in [{lo}, {hi}] (PromQL)",
                      within(got, lo, hi), r)
            r = prom_instant("histogram_count(e2e_rw_latency)", t)
            check("remote write: histogram_count = 70 (PromQL)", list(r.values()) == [70.0], r)
            for q in [0.25, 0.5, 0.75]:
                r = prom_instant(f"histogram_quantile({q}, e2e_rw_classic_bucket)", t)
                got = list(r.values())[0] if len(r) == 1 else None
                check(f"remote write: classic histogram_quantile({q}) = {classic_quantile(q):.6g}",
                      close(got, classic_quantile(q)), r)
        run_checks("remote write through the Prometheus API", grafana)
    finish()


if __name__ == "__main__":
    main()
