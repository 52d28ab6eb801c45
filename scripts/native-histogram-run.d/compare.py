"""Compares rate(nh[5m]) functions between Prometheus and Strata at every whole minute of a
run's last part (and reports every 15 s), and Strata's stored total count with the exporter's own counts (native-histogram-run).
Prints one line per figure and `native-histogram-run: PASS` or `FAIL`; exits 1 on FAIL."""

import argparse
import json
import math
import urllib.parse
import urllib.request

STEP_S = 15
# Relative agreement asked of counts, sums and fractions.
RELATIVE_MAX = 0.05
# Prometheus's bucket width at factor 1.1: schema 3, each bucket 2^(1/8) times the last.
NATIVE_GROWTH = 2 ** (1 / 8)

FIGURES = {
    "count": "histogram_count(rate(nh[5m]))",
    "sum": "histogram_sum(rate(nh[5m]))",
    "p50": "histogram_quantile(0.5, rate(nh[5m]))",
    "p90": "histogram_quantile(0.9, rate(nh[5m]))",
    "p99": "histogram_quantile(0.99, rate(nh[5m]))",
    "fraction(0,0.1)": "histogram_fraction(0, 0.1, rate(nh[5m]))",
}


def get(base, path, params):
    url = base + path + "?" + urllib.parse.urlencode(params)
    with urllib.request.urlopen(url, timeout=60) as r:
        return json.loads(r.read())


def instant(base, query, t):
    result = get(base, "/api/v1/query", {"query": query, "time": t})["data"]["result"]
    return float(result[0]["value"][1]) if result else None


def llhist_width(v):
    """Width of the llhist bin holding v (two significant digits)."""
    return 10 ** (math.floor(math.log10(abs(v))) - 1) if v else 0.0


def within(name, p, s):
    if p is None or s is None or math.isnan(p) or math.isnan(s):
        return p is None and s is None
    if name.startswith("p"):
        # Each side interpolates inside its own bucket: the two buckets around the value.
        return abs(p - s) <= llhist_width(p) + p * (NATIVE_GROWTH - 1)
    return abs(p - s) <= RELATIVE_MAX * max(abs(p), abs(s))


def stored_total(strata, start, end):
    """Observations Strata counted over the run: per-minute counts summed."""
    lo = start - start % 60 - 60
    hi = end - end % 60 + 120
    got = get(strata, "/api/strata/v1/fetch", {
        "query": "and(__name:nh)", "start": lo, "end": hi, "period": 60, "transform": "count"})
    return sum(d.get("value") or 0 for s in got["series"] for d in s["data"])


def main():
    a = argparse.ArgumentParser()
    a.add_argument("--prometheus")
    a.add_argument("--strata")
    a.add_argument("--start", type=int)
    a.add_argument("--end", type=int)
    a.add_argument("--warmup-s", type=int, default=330)
    a.add_argument("--true-counts", type=float, nargs="+")
    args = a.parse_args()
    ok = True
    # After the first 5 minutes (and a scrape) the window holds a whole rate. Strata keeps
    # histograms per minute: at whole minutes both sides' windows hold the same observations;
    # between them Strata's window is whole minutes (the unaligned figures are reported too).
    instants = [t for t in range(args.start + args.warmup_s, args.end - 5) if t % 60 == 0]
    unaligned = list(range(args.start + args.warmup_s, args.end - 5, STEP_S))
    for name, query in FIGURES.items():
        worst_unaligned = max((abs(p - s) / abs(p) for t in unaligned
                               for p, s in [(instant(args.prometheus, query, t),
                                             instant(args.strata, query, t))]
                               if p and s is not None), default=0.0)
        worst, bad, seen = 0.0, 0, 0
        for t in instants:
            p = instant(args.prometheus, query, t)
            s = instant(args.strata, query, t)
            if p is not None and s is not None and p:
                seen += 1
                worst = max(worst, abs(p - s) / abs(p))
            if not within(name, p, s):
                bad += 1
                if bad <= 3:
                    print(f"  {name} at {t}: prometheus {p} strata {s}")
        ok &= bad == 0 and seen > 0
        print(f"{name}: {seen} whole-minute instants, worst relative difference {worst:.4f}, "
              f"{bad} outside the bound; every {STEP_S} s: worst {worst_unaligned:.4f}")
    want = sum(args.true_counts)
    got = stored_total(args.strata, args.start, args.end)
    exact = got == want
    ok &= exact
    print(f"total count: strata {got:.0f}, exporter {want:.0f} "
          f"({'exact' if exact else 'DIFFERENT'})")
    print(f"native-histogram-run: {'PASS' if ok else 'FAIL'}")
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    main()
