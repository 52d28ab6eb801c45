"""Asks Prometheus and Strata the same instant queries at one time and prints the ones whose
answers differ (series as sets, values within a relative 1e-6, NaN equal to NaN, errors by
class). usage: instant-compare.py QUERIES_FILE PROMETHEUS_URL STRATA_URL [UNIX_TIME]"""
import json
import math
import sys
import time
import urllib.error
import urllib.parse
import urllib.request


def ask(base, query, at):
    url = base + "/api/v1/query?" + urllib.parse.urlencode({"query": query, "time": at})
    try:
        with urllib.request.urlopen(url, timeout=10) as reply:
            return json.loads(reply.read())
    except urllib.error.HTTPError as e:
        return json.loads(e.read())


def normal(doc):
    """The answer with series sorted: result order is left undefined except under sort()."""
    if doc.get("status") != "success":
        return ("error", doc.get("errorType"))
    data = doc["data"]
    kind = data["resultType"]
    if kind in ("scalar", "string"):
        return (kind, data["result"][0], data["result"][1])
    out = []
    for s in data["result"]:
        key = json.dumps(s["metric"], sort_keys=True)
        if "value" in s:
            out.append((key, round(s["value"][0], 3), s["value"][1]))
        if "values" in s:
            out.append((key, [(round(t, 3), v) for t, v in s["values"]]))
    return (kind, sorted(out, key=str))


def close(a, b):
    if a == b:
        return True
    if isinstance(a, str) and isinstance(b, str):
        try:
            x, y = float(a), float(b)
        except ValueError:
            return False
        if math.isnan(x) and math.isnan(y):
            return True
        return abs(x - y) <= 1e-6 * max(abs(x), abs(y))
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(close(x, y) for x, y in zip(a, b))
    return False


def main():
    queries, prom, strata = sys.argv[1:4]
    at = float(sys.argv[4]) if len(sys.argv) > 4 else time.time() - 60
    total = differ = 0
    for line in open(queries):
        query = line.strip()
        if not query or query.startswith("#"):
            continue
        total += 1
        a, b = normal(ask(prom, query, at)), normal(ask(strata, query, at))
        if not close(a, b):
            differ += 1
            print("DIFF:", query)
            print("  Prometheus:", str(a)[:400])
            print("  Strata:    ", str(b)[:400])
    print(f"Instant: {total - differ} / {total} agree")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
