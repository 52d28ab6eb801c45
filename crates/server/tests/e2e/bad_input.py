"""Bad input for every protocol: truncated, oversized (413), wrong types, invalid UTF-8, absurd
timestamps, huge tag sets. Each must get the right 4xx with a JSON body naming the line / key /
series, store nothing it rejected, and leave the server serving.

Every rejected metric is named `bad...`; every accepted one `good...`. The server runs with
limits.body_size_bytes_max = 1 MiB (see e2e_bad_input.rs)."""

import gzip
import json
import os
import socket
import time

import snappy
from prometheus_remote_writer.proto import remote_pb2

from common import (GRAPHITE, STATSD, check, fetch, find, finish, http, now_ms, poll,
                    run_checks)

BODY_MAX = 1 << 20
NOW = now_ms()
CHECK = "e2e-bad"


def body_json(body):
    try:
        return json.loads(body)
    except ValueError:
        return None


def names(query):
    return sorted({s["name"] for s in find(query)})


def stored(name):
    """Whether any sample of `name` is readable (last 2 hours to 1 hour ahead)."""
    series = fetch(f"and(__name:{name})", NOW - 7_200_000, NOW + 3_600_000, period="3600s")
    return any(d.get("count") or d.get("value") for s in series for d in s["data"])


def healthy(after):
    status, _, _ = http("GET", "/health")
    check(f"server still serving after {after}", status == 200, status)


def names_in(text, *needles):
    return isinstance(text, str) and all(n in text for n in needles)


# ------------------------------------------------------------------------------- httptrap

def trap(body, extra_headers=None):
    headers = {"Content-Type": "application/json"}
    headers.update(extra_headers or {})
    status, _, raw = http("POST", f"/module/httptrap/{CHECK}/x", body, headers)
    return status, body_json(raw)


def httptrap_cases():
    status, doc = trap(b'{"good_never": 1, "bad_trunc": 2, "bad_trunc_b": ')
    check("httptrap truncated: 400 naming document/line/column",
          status == 400 and doc and names_in(doc.get("error"), "line", "column"), (status, doc))
    check("httptrap truncated: nothing of the body stored",
          not stored("good_never") and not stored("bad_trunc*"))

    big = b'{' + b",".join(b'"bad_big_%d": %d' % (i, i) for i in range(70_000)) + b'}'
    assert len(big) > BODY_MAX
    status, doc = trap(big)
    check("httptrap oversized: 413 with a JSON body", status == 413 and doc is not None,
          (status, doc))
    check("httptrap oversized: nothing stored", not stored("bad_big_1"))

    status, doc = trap(b'{"bad_type_i": {"_type": "i", "_value": "abc"}, '
                       b'"bad_type_q": {"_type": "q", "_value": 1}, '
                       b'"bad_type_i32": {"_type": "i", "_value": 2147483648}, "good_type": 5}')
    check("httptrap wrong types: 200, 3 filtered, error names the key",
          status == 200 and doc and doc.get("stats") == 1 and doc.get("filtered") == 3
          and names_in(doc.get("error"), "bad_type_"), (status, doc))
    check("httptrap wrong types: only the good key stored",
          stored("good_type") and not stored("bad_type*"))

    status, doc = trap(b'{"bad_utf": "\xff\xfe"}{"good_utf": 1}')
    check("httptrap invalid UTF-8: the document is rejected, named, the next one kept",
          status == 200 and doc and doc.get("filtered", 0) >= 1
          and names_in(doc.get("error"), "document 1"), (status, doc))
    check("httptrap invalid UTF-8: bad document not stored, good one stored",
          stored("good_utf") and not stored("bad_utf"))

    status, doc = trap(b'{"bad_ts_future": {"_type": "n", "_value": 1, "_ts": 99999999999999}, '
                       b'"bad_ts_old": {"_type": "n", "_value": 1, "_ts": 5}, '
                       b'"bad_ts_text": {"_type": "n", "_value": 1, "_ts": "soon"}}')
    check("httptrap absurd timestamps: all 3 filtered, 400, error names a key",
          status == 400 and doc and doc.get("filtered") == 3 and doc.get("stats") == 0
          and names_in(doc.get("error"), "bad_ts_"), (status, doc))
    check("httptrap absurd timestamps: nothing stored", not stored("bad_ts*"))

    tags = ",".join(f"t{i}:v" for i in range(65))
    long_value = "v" * 2000
    status, doc = trap(json.dumps({f"bad_tags|ST[{tags}]": 1,
                                   f"bad_tagval|ST[k:{long_value}]": 1}).encode())
    check("httptrap huge tag sets: both filtered, 400, named",
          status == 400 and doc and doc.get("filtered") == 2
          and names_in(doc.get("error"), "bad_tag"), (status, doc))
    check("httptrap huge tag sets: nothing stored", not stored("bad_tag*"))

    status, doc = trap(b"hello, not json")
    check("httptrap not JSON: 4xx with a JSON error", status in (400, 406) and doc
          and doc.get("error"), (status, doc))
    status, doc = trap(b'{"bad_gzip": 1}', {"Content-Encoding": "gzip"})
    check("httptrap Content-Encoding gzip on plain bytes: 400", status == 400 and doc,
          (status, doc))
    check("httptrap bad gzip: nothing stored", not stored("bad_gzip"))
    healthy("bad httptrap input")


