"""Shared helpers for the end-to-end client scripts.

Every script writes through a real client, then reads back through the server's read APIs and
reports each check as one line: `ok <name>` or `FAIL <name>: <why>`. The Rust harness
(crates/server/tests/e2e/support.rs) counts those lines. Expected values are computed here from
what was sent, never taken from the server.
"""

import http.client as httpclient
import json
import math
import os
import sys
import time
import urllib.parse
from decimal import Decimal

HTTP = os.environ.get("STRATA_E2E_HTTP", "127.0.0.1:8112")
STATSD = os.environ.get("STRATA_E2E_STATSD", "127.0.0.1:8125")
GRAPHITE = os.environ.get("STRATA_E2E_GRAPHITE", "127.0.0.1:2003")
BASE = "http://" + HTTP

# Bound on every polling loop (the server flushes statsd/Graphite buffers asynchronously).
POLL_ROUNDS_MAX = 100
POLL_SLEEP_S = 0.2

# A failed check prints at most this much of what it saw.
DETAIL_CHARS_MAX = 600

_failed = 0
_passed = 0


def check(name, cond, detail=""):
    """Records one check; never raises, so one script reports all its checks."""
    global _failed, _passed
    if cond:
        _passed += 1
        print(f"ok {name}", flush=True)
    else:
        _failed += 1
        text = str(detail)
        if len(text) > DETAIL_CHARS_MAX:
            text = text[:DETAIL_CHARS_MAX] + f"... ({len(text)} chars)"
        print(f"FAIL {name}: {text}", flush=True)
    return cond


def finish():
    print(f"# {_passed} checks passed, {_failed} failed", flush=True)
    sys.exit(1 if _failed else 0)


def now_ms():
    return int(time.time() * 1000)


def http(method, path, body=None, headers=None, timeout=30):
    """Returns (status, headers, body bytes); HTTP errors are returned, not raised.

    A server may answer (413) and close before the whole body is sent; the answer is then
    read after the failed send, as curl and most clients do."""
    conn = httpclient.HTTPConnection(HTTP, timeout=timeout)
    try:
        try:
            conn.request(method, path, body=body, headers=headers or {})
        except (BrokenPipeError, ConnectionResetError):
            pass
        r = conn.getresponse()
        return r.status, dict(r.getheaders()), r.read()
    finally:
        conn.close()


def get_json(path, params=None):
    q = ("?" + urllib.parse.urlencode(params, doseq=True)) if params else ""
    status, _, body = http("GET", path + q)
    try:
        return status, json.loads(body) if body else None
    except ValueError:
        return status, {"_raw": body[:500].decode("utf-8", "replace")}


