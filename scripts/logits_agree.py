"""Do two logits files agree?  Each is raw little-endian [n][vocab], f32 or
f64 by its extension (.f32, .f64); the first min(n) rows are compared.

Usage: logits_agree.py A B VOCAB MAX_ABS
Prints max |A - B|, rms(A - B) / rms(B) and how many rows have the same
argmax; exit status 0 when max |A - B| <= MAX_ABS and every argmax is the
same, 1 otherwise, 2 on a bad file."""
import array
import math
import sys


def rows(path, vocab):
    kind = {"f32": "f", "f64": "d"}.get(path.rsplit(".", 1)[-1])
    if kind is None:
        sys.exit("logits_agree: %s: the name must end in .f32 or .f64" % path)
    a = array.array(kind)
    with open(path, "rb") as f:
        a.frombytes(f.read())
    if len(a) % vocab:
        sys.exit("logits_agree: %s: %d values, not whole rows of %d" % (path, len(a), vocab))
    return [a[i * vocab:(i + 1) * vocab] for i in range(len(a) // vocab)]


def argmax(r):
    return max(range(len(r)), key=lambda v: r[v])


def main():
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    vocab, bound = int(sys.argv[3]), float(sys.argv[4])
    a, b = rows(sys.argv[1], vocab), rows(sys.argv[2], vocab)
    n = min(len(a), len(b))
    worst = dd = bb = 0.0
    same = 0
    for i in range(n):
        for x, y in zip(a[i], b[i]):
            d = abs(x - y)
            worst = d if d > worst or d != d else worst
            dd += d * d
            bb += y * y
        same += argmax(a[i]) == argmax(b[i])
    print("%d rows: max |d| %.3g, rms(d)/rms(ref) %.3g, argmax %d/%d" %
          (n, worst, math.sqrt(dd / bb) if bb else float("inf"), same, n))
    sys.exit(0 if n and worst <= bound and same == n else 1)


if __name__ == "__main__":
    main()