# ------------------------------------------------------------------------------- Influx

def influx(body, precision="ms"):
    status, _, raw = http("POST", f"/api/v2/write?precision={precision}", body,
                          {"Content-Type": "text/plain"})
    return status, body_json(raw)


def influx_rejected(name, body, where="line 1", precision="ms"):
    status, doc = influx(body, precision)
    check(f"influx {name}: 400 invalid naming {where}",
          status == 400 and doc and doc.get("code") == "invalid"
          and names_in(doc.get("message"), where), (status, doc))


def influx_cases():
    influx_rejected("truncated", b"bad_influx_trunc,host=a value=")
    influx_rejected("wrong type", b"bad_influx_type value=12x %d" % NOW)
    influx_rejected("unterminated string", b'bad_influx_str value="open %d' % NOW)
    influx_rejected("invalid UTF-8", b"bad_influx_\xff value=1 %d" % NOW)
    influx_rejected("absurd timestamp (overflow)", b"bad_influx_ts value=1 99999999999999999999")
    influx_rejected("timestamp before 1990", b"bad_influx_ts value=1 1", precision="s")
    tags = ",".join(f"t{i}=v" for i in range(65))
    influx_rejected("65 tags", f"bad_influx_tags,{tags} value=1 {NOW}".encode())
    status, doc = influx(b"x value=1", precision="fortnights")
    check("influx bad precision: 400 naming precision", status == 400 and doc
          and names_in(doc.get("message"), "precision"), (status, doc))
    status, doc = influx(b"bad_influx_big value=1 %d\n" % NOW * 40_000)
    check("influx oversized: 413 request too large",
          status == 413 and doc and doc.get("code") == "request too large", (status, doc))
    status, doc = influx(b"good_influx value=1 %d\nbad_influx_mixed value= %d\n" % (NOW, NOW))
    check("influx mixed body: 400 partial write naming line 2",
          status == 400 and doc and names_in(doc.get("message"), "partial write", "line 2"),
          (status, doc))
    check("influx: nothing of a rejected line stored; the good line of the mixed body stored",
          not stored("bad_influx*") and stored("good_influx_value"))
    healthy("bad Influx input")


# ------------------------------------------------------------------------------- remote write

def rw_send(raw, compress=True):
    body = snappy.compress(raw) if compress else raw
    status, _, out = http("POST", "/api/v1/write", body, {
        "Content-Type": "application/x-protobuf", "Content-Encoding": "snappy",
        "X-Prometheus-Remote-Write-Version": "0.1.0"})
    return status, body_json(out)


def rw_request(series):
    """series: [(labels dict or list of (name, bytes value)), [(value, ts)])]"""
    req = remote_pb2.WriteRequest()
    for labels, samples in series:
        ts = req.timeseries.add()
        for n, v in labels:
            ts.labels.add(name=n, value=v)
        for v, t in samples:
            ts.samples.add(value=v, timestamp=t)
    return req


