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
    # psycopg's libpq binding (PQexec, PQexecParams), one statement at a time: the client's time is
    # libpq's, without the per-row Python conversion and exception building of a cursor.
    import psycopg
    from psycopg import pq
    conn = psycopg.connect(host="127.0.0.1", port=port, user="postgres", dbname="postgres", autocommit=True)
    pg = conn.pgconn
    for i in range(n):
        # Every 3rd with a parameter (extended protocol), every 50th an error that echoes the id.
        failing = i % 50 == 7
        t0 = time.time_ns()
        if failing:
            res = pg.exec_(f"SELECT 'OBSID{i}'::int".encode())
        elif i % 3 == 0:
            res = pg.exec_params(b"SELECT $1::text", [f"OBSID{i}".encode()])
        else:
            res = pg.exec_(f"SELECT 'OBSID{i}'".encode())
        t1 = time.time_ns()
        if failing:
            assert res.status == pq.ExecStatus.FATAL_ERROR, res.status
        else:
            assert res.status == pq.ExecStatus.TUPLES_OK, res.error_message
            assert res.get_value(0, 0) == f"OBSID{i}".encode(), res.get_value(0, 0)
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
