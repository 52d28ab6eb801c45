"""Writes Influx line protocol batches as fast as the server acknowledges them, from
WRITERS threads on keep-alive connections, and appends `writer batch` to the ack file after
each 2xx (flushed at once: the harness kills the server, not this process). Stops at the first
connection error (the server was killed) or after BATCHES_MAX batches per writer.

usage: restart_writer.py ACK_FILE BASE_MS"""

import http.client
import sys
import threading

from common import HTTP

WRITERS = 2
BATCHES_MAX = 3000
LINES = 1000
TS_STEP_MS = 10  # one batch spans LINES * TS_STEP_MS = 10 s: one fetch slice


def body(writer, batch, base_ms):
    first = batch * LINES
    return "".join(
        f"e2e_restart,writer={writer} seq={first + j} {base_ms + (first + j) * TS_STEP_MS}\n"
        for j in range(LINES)).encode()


def run(writer, base_ms, ack, lock, stopped):
    conn = http.client.HTTPConnection(HTTP, timeout=30)
    for batch in range(BATCHES_MAX):
        try:
            conn.request("POST", "/api/v2/write?precision=ms", body(writer, batch, base_ms),
                         {"Content-Type": "text/plain"})
            resp = conn.getresponse()
            resp.read()
        except (OSError, http.client.HTTPException) as e:
            stopped.append(f"writer {writer} stopped at batch {batch}: {type(e).__name__}")
            return
        if 200 <= resp.status < 300:
            with lock:
                ack.write(f"{writer} {batch}\n")
                ack.flush()
        else:
            stopped.append(f"writer {writer}: HTTP {resp.status} at batch {batch}")
            return
    stopped.append(f"writer {writer} finished {BATCHES_MAX} batches")


def main():
    path, base_ms = sys.argv[1], int(sys.argv[2])
    lock = threading.Lock()
    stopped = []
    with open(path, "a") as ack:
        threads = [threading.Thread(target=run, args=(w, base_ms, ack, lock, stopped))
                   for w in range(WRITERS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    for s in stopped:
        print(f"# {s}")


if __name__ == "__main__":
    main()