def remote_write_cases():
    good = rw_request([([("__name__", "good_rw_never")], [(1.0, NOW)])]).SerializeToString()
    status, doc = rw_send(good[:-3])
    check("remote write truncated protobuf: 400 naming the body", status == 400 and doc
          and doc.get("error"), (status, doc))
    status, doc = rw_send(b"\x00\x01garbage", compress=False)
    check("remote write bad snappy: 400", status == 400 and doc and doc.get("error"),
          (status, doc))
    check("remote write: nothing of a rejected body stored", not stored("good_rw_never"))

    # Random label values: snappy cannot shrink the body under the limit.
    big = rw_request([([("__name__", "bad_rw_big"), ("i", os.urandom(16).hex())], [(1.0, NOW)])
                      for i in range(60_000)]).SerializeToString()
    assert len(snappy.compress(big)) > BODY_MAX
    status, doc = rw_send(big)
    check("remote write oversized: 413", status == 413, (status, doc))
    check("remote write oversized: nothing stored", not stored("bad_rw_big"))

    # Invalid UTF-8 in a label value: serialize with a valid placeholder, then patch bytes.
    req = rw_request([([("__name__", "bad_rw_utf"), ("k", "\u00e9X")], [(1.0, NOW)]),
                      ([("__name__", "good_rw_a")], [(1.0, NOW)])])
    raw = req.SerializeToString().replace("\u00e9X".encode(), b"\xff\xfeX")
    status, doc = rw_send(raw)
    check("remote write invalid UTF-8 label: 400 naming the series",
          status == 400 and doc and names_in(doc.get("error"), "series"), (status, doc))
    check("remote write invalid UTF-8: that series not stored, the good one stored",
          not stored("bad_rw_utf") and stored("good_rw_a"))

    req = rw_request([([("__name__", "bad_rw_ts")], [(1.0, 99999999999999), (2.0, 5)]),
                      # +Inf is a value, kept as Prometheus keeps it.
                      ([("__name__", "rw_inf_value")], [(float("inf"), NOW)]),
                      ([("__name__", "bad_rw_tags")] + [(f"t{i:02}", "v") for i in range(65)],
                       [(1.0, NOW)])])
    status, doc = rw_send(req.SerializeToString())
    check("remote write absurd timestamps, 65 labels: 400 naming series/sample",
          status == 400 and doc and names_in(doc.get("error"), "series"), (status, doc))
    check("remote write: none of those stored", not stored("bad_rw_*"))
    check("remote write: +Inf stored as a value", stored("rw_inf_value"))
    healthy("bad remote write input")


# ------------------------------------------------------------------------------- OTLP

def otlp(body, content_type="application/json", extra=None):
    headers = {"Content-Type": content_type}
    headers.update(extra or {})
    status, _, out = http("POST", "/v1/metrics", body, headers)
    return status, body_json(out) if content_type == "application/json" else out


def otlp_gauge(name, time_ns, value=1.0):
    return {"name": name, "gauge": {"dataPoints": [
        {"timeUnixNano": str(time_ns), "asDouble": value}]}}


def otlp_doc(metrics):
    return json.dumps({"resourceMetrics": [{"resource": {"attributes": []},
                                            "scopeMetrics": [{"metrics": metrics}]}]}).encode()


