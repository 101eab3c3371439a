"""The ctypes mirrors of ds4ref/_lib.py against the C compiler's view of
include/ds4ref.h: a struct that differs would make every call through it
read or write the wrong bytes."""
import ctypes
import subprocess

import numpy as np

import ds4ref
from ds4ref import _lib


def test_struct_sizes_and_offsets_match_the_header(chelper):
    out = subprocess.run([chelper, "layout"], check=True, capture_output=True, text=True).stdout
    c = dict(line.rsplit(" ", 1) for line in out.splitlines())
    mirrored = {}
    for cname, py in _lib.STRUCTS.items():
        mirrored[cname] = str(ctypes.sizeof(py))
        for field, _ in py._fields_:
            mirrored[f"{cname}.{field}"] = str(getattr(py, field).offset)
    # Equal dicts: the same structs, the same fields, the same numbers.
    assert mirrored == c


def test_logprob_dtype_is_the_c_struct():
    # LOGPROB arrays are handed to C as ds4ref_logprob arrays.
    assert ds4ref.LOGPROB.itemsize == ctypes.sizeof(_lib.Logprob)
    for field, _ in _lib.Logprob._fields_:
        assert ds4ref.LOGPROB.fields[field][1] == getattr(_lib.Logprob, field).offset


def test_status_codes_are_the_libraries():
    lib = _lib.lib()
    for status in ds4ref.Status:
        assert lib.ds4ref_status_name(int(status)) == b"DS4REF_" + status.name.encode()
    # One past the last known code is unknown to both.
    assert lib.ds4ref_status_name(max(ds4ref.Status) + 1) == b"DS4REF_E_UNKNOWN"
    assert ds4ref.version() == lib.ds4ref_version().decode() and ds4ref.version()
