"""Graphite plaintext over TCP (what carbon clients and collectd's write_graphite send):
tagged paths, explicit timestamps, and a line without one."""

import socket

from common import (GRAPHITE, check, fetch, finish, now_ms, poll, prom_available, prom_instant,
                    run_checks)

T0 = (now_ms() // 60_000 - 10) * 60_000
N = 12


def main():
    host, port = GRAPHITE.rsplit(":", 1)
    lines = [f"e2e.graphite.load;host=a;dc=x1 {i * 0.25} {(T0 + i * 5000) // 1000}\n"
             for i in range(N)]
    lines.append("e2e.graphite.now 7\n")
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall("".join(lines).encode())
    t1 = now_ms()

    def flushed():
        found = fetch("and(__name:e2e.graphite.load)", T0, T0 + 60_000 - 1)
        pts = [d for x in found for d in x["data"] if d.get("count")]
        return pts if pts and pts[0]["count"] == N else None

    pts = poll(flushed, "the Graphite connection's buffer to be flushed")

    def values():
        check("graphite: 12 samples in one slice", bool(pts) and pts[0]["count"] == N, pts)
        check("graphite: sum and last", bool(pts) and pts[0]["sum"] == sum(i * 0.25 for i in range(N))
              and pts[0]["last"] == (N - 1) * 0.25, pts)
        s = fetch("and(__name:e2e.graphite.load)", T0, T0 + 60_000 - 1)
        check("graphite: ;k=v tags", len(s) == 1 and {"host:a", "dc:x1"} <= set(s[0]["tags"]), s)
        now_pts = poll(lambda: [d for x in fetch("and(__name:e2e.graphite.now)", t1 - 120_000,
                                                 now_ms() + 60_000)
                                for d in x["data"] if d.get("count")], "the untimed line")
        check("graphite: a line without timestamp is stored at receipt",
              bool(now_pts) and now_pts[-1]["last"] == 7, now_pts)
        if prom_available():
            r = prom_instant('{__name__="e2e.graphite.load",host="a"}', (T0 + 11 * 5000) / 1000)
            check("graphite: dotted name through PromQL", list(r.values()) == [2.75], r)
    run_checks("graphite values", values)
    finish()


if __name__ == "__main__":
    main()
