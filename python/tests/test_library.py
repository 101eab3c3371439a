"""Where the package finds libds4ref: DS4REF_LIB alone when set, else the
build tree it sits in, else the system loader, else make install's
~/.local/lib; importing never needs it."""
import os
import shutil
import subprocess
import sys

import ds4ref
from conftest import ROOT

PACKAGE = ROOT / "python" / "ds4ref"
SHOW = "import ds4ref; print(ds4ref.library_path()); print(ds4ref.version())"


def python(code, tree, **env):
    """code run by this interpreter with the ds4ref package of tree/python
    and only the given library variables (besides the basic ones)."""
    keep = {k: v for k, v in os.environ.items()
            if k not in ("DS4REF_LIB", "LD_LIBRARY_PATH", "PYTHONPATH")}
    return subprocess.run([sys.executable, "-c", code], cwd=tree, capture_output=True, text=True,
                          env={**keep, "PYTHONPATH": str(tree / "python"), **env})


def make_tree(tmp_path, with_build: bool):
    """A copy of the package in a tree of its own, with build/libds4ref.so
    (a link to the library under test) or without."""
    tree = tmp_path / "tree"
    shutil.copytree(PACKAGE, tree / "python" / "ds4ref")
    if with_build:
        (tree / "build").mkdir()
        (tree / "build" / "libds4ref.so").symlink_to(ds4ref.library_path())
    return tree


def test_the_build_tree_is_found_and_ds4ref_lib_overrides_it(tmp_path):
    tree = make_tree(tmp_path, with_build=True)
    p = python(SHOW, tree)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == [str(tree / "build" / "libds4ref.so"), ds4ref.version()]
    # A DS4REF_LIB that is wrong fails, rather than quietly loading another.
    wrong = tmp_path / "elsewhere" / "libds4ref.so"
    p = python(SHOW, tree, DS4REF_LIB=str(wrong))
    assert p.returncode != 0
    assert "DS4REF_E_IO" in p.stderr and "DS4REF_LIB" in p.stderr and str(wrong) in p.stderr


def test_the_system_loader_and_a_clear_error_without_a_library(tmp_path):
    tree = make_tree(tmp_path, with_build=False)
    libdir = tmp_path / "lib"
    libdir.mkdir()
    (libdir / "libds4ref.so.1").symlink_to(ds4ref.library_path())
    p = python(SHOW, tree, LD_LIBRARY_PATH=str(libdir))
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == ["libds4ref.so.1", ds4ref.version()]
    # Nowhere to be found (unless this machine has it installed): importing
    # works, the first use says what to do.
    p = python("import ds4ref\ntry:\n    print('found', ds4ref.library_path())\n"
               "except ds4ref.Error as e:\n    print(e.code.name, e.message)", tree)
    assert p.returncode == 0, p.stderr
    if not p.stdout.startswith("found "):
        assert p.stdout.startswith("E_IO libds4ref not found")
        assert "DS4REF_LIB" in p.stdout and "make install" in p.stdout


def test_make_install_into_home_local_is_found(tmp_path):
    """A package outside the tree (pip install into a virtual environment)
    finds the library that make install PREFIX=$HOME/.local put there,
    which the system loader does not search."""
    tree = make_tree(tmp_path, with_build=False)
    home = tmp_path / "home"
    (home / ".local" / "lib").mkdir(parents=True)
    lib = home / ".local" / "lib" / "libds4ref.so.1"
    lib.symlink_to(ds4ref.library_path())
    p = python(SHOW, tree, HOME=str(home))
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == [str(lib), ds4ref.version()]
