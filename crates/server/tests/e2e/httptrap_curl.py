"""httptrap JSON sent with curl: every form of the spec, then read back through
/api/strata/v1/fetch (and the Prometheus API where it is mounted)."""

import base64
import gzip
import json
import os
import subprocess
import tempfile
import time

from common import (BASE, check, close, fetch, finish, llhist_bin, now_ms, prom_available,
                    prom_instant, quantile_range, run_checks, within)

CHECK = "e2e-curl"
T_FIXED = (now_ms() // 60_000 - 30) * 60_000 + 1234  # 30 min ago, one explicit timestamp


def curl(method, path, body, content_type="application/json", extra=()):
    """Sends `body` with curl; returns (status, parsed JSON body or text)."""
    with tempfile.NamedTemporaryFile(delete=False) as f:
        f.write(body)
        name = f.name
    try:
        out = subprocess.run(
            ["curl", "-sS", "-X", method, "-H", f"Content-Type: {content_type}", *extra,
             "--data-binary", f"@{name}", "-w", "\n%{http_code}", BASE + path],
            capture_output=True, check=True, timeout=60).stdout.decode()
    finally:
        os.unlink(name)
    text, _, status = out.rpartition("\n")
    try:
        return int(status), json.loads(text) if text else None
    except ValueError:
        return int(status), text


def decode_llhist(b64):
    """Independent decoder of the llhist binary form: {bin lower edge: count}."""
    raw = base64.b64decode(b64)
    n = int.from_bytes(raw[0:2], "big")
    out, i = {}, 2
    for _ in range(n):
        val = int.from_bytes(raw[i:i + 1], "big", signed=True)
        exp = int.from_bytes(raw[i + 1:i + 2], "big", signed=True)
        width = raw[i + 2] + 1
        count = int.from_bytes(raw[i + 3:i + 3 + width], "big")
        i += 3 + width
        key = round(val * 10.0 ** (exp - 1), 12) if val else 0.0
        out[key] = out.get(key, 0) + count
    assert i == len(raw), "trailing bytes"
    return out


def expected_bins(values_counts):
    out = {}
    for v, c in values_counts:
        key = round(llhist_bin(v)[0], 12)
        out[key] = out.get(key, 0) + c
    return out


def series_named(name, start, end, **kw):
    """The one series with exactly this name (found by a glob on its first characters)."""
    prefix = name.split("`")[0]
    found = [s for s in fetch(f"and(__name:{prefix}*)", start, end, **kw) if s["name"] == name]
    if len(found) != 1:
        raise RuntimeError(f"{len(found)} series named {name!r}")
    return found[0]


def numeric_values(s):
    """Every non-empty slice's aggregate."""
    return [d for d in s["data"] if d.get("count")]


SPEC_DOC = b"""{ "requests": 123853, "version": "1.alpha", "ok": true,
  "big": { "_type": "L", "_value": "18426744073709551616" },
  "db`latency|ST[db:orders]": { "_type": "h", "_value": ["H[1.2e-03]=5", 0.004, "AAQKAAABFAAAAR4AAAEoAAB4"] },
  "cum": { "_type": "H", "_value": ["H[4]=120"] },
  "late": { "_ts": 1700000000123, "_type": "n", "_value": 42 },
  "bytes": { "_type": "L", "_value": 125, "_fl": "+" } }"""

FORMS_DOC = ("""// every other form; comments are allowed
{"nested": {"a": {"b": 2.5}}, "arr": [1, 1.5], "neg": -7, "numstr": "12.5", "nul": null,
 "i32": {"_type": "i", "_value": -5}, "u32": {"_type": "I", "_value": 7},
 "l64": {"_type": "l", "_value": "-9000000000"},
 "mean": {"_type": "n", "_value": [1, 2, 3, 6]},
 "txt": {"_type": "s", "_value": "hello world"},
 "tagged": {"_type": "n", "_value": 7, "_tags": ["env:prod", "az:b"]},
 "named|ST[env:dev,svc:api]": 11,
 "acc": {"_type": "n", "_value": 100, "_fl": "+", "_ts": %d},
 "avg": {"_type": "n", "_value": 10, "_fl": "~", "_ts": "%d"}}
/* a second, concatenated document */ {"acc": {"_type": "n", "_value": 25, "_fl": "+", "_ts": %d},
 "avg": {"_type": "n", "_value": 20, "_fl": "~", "_ts": %d}}""" % (T_FIXED, T_FIXED, T_FIXED, T_FIXED)).encode()

# Histogram samples away from bin edges: (m + 0.5)·10^k.
LAT_VALUES = [(10 + (i * 37) % 90 + 0.5) * 10.0 ** (-4 + i % 3) for i in range(300)]


def main():
    t0 = now_ms()
    status, doc = curl("PUT", f"/module/httptrap/{CHECK}/any-secret", SPEC_DOC)
    check("httptrap spec example: 200", status == 200, f"{status} {doc}")
    check("httptrap spec example: stats 8 filtered 0",
          isinstance(doc, dict) and doc.get("stats") == 8 and doc.get("filtered") == 0, doc)

    status, doc = curl("POST", f"/module/httptrap/{CHECK}/any-secret", FORMS_DOC)
    check("httptrap other forms: 200, nothing filtered",
          status == 200 and isinstance(doc, dict) and doc.get("filtered") == 0
          and doc.get("stats", 0) >= 16, f"{status} {doc}")

    lat_doc = json.dumps({"lat|ST[path:/login]": {"_type": "h", "_value": LAT_VALUES}}).encode()
    status, doc = curl("POST", f"/write/{CHECK}", gzip.compress(lat_doc),
                       extra=("-H", "Content-Encoding: gzip"))
    check("httptrap agent-style /write/<check>, gzip: 200", status == 200
          and isinstance(doc, dict) and doc.get("stats") == 1, f"{status} {doc}")
    t1 = now_ms()
    start, end = t0 - 120_000, t1 + 120_000

    def spec_values():
        s = series_named("requests", start, end)
        check("requests carries __check tag", f"__check:{CHECK}" in s["tags"], s["tags"])
        if prom_available():
            r = prom_instant(f'requests{{check="{CHECK}"}}', now_ms() / 1000)
            check("PromQL: the check tag is the plain label `check`",
                  len(r) == 1 and ("check", CHECK) in next(iter(r))
                  and not any(k.startswith("__check") or "check" in k and k != "check"
                              for k, _ in next(iter(r))), r)
        vals = numeric_values(s)
        check("requests = 123853", len(vals) == 1 and vals[0]["last"] == 123853, vals)
        vals = numeric_values(series_named("ok", start, end))
        check("ok (true) = 1", len(vals) == 1 and vals[0]["last"] == 1, vals)
        vals = numeric_values(series_named("big", start, end))
        check("big (L) = 18426744073709551616 as f64",
              len(vals) == 1 and close(vals[0]["last"], 18426744073709551616.0), vals)
        vals = numeric_values(series_named("bytes", start, end))
        check("bytes (_fl +) = 125", len(vals) == 1 and vals[0]["last"] == 125, vals)
        s = series_named("version", start, end)
        check("version is text 1.alpha", s["kind"] == "text"
              and [d["value"] for d in s["data"]] == ["1.alpha"], s["data"])
        s = series_named("late", 1700000000123 - 60_000, 1700000000123 + 60_000)
        vals = numeric_values(s)
        check("late (_ts) = 42 in the slice of 1700000000123",
              len(vals) == 1 and vals[0]["last"] == 42
              and vals[0]["ts_ms"] <= 1700000000123 < vals[0]["ts_ms"] + 60_000, s["data"])
    run_checks("spec example values", spec_values)

    def spec_histograms():
        s = series_named("db`latency", start, end)
        check("db`latency has tag db:orders", "db:orders" in s["tags"], s["tags"])
        check("db`latency is a histogram", s["kind"] == "histogram", s["kind"])
        slices = [d["value"] for d in s["data"] if d.get("value")]
        got = decode_llhist(slices[0]["b64"]) if len(slices) == 1 else None
        want = expected_bins([(0.0012, 5), (0.004, 1), (1.0, 1), (2.0, 1), (3.0, 1), (4.0, 120)])
        check("db`latency bins = H[1.2e-03]=5 + 0.004 + the base64 histogram", got == want,
              f"got {got} want {want}")
        s = series_named("cum", start, end)
        slices = [d["value"] for d in s["data"] if d.get("value")]
        got = decode_llhist(slices[0]["b64"]) if len(slices) == 1 else None
        check("cum (H, first submission) = 120 in bin 4", got == expected_bins([(4.0, 120)]), got)
    run_checks("spec example histograms", spec_histograms)

    def cumulative():
        t_a = T_FIXED - 10 * 60_000 - T_FIXED % 60_000  # on a period boundary
        t_b = t_a + 60_000
        for ts, value in [(t_a, ["H[4]=100"]), (t_b, ["H[4]=130", "H[5]=10"])]:
            status, doc = curl("POST", f"/module/httptrap/{CHECK}/s", json.dumps(
                {"cum2": {"_type": "H", "_ts": ts, "_value": value}}).encode())
            check(f"cumulative H submission at {ts}: 200", status == 200
                  and doc.get("stats") == 1, (status, doc))
        s = series_named("cum2", t_a, t_b + 59_999)
        by_ts = {d["ts_ms"]: decode_llhist(d["value"]["b64"]) for d in s["data"]
                 if d.get("value")}
        check("cumulative H: the second period holds the difference (30 in bin 4, 10 in 5)",
              by_ts.get(t_b) == expected_bins([(4.0, 30), (5.0, 10)]), by_ts)
    run_checks("cumulative histograms", cumulative)

    def other_forms():
        expect = {"nested`a`b": 2.5, "arr`0": 1, "arr`1": 1.5, "neg": -7, "numstr": 12.5,
                  "i32": -5, "u32": 7, "l64": -9e9, "mean": 3.0}
        for name, v in expect.items():
            vals = numeric_values(series_named(name, start, end))
            check(f"{name} = {v}", len(vals) == 1 and vals[0]["last"] == v, vals)
        s = series_named("txt", start, end)
        check("txt (s) = 'hello world'", [d["value"] for d in s["data"]] == ["hello world"], s)
        s = series_named("tagged", start, end)
        check("_tags become stream tags", {"env:prod", "az:b"} <= set(s["tags"]), s["tags"])
        s = series_named("named", start, end)
        check("|ST[..] name tags", {"env:dev", "svc:api"} <= set(s["tags"])
              and numeric_values(s)[0]["last"] == 11, s)
        found = fetch("and(__name:nul)", start, end)
        check("null stores no value", all(not numeric_values(x) for x in found), found)
        acc = numeric_values(series_named("acc", T_FIXED - 60_000, T_FIXED + 60_000))
        check("_fl + accumulates 100 + 25 at one _ts",
              len(acc) == 1 and acc[0]["last"] == 125, acc)
        avg = numeric_values(series_named("avg", T_FIXED - 60_000, T_FIXED + 60_000))
        check("_fl ~ averages 10 and 20 at one _ts (string _ts too)",
              len(avg) == 1 and avg[0]["last"] == 15, avg)
    run_checks("other forms", other_forms)

    def latency():
        s = series_named("lat", start, end, transform="count")
        counts = [d["value"] for d in s["data"] if d.get("value")]
        check("lat count = 300", sum(counts) == 300, counts)
        check("lat has path tag", "path:/login" in s["tags"], s["tags"])
        qs = [0.5, 0.9, 0.99]
        s = series_named("lat", start, end, period="3600s",
                         transform="quantile:" + ",".join(map(str, qs)))
        vals = [d["value"] for d in s["data"] if d.get("value")]
        for i, q in enumerate(qs):
            lo, hi = quantile_range(LAT_VALUES, q)
            got = vals[0][i] if len(vals) == 1 else None
            check(f"lat quantile {q} in [{lo:.6g}, {hi:.6g}] (fetch)", within(got, lo, hi), vals)
        thr = 0.02  # a bin edge: the share below it does not depend on interpolation
        want = sum(1 for v in LAT_VALUES if v < thr) / len(LAT_VALUES)
        s = series_named("lat", start, end, period="3600s", transform=f"inverse_quantile:{thr}")
        vals = [d["value"] for d in s["data"] if d.get("value")]
        check(f"lat inverse_quantile {thr} = share below ({want:.4f})",
              len(vals) == 1 and abs(vals[0][0] - want) < 1e-9, vals)
        if prom_available():
            t = (t1 + 1000) / 1000
            for q in qs:
                lo, hi = quantile_range(LAT_VALUES, q)
                r = prom_instant(f'histogram_quantile({q}, lat{{path="/login"}})', t)
                got = list(r.values())[0] if len(r) == 1 else None
                check(f"lat histogram_quantile({q}) in [{lo:.6g}, {hi:.6g}] (PromQL)",
                      within(got, lo, hi), r)
            r = prom_instant('histogram_count(lat{path="/login"})', t)
            check("lat histogram_count = 300 (PromQL)", list(r.values()) == [300.0], r)
            # Grafana's heatmap reads native-histogram JSON: one [rule, left, right, count]
            # bucket per llhist bin, rule 1 for positive bins.
            r = prom_instant('lat{path="/login"}', t)
            h = list(r.values())[0] if len(r) == 1 else {}
            got = sorted((round(float(lo), 12), round(float(hi), 12), int(c), rule)
                         for rule, lo, hi, c in h.get("buckets", []))
            want = {}
            for v in LAT_VALUES:
                b = llhist_bin(v)
                want[b] = want.get(b, 0) + 1
            want = sorted((round(lo, 12), round(hi, 12), c, 1) for (lo, hi), c in want.items())
            check("lat as native-histogram JSON: one bucket per llhist bin, exact counts",
                  got == want and h.get("count") == "300", (got[:4], want[:4], h.get("count")))
    run_checks("histogram of numbers", latency)

    finish()


if __name__ == "__main__":
    main()