def otlp_cases():
    status, out = otlp(b"\x0a\xff\xff\xff\xff\x0f\x01", "application/x-protobuf")
    check("otlp garbage protobuf: 400", status == 400, (status, out))
    status, doc = otlp(b'{"resourceMetrics": 5}')
    check("otlp JSON of the wrong shape: 400 with a message", status == 400 and doc
          and doc.get("message"), (status, doc))
    status, doc = otlp(otlp_doc([otlp_gauge("bad_otlp_trunc", NOW * 10**6)])[:-5])
    check("otlp truncated JSON: 400", status == 400, (status, doc))
    status, doc = otlp(otlp_doc([otlp_gauge("bad_otlp_ts", 99999999999999 * 10**6),
                                 otlp_gauge("good_otlp", NOW * 10**6)]))
    partial = (doc or {}).get("partialSuccess", {})
    check("otlp absurd timestamp: 200 partialSuccess with 1 rejected point, named",
          status == 200 and str(partial.get("rejectedDataPoints")) == "1"
          and names_in(partial.get("errorMessage"), "bad_otlp_ts"), (status, doc))
    status, doc = otlp(otlp_doc([otlp_gauge(f"bad_otlp_big_{i}", NOW * 10**6)
                                 for i in range(20_000)]))
    check("otlp oversized: 413", status == 413, (status, doc))
    status, doc = otlp(b"{}", "text/plain")
    check("otlp unsupported Content-Type: 415", status == 415, (status, doc))
    status, doc = otlp(gzip.compress(otlp_doc([otlp_gauge("good_otlp_gz", NOW * 10**6)])),
                       extra={"Content-Encoding": "gzip"})
    check("otlp gzip JSON accepted", status == 200, (status, doc))
    check("otlp: rejected points not stored, good ones stored",
          not stored("bad_otlp*") and stored("good_otlp") and stored("good_otlp_gz"))
    healthy("bad OTLP input")


# ------------------------------------------------------------------------------- statsd, Graphite

def statsd_cases():
    host, port = STATSD.rsplit(":", 1)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    tags = ",".join(f"t{i}:v" for i in range(65))
    for dgram in [b"bad_statsd_val:abc|c", b"bad_statsd_type:1|zz", b"bad_statsd_trunc:1|",
                  b"bad_statsd_\xff:1|c", f"bad_statsd_tags:1|c|#{tags}".encode(),
                  b"bad_statsd_rate:1|c|@7",
                  b"bad_statsd_long" + b"x" * 5000 + b":1|c"]:
        s.sendto(dgram, (host, int(port)))
    s.sendto(b"good_statsd:1|c", (host, int(port)))
    ok = poll(lambda: stored("good_statsd"), "the statsd flush")
    check("statsd: the good datagram after the bad ones is stored", bool(ok))
    check("statsd: none of the bad datagrams stored", not stored("bad_statsd*"))
    healthy("bad statsd input")


def graphite_cases():
    host, port = GRAPHITE.rsplit(":", 1)
    secs = NOW // 1000
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(b"bad.graphite.val notanumber %d\n" % secs)
        s.sendall(b"bad.graphite.ts 1 99999999999999\n")
        s.sendall(b"bad.graphite.fields 1 2 3 4\n")
        s.sendall(b"bad.graphite.utf\xff 1 %d\n" % secs)
        s.sendall(b"bad.graphite.long" + b"x" * 70_000 + b" 1 %d\n" % secs)
        tags = ";".join(f"t{i}=v" for i in range(65)).encode()
        s.sendall(b"bad.graphite.tags;" + tags + b" 1 %d\n" % secs)
        s.sendall(b"good.graphite.same 1 %d\n" % secs)
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(b"good.graphite.next 2 %d\n" % secs)
    ok = poll(lambda: stored("good.graphite.same") and stored("good.graphite.next"),
              "the Graphite flush")
    check("graphite: good lines after bad ones (same and next connection) stored", bool(ok))
    check("graphite: none of the bad lines stored", not stored("bad.graphite*"))
    healthy("bad Graphite input")


def main():
    for name, fn in [("httptrap", httptrap_cases), ("influx", influx_cases),
                     ("remote write", remote_write_cases), ("otlp", otlp_cases),
                     ("statsd", statsd_cases), ("graphite", graphite_cases)]:
        run_checks(f"{name} bad input", fn)
    def nothing_bad():
        bad = names("and(__name:bad*)")
        check("no series named bad* exists at all", bad == [], bad)
    run_checks("global", nothing_bad)
    status, _, raw = http("POST", f"/module/httptrap/{CHECK}/x", b'{"good_final": 1}',
                          {"Content-Type": "application/json"})
    check("a good write after everything: 200", status == 200, raw)
    finish()


if __name__ == "__main__":
    main()
