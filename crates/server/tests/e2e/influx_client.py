"""The official `influxdb-client` (v2 write API, synchronous, ms precision) writing two hosts'
points every 10 s, then the read side exactly as Grafana's Prometheus data source calls it:
query, query_range, series, labels, label values (GET and POST form)."""

from influxdb_client import InfluxDBClient, Point, WritePrecision
from influxdb_client.client.write_api import SYNCHRONOUS

from common import (BASE, check, fetch, finish, now_ms, prom, prom_available, prom_instant,
                    prom_range, run_checks)

N = 60
STEP_MS = 10_000
T0 = (now_ms() // 60_000 - 20) * 60_000  # 20 minutes ago, on a minute boundary


def usage(host, i):
    return float(i) if host == "a" else 100.0 - i


def main():
    with InfluxDBClient(url=BASE, token="e2e-token", org="e2e") as client:
        write = client.write_api(write_options=SYNCHRONOUS)
        points = []
        for i in range(N):
            for host in ["a", "b"]:
                points.append(Point("e2e_influx").tag("host", host).tag("dc", "x1")
                              .field("usage", usage(host, i)).field("count", i)
                              .time(T0 + i * STEP_MS, WritePrecision.MS))
        points.append(Point("e2e_influx").tag("host", "a").field("state", "ok")
                      .time(T0, WritePrecision.MS))
        try:
            write.write(bucket="e2e", record=points, write_precision=WritePrecision.MS)
            check("influx client: write accepted", True)
        except Exception as e:  # noqa: BLE001
            check("influx client: write accepted", False, e)
    end = T0 + N * STEP_MS

    def native():
        s = fetch("and(__name:e2e_influx_usage,host:a)", T0, end - 1)
        pts = [d for x in s for d in x["data"] if d.get("count")]
        check("influx: 10 one-minute slices of 6 samples for host a",
              len(s) == 1 and len(pts) == 10 and all(d["count"] == 6 for d in pts), s)
        want = [sum(usage("a", i) for i in range(k * 6, k * 6 + 6)) for k in range(10)]
        check("influx: per-slice sums for host a", [d["sum"] for d in pts] == want,
              ([d["sum"] for d in pts], want))
        check("influx: min/max/first/last per slice",
              all(d["min"] == 6 * k and d["max"] == 6 * k + 5 and d["first"] == 6 * k
                  and d["last"] == 6 * k + 5 for k, d in enumerate(pts)), pts[:2])
        s = fetch("and(__name:e2e_influx_count)", T0, end - 1)
        check("influx: integer field `count` for both hosts", len(s) == 2, s)
        s = fetch("and(__name:e2e_influx_state)", T0, end - 1)
        check("influx: string field is a text stream", len(s) == 1 and s[0]["kind"] == "text"
              and [d["value"] for d in s[0]["data"]] == ["ok"], s)
    run_checks("influx native read", native)

    if not prom_available():
        check("influx: Prometheus API mounted (/api/v1/status/buildinfo or /api/v1/labels)",
              False, "not mounted: only /api/strata/v1/fetch was asserted")
        finish()

    def grafana():
        r = prom_range('e2e_influx_usage{host="a"}', T0 // 1000, (end - STEP_MS) // 1000, 10)
        got = list(r.values())[0] if len(r) == 1 else []
        want = [(T0 / 1000 + i * 10, usage("a", i)) for i in range(N)]
        check("query_range: every point of host a at its timestamp", got == want,
              (got[:3], want[:3]))
        t = (T0 + 30 * STEP_MS) / 1000
        r = prom_instant("sum(e2e_influx_usage)", t)
        check("query: sum over hosts = 100", list(r.values()) == [100.0], r)
        r = prom_instant("max by (host) (e2e_influx_usage)", t)
        check("query: max by (host)", r == {frozenset({("host", "a")}): 30.0,
                                            frozenset({("host", "b")}): 70.0}, r)
        r = prom_instant('rate(e2e_influx_count{host="a"}[2m])', t)
        check("query: rate of +1 per 10 s = 0.1/s",
              len(r) == 1 and abs(list(r.values())[0] - 0.1) < 1e-9, r)
        # [55s] so the window holds samples 25..30 whether its start is open or closed.
        r = prom_instant('avg_over_time(e2e_influx_usage{host="b"}[55s])', t)
        want = sum(usage("b", i) for i in range(25, 31)) / 6
        check("query: avg_over_time over 55s",
              len(r) == 1 and abs(list(r.values())[0] - want) < 1e-9, (r, want))
        r = prom_instant('e2e_influx_usage{host="a"} * 2 + 1', t)
        check("query: arithmetic", list(r.values()) == [61.0], r)
        data = prom("/api/v1/series", {"match[]": "e2e_influx_usage", "start": str(T0 // 1000),
                                       "end": str(end // 1000)})
        hosts = sorted(d.get("host") for d in data)
        check("series: both hosts with name and dc labels",
              hosts == ["a", "b"] and all(d.get("__name__") == "e2e_influx_usage"
                                          and d.get("dc") == "x1" for d in data), data)
        data = prom("/api/v1/labels", {"start": str(T0 // 1000), "end": str(end // 1000)})
        check("labels: __name__, host, dc", {"__name__", "host", "dc"} <= set(data), data)
        data = prom("/api/v1/status/buildinfo", {}, post=False)
        check("status/buildinfo answers with a version", bool(data.get("version")), data)
        data = prom("/api/v1/metadata", {}, post=False)
        check("metadata answers (a map)", isinstance(data, dict), data)
        data = prom("/api/v1/label/host/values", {}, post=False)
        check("label values: host has a and b", {"a", "b"} <= set(data), data)
        data = prom("/api/v1/label/__name__/values", {}, post=False)
        check("label values: __name__ lists the influx streams",
              {"e2e_influx_usage", "e2e_influx_count"} <= set(data), data)
    run_checks("influx through the Prometheus API", grafana)
    finish()


if __name__ == "__main__":
    main()
