"""`pip install ./python` gives a working package: installed into a scratch
folder (--target), imported from there by a fresh interpreter, it evaluates
the tiny model with the library DS4REF_LIB names, bit for bit as the package
of the source tree does.  No build isolation and no dependencies (NumPy is
already there), so pip needs no network: it uses the setuptools it has."""
import importlib.util
import os
import pathlib
import shutil
import sys

import pytest

import ds4ref
from conftest import ROOT, TINY, run

# The interpreter prints where it imported ds4ref from and the logits' bytes.
PROBE = """
import sys, ds4ref
with ds4ref.Model(sys.argv[1]) as m, m.session() as s:
    logits = s.eval(m.chat("What is the capital of Italy?"))
print(ds4ref.__file__)
sys.stdout.flush()
sys.stdout.buffer.write(logits.tobytes())
"""


def test_pip_install_then_import(model, tmp_path):
    for module in ("pip", "setuptools"):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{sys.executable} has no {module}, which `pip install ./python` needs "
                        "(Debian: apt-get install python3-pip)")
    # pip builds in the folder it is given (build/, ds4ref.egg-info): a copy
    # of python/ keeps the source tree as it was.
    src = tmp_path / "src"
    shutil.copytree(ROOT / "python", src,
                    ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"))
    site = tmp_path / "site"
    run(sys.executable, "-m", "pip", "install", "--no-build-isolation", "--no-deps", "--no-index",
        "--disable-pip-version-check", "--quiet", "--target", site, src,
        env=dict(os.environ, PIP_ROOT_USER_ACTION="ignore"))
    lib = pathlib.Path(ds4ref.library_path()).resolve()
    env = dict(os.environ, PYTHONPATH=str(site), DS4REF_LIB=str(lib))
    out = run(sys.executable, "-c", PROBE, TINY, env=env, cwd=tmp_path).stdout
    where, data = out.split(b"\n", 1)
    assert pathlib.Path(os.fsdecode(where)).parent == site / "ds4ref"
    with model.session() as s:
        here = s.eval(model.chat("What is the capital of Italy?"))
    assert data == here.tobytes()
