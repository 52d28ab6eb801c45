#!/usr/bin/env python3
"""Writes the seed inputs of each fuzz target into corpus/<target>/seed-*, from the C reference
vectors in testdata/llhist-reference.json (binary, base64 and both text forms of every case and
merge) plus a few hand-made edge cases. Run from anywhere; existing seeds are overwritten."""

import base64
import json
import os
import random

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", "..", ".."))


def write(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, "seed-" + name), "wb") as f:
        f.write(data)


def main():
    with open(os.path.join(ROOT, "testdata", "llhist-reference.json")) as f:
        ref = json.load(f)
    b64s = [(c["name"], c["b64"]) for c in ref["cases"]]
    b64s += [("merge-%d" % i, m["merged_minus_b_b64"]) for i, m in enumerate(ref["merges"])]
    for name, b64 in b64s:
        raw = base64.b64decode(b64)
        write("decode_binary", name, raw)
        write("decode_base64", name, b64)
        write("decode_base64", name + "-unpadded", b64.rstrip("="))
        # Whitespace is skipped, as the C reader does.
        write("decode_base64", name + "-wrapped", "\n".join(b64[i:i + 8] for i in range(0, len(b64), 8)))
    for c in ref["cases"]:
        write("parse_text", c["name"] + "-go", "\n".join(c["text_go"]))
        write("parse_text", c["name"] + "-c", "\n".join(c["text_c"]))
        pairs = [(b[0], b[1], b[2]) for b in c["bins"]]
        json_map = ",".join('"%s":%d' % ("NaN" if (v, e) == (-1, 0) else repr(v / 10 * 10.0 ** e), n)
                            for v, e, n in pairs)
        write("parse_text", c["name"] + "-json", "{" + json_map + "}")
    # Binary edge cases: truncated header and bin, bad width, trailing bytes, a header promising
    # 65,535 bins, repeated and unordered bins, invalid bins, an 8-byte count.
    for name, raw in [
        ("short", b"\x00"),
        ("truncated-bin", b"\x00\x01\x0a\x00"),
        ("bad-width", b"\x00\x01\x0a\x00\x08" + b"\x00" * 9),
        ("trailing", b"\x00\x01\x0a\x00\x00\x01\x00"),
        ("huge-header", b"\xff\xff\x0a\x00\x00\x01"),
        ("repeats", b"\x00\x03\x0b\x00\x00\x01\x0a\x00\x00\x02\x0b\x00\x00\x03"),
        ("invalid-bins", b"\x00\x03\x05\x00\x00\x01\xff\x01\x00\x01\x00\x07\x00\x01"),
        ("wide-count", b"\x00\x01\x0a\x00\x07" + b"\xff" * 8),
    ]:
        write("decode_binary", name, raw)
    for name, text in [
        ("c-forms", "0=3\nNaN=1\n+12e-004=5\n-99e+126=2"),
        ("floats", "H[1e-300]=1\nH[-0.0]=2\nH[inf]=3\n1.5=4"),
        ("json-spaces", ' { "0.0012" : 5 , "NaN":1 } '),
    ]:
        write("parse_text", name, text)
    # `convert` builds its inputs with `arbitrary`: any bytes are a valid input.
    rng = random.Random(20261122)
    for i in range(8):
        write("convert", "random-%d" % i, bytes(rng.randrange(256) for _ in range(rng.randrange(16, 200))))


if __name__ == "__main__":
    main()
