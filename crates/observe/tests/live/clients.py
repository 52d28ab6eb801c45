"""Real clients for the observer's end-to-end tests: N requests, each carrying OBSID<i> that the
server echoes back, timed by the client itself (CLOCK_REALTIME, the clock packets are stamped
with). Prints one JSON line per request: [i, latency_ns]."""
import gc
import json
import sys
import time


def http(port, n):
    import http.client
    c = http.client.HTTPConnection("127.0.0.1", port)
    for i in range(n):
        t0 = time.time_ns()
        c.request("GET", f"/echo?OBSID{i}")
        r = c.getresponse()
        body = r.read()
        t1 = time.time_ns()
        assert body == f"OBSID{i}".encode(), body
        yield i, t1 - t0


def postgres(port, n):
    import psycopg
    conn = psycopg.connect(host="127.0.0.1", port=port, user="postgres", dbname="postgres", autocommit=True)
    cur = conn.cursor()
    for i in range(n):
        # Every 3rd with a parameter (extended protocol), every 200th an error that echoes the id
        # (psycopg builds a Python exception for each, a client-side cost of ~0.3 ms that the wire
        # does not see: with more than 1 % of requests failing it would be what p99 measures).
        t0 = time.time_ns()
        try:
            if i % 200 == 7:
                cur.execute(f"SELECT 'OBSID{i}'::int")
            elif i % 3 == 0:
                cur.execute("SELECT %s::text", (f"OBSID{i}",))
            else:
                cur.execute(f"SELECT 'OBSID{i}'")
            row = cur.fetchall()
            t1 = time.time_ns()
            assert row[0][0] == f"OBSID{i}", row
        except psycopg.errors.InvalidTextRepresentation:
            t1 = time.time_ns()
        yield i, t1 - t0


def redis_(port, n):
    import redis
    r = redis.Redis(host="127.0.0.1", port=port, protocol=3)
    for i in range(n):
        t0 = time.time_ns()
        v = r.echo(f"OBSID{i}")
        t1 = time.time_ns()
        assert v == f"OBSID{i}".encode(), v
        yield i, t1 - t0


def mysql(port, n):
    # MariaDB's connector (C): text queries, and prepared statements in the binary protocol.
    import mariadb
    cnx = mariadb.connect(host="127.0.0.1", port=port, user="root")
    text = cnx.cursor()
    prep = cnx.cursor(prepared=True)
    for i in range(n):
        t0 = time.time_ns()
        if i % 2:
            prep.execute("SELECT ?", (f"OBSID{i}",))
            row = prep.fetchall()
        else:
            text.execute(f"SELECT 'OBSID{i}'")
            row = text.fetchall()
        t1 = time.time_ns()
        assert row[0][0] == f"OBSID{i}", row
        yield i, t1 - t0


def main():
    # A collection pause inside a timed request would be the client's delay, not the wire's.
    gc.disable()
    proto, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    run = {"http": http, "postgres": postgres, "redis": redis_, "mysql": mysql}[proto]
    for i, ns in run(port, n):
        print(json.dumps([i, ns]))


main()
