#!/usr/bin/env python3
"""The largest |dlogprob| between two outputs in ds4's --dump-logprobs JSON
layout, over the tokens in both top lists (matched by id), from the first
step through the first whose chosen tokens differ: after it the two runs
continue from different prefixes.  An independent computation of what
ds4ref-conform reports as the backend's spread (tests/conform.sh).

Usage: dump_dlogprob.py A B   (prints the figure, or "nan" when no token
is in both lists)"""
import json
import sys


def steps(path):
    with open(path) as f:
        return json.load(f)["steps"]


def largest(a, b):
    worst = float("nan")
    for x, y in zip(steps(a), steps(b)):
        lx = {e["token"]["id"]: e["logprob"] for e in x["top_logprobs"]}
        ly = {e["token"]["id"]: e["logprob"] for e in y["top_logprobs"]}
        for k in lx.keys() & ly.keys():
            d = abs(lx[k] - ly[k])
            if not d <= worst:
                worst = d
        if x["selected"]["id"] != y["selected"]["id"]:
            break
    return worst


if __name__ == "__main__":
    print(repr(largest(sys.argv[1], sys.argv[2])))
