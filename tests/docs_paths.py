"""Every path of this tree that README.md and docs/*.md name exists: a file,
a folder, a glob that matches, or a module named without its .c/.h.  Paths
of other trees are left alone: ../shared/... by its root, and the few paths
of ds4's and the official code's trees the documents cite (FOREIGN).  And
every file a source's comment names (foo.c, decode/speculative.h,
tests/fuzz/fuzz_server.c) is a file of this tree, but for the other trees'
files the sources cite (FOREIGN_FILES) and the made-up names of examples
(EXAMPLE_FILES): a comment that names a file renamed or removed is stale.
Run by make check and make test; prints every stale path and exits 1 when
there is one."""
import glob
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
TOP = ("base", "quant", "ref", "check", "programs", "scripts", "bench", "tests", "docs", "include", "examples", "python",
       "vectors", "tools", ".ci")
TOKEN = re.compile(r"(?<![A-Za-z0-9_./\-])((?:%s)/[A-Za-z0-9_./*\[\]-]*)" % "|".join(map(re.escape, TOP)))
# Paths of other repositories that the documents cite under names this
# tree also uses: ds4's test fixtures and the official code as maxtext
# vendors it.
FOREIGN = ("tests/test-vectors/", "tests/utils/deepseek4_reference/")
# Files of other trees the sources' comments cite: ds4's, the official
# code's, DeepSeek's chat encoder, ggml's and llama.cpp's, transformers',
# redis'.
FOREIGN_FILES = {"ds4.c", "ds4_cli.c", "ds4_server.c", "model.py", "kernel.py", "convert.py",
                 "encoding_dsv4.py", "test_encoding_dsv4.py", "ggml-quants.c", "ggml-common.h",
                 "ggml.c", "ggml-cpu.c",
                 "llama.h", "modeling_deepseek_v4.py", "sds.c"}
# Names that stand for any file in an example, and a script a test writes.
EXAMPLE_FILES = {"a.c", "a.h", "name.h", "p.c", "OUT.c", "add_sha.sh"}
SOURCE_DIRS = ("base", "quant", "ref", "check", "programs", "tests", "include", "scripts", "bench", "python", "examples")
FILE = re.compile(r"(?<![A-Za-z0-9_.\-/])([A-Za-z0-9_./-]*[A-Za-z0-9_-]\.(?:c|h|py|sh))(?![A-Za-z0-9_])")


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


def comment_text(line: str, script: bool, open_block: list) -> str:
    """The comment text of one line: after # in a script (not #!), and in C
    what /* */ and // hold, open_block carrying a block across lines; an
    #include names a header, not a file of ours."""
    if script:
        if line.lstrip().startswith("#!"):
            return ""
        i = line.find("#")
        return line[i:] if i >= 0 else ""
    if line.lstrip().startswith("#include"):
        return ""
    out = ""
    while line:
        if open_block[0]:
            j = line.find("*/")
            if j < 0:
                return out + line
            out, line, open_block[0] = out + line[:j], line[j + 2:], False
            continue
        i, k = line.find("/*"), line.find("//")
        if k >= 0 and (i < 0 or k < i):
            return out + line[k:]
        if i < 0:
            return out
        open_block[0], line = True, line[i + 2:]
    return out


def stale_in_sources() -> tuple:
    names = {p.name for p in ROOT.rglob("*") if p.is_file() and "build" not in p.parts and
             ".git" not in p.parts}
    stale, n = [], 0
    for d in SOURCE_DIRS:
        for f in sorted((ROOT / d).rglob("*")):
            if f.suffix not in (".c", ".h", ".py", ".sh") or not f.is_file():
                continue
            open_block = [False]
            text = f.read_text(encoding="utf-8", errors="replace")
            for lineno, line in enumerate(text.splitlines(), 1):
                for m in FILE.finditer(comment_text(line, f.suffix in (".py", ".sh"), open_block)):
                    name = m.group(1)
                    base = name.split("/")[-1]
                    n += 1
                    if base in FOREIGN_FILES or base in EXAMPLE_FILES:
                        continue
                    rooted = "/" in name and name.split("/")[0] in TOP
                    if (rooted and not exists(name)) or base not in names:
                        stale.append(f"{f.relative_to(ROOT)}:{lineno}: {name}")
    return stale, n


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
    src_stale, n_src = stale_in_sources()
    for s in src_stale:
        print("sources: a comment names no file of this tree:", s)
    print(f"sources: {n_src} file names in comments, {len(src_stale)} stale")
    return 1 if stale or src_stale else 0


if __name__ == "__main__":
    sys.exit(main())
