"""Fixtures of the Python tests: the build tree they run in, its tools and
tiny models, and the C programs (the test helper chelper.c, the README's
example examples/compare_head.c) built against the same library.

The tests run from a build tree (make python-test): the repository root is
two levels up, the tools (ds4ref, ds4ref-mkmodel) are there unless
DS4REF_BIN_DIR says otherwise, and models/tiny.gguf (+ its MTP head) is
the model make builds."""
import os
import pathlib
import subprocess

import pytest

# OpenMP threads that wait for work sleep instead of spinning: on a machine
# busy with other jobs (CI runners, make -j) a spinning team turns each of
# the many small parallel regions of a tiny model into a wait for the
# scheduler, tens of times slower.  Never changes a bit.  Set before the
# library (and the OpenMP runtime it loads) is loaded, inherited by the
# command lines the tests run.
os.environ.setdefault("OMP_WAIT_POLICY", "passive")

import ds4ref  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]
BIN = pathlib.Path(os.environ.get("DS4REF_BIN_DIR", ROOT))
TINY = ROOT / "models" / "tiny.gguf"
TINY_MTP = ROOT / "models" / "tiny-mtp.gguf"
VECTORS = ROOT / "vectors"


def tool(name: str) -> str:
    path = BIN / name
    assert path.is_file(), f"{path} is missing: run make first"
    return str(path)


def run(*args, **kw) -> subprocess.CompletedProcess:
    """A command that must succeed; its stderr is shown when it does not."""
    p = subprocess.run([str(a) for a in args], capture_output=True, **kw)
    assert p.returncode == 0, f"{args[0]} exited {p.returncode}: {p.stderr!r}"
    return p


def write_ids(path: pathlib.Path, ids) -> pathlib.Path:
    path.write_text(" ".join(str(int(i)) for i in ids) + "\n")
    return path


@pytest.fixture(scope="session")
def model():
    """The default tiny model with its MTP head, shared by the tests that do
    not change its state (none of them installs a tap outside Model.taps)."""
    assert TINY.is_file() and TINY_MTP.is_file(), f"{TINY} is missing: run make first"
    with ds4ref.Model(TINY, mtp=TINY_MTP) as m:
        yield m


@pytest.fixture(scope="session")
def tiny_f32(tmp_path_factory) -> pathlib.Path:
    """A second tiny model, every float tensor F32 (the default one has ds4's
    quant mix), made by ds4ref-mkmodel."""
    path = tmp_path_factory.mktemp("models") / "tiny-f32.gguf"
    run(tool("ds4ref-mkmodel"), "--config", "tiny", "--types", "f32", "--seed", "2", "--no-mtp",
        "-o", path)
    return path


def c_program(tmp_path_factory, source: pathlib.Path) -> str:
    """source built with the C compiler ($CC, else cc) against
    include/ds4ref.h and the very libds4ref.so this process loaded."""
    lib = pathlib.Path(ds4ref.library_path()).resolve()
    assert lib.is_file(), f"the tests need libds4ref.so loaded from a path, not {lib}"
    out = tmp_path_factory.mktemp(source.stem)
    # The executable asks for the soname libds4ref.so.1, which the build
    # tree does not have: a link under that name next to it answers.
    (out / "libds4ref.so.1").symlink_to(lib)
    exe = out / source.stem
    run(os.environ.get("CC", "cc"), "-std=c11", "-O1", "-Wall", "-Wextra",
        f"-I{ROOT / 'include'}", source, lib, "-lm", f"-Wl,-rpath,{out}", "-o", exe)
    return str(exe)


@pytest.fixture(scope="session")
def chelper(tmp_path_factory) -> str:
    return c_program(tmp_path_factory, pathlib.Path(__file__).with_name("chelper.c"))


@pytest.fixture(scope="session")
def compare_head(tmp_path_factory) -> str:
    return c_program(tmp_path_factory, ROOT / "examples" / "compare_head.c")
