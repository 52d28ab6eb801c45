#!/usr/bin/env python3
"""Shares of a `strata serve` profile by part of the write path.

usage: perf script -F comm,ip,sym,dso -i perf.data | bench/serve-load/profile_groups.py

Record with call graphs, e.g. `perf record -F 1999 --call-graph dwarf,32768 -p <server pid>`.
Each sample goes to the first group whose pattern matches a frame anywhere on its stack, with
"(kernel)" added when the sample's own frame is in the kernel; samples in no group are listed
by their own frame.
"""
import collections
import re
import sys

GROUPS = [
    ("bins text", r"fixed_text_bins|bin_at"),
    ("store write", r"Store::write|::write_partial"),
    ("pack bins", r"push_canonical_bins|packed::pack|batch::check"),
    ("key/tags", r"split_stream_tags|TagSet|write_key|lookup_text|KeyTags|tags::"),
    ("body read", r"read_body"),
    ("utf8", r"from_utf8"),
    ("json tok", r"ingest::json|ingest::httptrap"),
    ("journal", r"journal"),
    ("hyper/tokio io", r"hyper::|tokio::io|poll_read|TcpStream"),
]
PATTERNS = [(name, re.compile(pattern)) for name, pattern in GROUPS]


def group_of(stack):
    """The group of one sample's stack (leaf first)."""
    kernel = " (kernel)" if "kernel" in stack[0][1] else ""
    for name, pattern in PATTERNS:
        if any(pattern.search(symbol) for symbol, _ in stack):
            return name + kernel
    return ("other kernel: " if kernel else "other: ") + stack[0][0][:60]


def main():
    totals, samples, stack = collections.Counter(), 0, []
    for line in list(sys.stdin) + [""]:
        line = line.rstrip()
        if not line:
            if stack:
                totals[group_of(stack)] += 1
                samples += 1
            stack = []
        elif line.startswith((" ", "\t")):
            # "<ip> <symbol> (<dso>)"
            fields = line.split(None, 1)
            rest = fields[1] if len(fields) > 1 else "? ()"
            symbol, _, dso = rest.rpartition(" (")
            stack.append((symbol or rest, dso))
    if samples == 0:
        sys.exit("no samples on stdin")
    for name, count in totals.most_common(40):
        print(f"{100 * count / samples:6.2f}%  {name}")
    print(samples, "samples")


if __name__ == "__main__":
    main()
