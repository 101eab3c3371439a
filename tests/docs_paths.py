"""Every path of this tree that README.md and docs/*.md name exists: a file,
a folder, a glob that matches, or a module named without its .c/.h.  Paths
of other trees are left alone: ../shared/... by its root, and the few paths
of ds4's and the official code's trees the documents cite (FOREIGN).  Run by make check and make test; prints every
stale path and exits 1 when there is one."""
import glob
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
TOP = ("src", "programs", "scripts", "bench", "tests", "docs", "include", "examples", "python",
       "vectors", "ref", "tools", ".ci")
TOKEN = re.compile(r"(?<![A-Za-z0-9_./\-])((?:%s)/[A-Za-z0-9_./*\[\]-]*)" % "|".join(map(re.escape, TOP)))
# Paths of other repositories that the documents cite under names this
# tree also uses: ds4's test fixtures and the official code as maxtext
# vendors it.
FOREIGN = ("tests/test-vectors/", "tests/utils/deepseek4_reference/")


def exists(p: str) -> bool:
    p = p.rstrip(".,:;")
    if "[" not in p:
        p = p.rstrip("]")
    p = p.replace("[ch]", "c")
    if any(c in p for c in "*?["):
        return bool(glob.glob(str(ROOT / p)))
    q = ROOT / p
    return q.exists() or q.with_suffix(".c").exists() or q.with_suffix(".h").exists() or \
        pathlib.Path(str(q) + ".c").exists() or pathlib.Path(str(q) + ".h").exists()


def main() -> int:
    docs = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))
    stale, n = [], 0
    for d in docs:
        for lineno, line in enumerate(d.read_text(encoding="utf-8").splitlines(), 1):
            for m in TOKEN.finditer(line):
                path = m.group(1)
                if path.startswith(FOREIGN):
                    continue
                n += 1
                if not exists(path):
                    stale.append(f"{d.relative_to(ROOT)}:{lineno}: {path}")
    for s in stale:
        print("docs: no such path:", s)
    print(f"docs: {n} paths named in {len(docs)} documents, {len(stale)} stale")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
