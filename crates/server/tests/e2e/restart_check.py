"""After kill -9 and a restart: every batch the writer saw acknowledged is readable, whole.

usage: restart_check.py ACK_FILE BASE_MS"""

import sys

from common import check, fetch, finish, run_checks
from restart_writer import BATCHES_MAX, LINES, TS_STEP_MS

SLICE_MS = LINES * TS_STEP_MS


def main():
    path, base_ms = sys.argv[1], int(sys.argv[2])
    acked = set()
    with open(path) as f:
        for line in f:
            w, b = line.split()
            acked.add((w, int(b)))
    check(f"restart: the writer had acknowledged batches before the kill ({len(acked)})",
          len(acked) > 0)

    def read_back():
        end = base_ms + BATCHES_MAX * SLICE_MS
        series = fetch("and(__name:e2e_restart_seq)", base_ms, end - 1, period=f"{SLICE_MS // 1000}s")
        by_writer = {}
        for s in series:
            w = [t.split(":", 1)[1] for t in s["tags"] if t.startswith("writer:")][0]
            by_writer[w] = {(d["ts_ms"] - base_ms) // SLICE_MS: d for d in s["data"]
                            if d.get("count")}
        missing, partial = [], []
        for w, b in sorted(acked):
            d = by_writer.get(w, {}).get(b)
            first = b * LINES
            want_sum = sum(range(first, first + LINES))
            if d is None:
                missing.append((w, b))
            elif d["count"] != LINES or d["sum"] != want_sum or d["min"] != first:
                partial.append((w, b, d))
        check(f"restart: all {len(acked)} acknowledged batches readable", not missing,
              f"{len(missing)} missing, first {missing[:5]}")
        check("restart: every acknowledged batch whole (1000 samples, exact sum)", not partial,
              partial[:3])
        extra = sum(len(v) for v in by_writer.values()) - len(acked)
        print(f"# {extra} unacknowledged batches were also durable (allowed)")
        check("restart: nothing beyond what was sent", all(
            b < BATCHES_MAX and d["count"] <= LINES for v in by_writer.values()
            for b, d in v.items()), by_writer.keys())
    run_checks("restart read back", read_back)
    finish()


if __name__ == "__main__":
    main()