def fetch(query, start_ms, end_ms, period="60s", **extra):
    """`/api/strata/v1/fetch` → the `series` list (or raises with the server's answer)."""
    params = {"query": query, "start": str(start_ms // 1000), "end": str(end_ms // 1000 + 1),
              "period": period}
    params.update(extra)
    status, doc = get_json("/api/strata/v1/fetch", params)
    if status != 200:
        raise RuntimeError(f"fetch {query}: HTTP {status}: {doc}")
    return doc["series"]


def find(query):
    status, doc = get_json("/api/strata/v1/find", {"query": query})
    if status != 200:
        raise RuntimeError(f"find {query}: HTTP {status}: {doc}")
    return doc


def poll(fn, what):
    """Calls fn() until it returns a truthy value (bounded); returns the last value."""
    last = None
    for _ in range(POLL_ROUNDS_MAX):
        try:
            last = fn()
        except RuntimeError as e:
            last = None
            err = e
        if last:
            return last
        time.sleep(POLL_SLEEP_S)
    print(f"# gave up waiting for {what}", flush=True)
    return last


def numeric_points(series):
    """Slices that hold data: [(ts_ms, aggregate dict)]."""
    return [(d["ts_ms"], d) for d in series["data"] if "count" in d and d["count"]]


def tags_of(series):
    return set(series["tags"])


# ---------------------------------------------------------------- llhist bins (independent)

def llhist_bin(v):
    """The log-linear bin [lower, upper) holding v > 0: two significant decimal digits.

    Computed with Decimal from the value's shortest repr, so it is independent of the server.
    Test values are chosen away from bin edges, where binary rounding could disagree."""
    assert v > 0 and math.isfinite(v), v
    d = Decimal(repr(float(v)))
    e = d.adjusted()  # floor(log10(v))
    unit = Decimal(1).scaleb(e - 1)
    m = int(d / unit)  # 10..99
    assert 10 <= m <= 99, (v, m)
    return float(m * unit), float((m + 1) * unit)


def quantile_range(values, q):
    """Where a histogram quantile q of `values` may fall: from the lower edge of the bin of the
    sample just below rank q·n to the upper edge of the bin of the sample just above it."""
    s = sorted(values)
    n = len(s)
    lo_i = max(0, math.floor(q * n) - 1)
    hi_i = min(n - 1, math.ceil(q * n))
    return llhist_bin(s[lo_i])[0], llhist_bin(s[hi_i])[1]


def close(a, b, rel=1e-9):
    return a is not None and b is not None and abs(a - b) <= rel * max(1.0, abs(a), abs(b))


def within(x, lo, hi, slack=1e-9):
    return x is not None and lo * (1 - slack) <= x <= hi * (1 + slack)


# ---------------------------------------------------------------- Prometheus HTTP API (Grafana)

def prom_available():
    status, doc = get_json("/api/v1/status/buildinfo")
    if status == 200:
        return True
    status, doc = get_json("/api/v1/labels")
    return status == 200


def prom(path, params, post=True):
    """Calls a Prometheus API endpoint as GET and, where Prometheus also takes it (every
    endpoint but label values), as POST form — Grafana uses both — and checks the answers
    agree. Returns the GET `data`, or raises with the server's answer."""
    q = urllib.parse.urlencode(params, doseq=True)
    status, _, body = http("GET", path + ("?" + q if q else ""))
    try:
        doc = json.loads(body)
    except ValueError:
        raise RuntimeError(f"GET {path}: HTTP {status}, not JSON: {body[:300]!r}")
    if status != 200 or doc.get("status") != "success":
        raise RuntimeError(f"GET {path} {params}: HTTP {status}: {doc}")
    if post:
        pstatus, _, pbody = http("POST", path, q.encode(), {
            "Content-Type": "application/x-www-form-urlencoded"})
        try:
            pdoc = json.loads(pbody)
        except ValueError:
            raise RuntimeError(f"POST {path}: HTTP {pstatus}, not JSON: {pbody[:300]!r}")
        if pstatus != 200 or pdoc != doc:
            raise RuntimeError(f"POST {path} differs from GET: HTTP {pstatus}: {pdoc} vs {doc}")
    return doc["data"]


def prom_instant(expr, t_s):
    """Instant query → {frozenset(labels): float or histogram dict}."""
    data = prom("/api/v1/query", {"query": expr, "time": f"{t_s:.3f}"})
    out = {}
    if data["resultType"] == "scalar":
        return {frozenset(): float(data["result"][1])}
    for r in data["result"]:
        key = frozenset(r["metric"].items())
        if "value" in r:
            out[key] = float(r["value"][1])
        elif "histogram" in r:
            out[key] = r["histogram"][1]
    return out


def prom_range(expr, start_s, end_s, step_s):
    """Range query → {frozenset(labels): [(t, float)]}."""
    data = prom("/api/v1/query_range", {"query": expr, "start": str(start_s), "end": str(end_s),
                                        "step": str(step_s)})
    out = {}
    for r in data["result"]:
        out[frozenset(r["metric"].items())] = [(float(t), float(v)) for t, v in r.get("values", [])]
    return out


def run_checks(name, fn):
    """Runs fn(); an exception is one failed check named after it (the script goes on)."""
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - report, keep going
        check(name, False, f"{type(e).__name__}: {e}")
