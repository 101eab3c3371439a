"""Goldens as NumPy arrays (ds4ref_golden_read) and comparisons of token
streams (ds4check_diff_files, what ds4ref-diff does)."""
from __future__ import annotations

import ctypes
import dataclasses

import numpy as np

from . import _lib
from ._lib import Error, Status
from .model import LOGPROB, _cstr, _number, _padded_top


@dataclasses.dataclass(frozen=True)
class GoldenModel:
    """A model file's identity as a golden records it (digests in hex)."""

    file: str
    size: int
    metadata_sha256: str
    tensor_data_sha256: str


@dataclasses.dataclass(eq=False)
class Golden:
    """A golden stream (docs/FORMATS.md): the header (version, model
    identity, settings, prompt) and per step the greedy token, its bytes,
    logit, logprob and logits digest and the alternatives (`top`, LOGPROB
    [n_steps, width], padded with id -1 and NaN where a step lists fewer)."""

    version: str
    model: GoldenModel
    mtp: GoldenModel | None
    qat: bool
    numerics: str
    ctx: int
    chunk: int
    top_k: int
    max_steps: int
    mtp_draft: int
    stop_at_eos: bool
    prompt: np.ndarray
    prompt_text: bytes | None
    tokens: np.ndarray
    token_bytes: list
    logits: np.ndarray
    logprobs: np.ndarray
    digests: list
    top: np.ndarray
    complete: bool
    stop: str


def _model(m: _lib.GoldenModelStruct) -> GoldenModel:
    return GoldenModel(m.file.decode("utf-8", "replace"), m.size,
                       bytes(m.metadata_sha256).hex(), bytes(m.tensor_data_sha256).hex())


def read_golden(path) -> Golden:
    """Read a golden file (ds4ref --golden-out) with the strict reader of
    ds4ref-diff; every value is copied out."""
    lib = _lib.lib()
    ptr = ctypes.POINTER(_lib.GoldenStruct)()
    _lib.call(lib.ds4ref_golden_read, _lib.fsencode(path, "path"), ctypes.byref(ptr))
    try:
        g = ptr.contents
        steps = [g.steps[i] for i in range(g.n_steps)]
        return Golden(
            version=g.version.decode("utf-8", "replace"),
            model=_model(g.model),
            mtp=_model(g.mtp) if g.has_mtp else None,
            qat=bool(g.qat), numerics=g.numerics.decode(), ctx=g.ctx, chunk=g.chunk, top_k=g.top_k,
            max_steps=g.max_steps, mtp_draft=g.mtp_draft, stop_at_eos=bool(g.stop_at_eos),
            prompt=np.frombuffer(ctypes.string_at(g.prompt, 4 * g.n_prompt), np.int32).copy(),
            prompt_text=(ctypes.string_at(g.prompt_text, g.n_prompt_text)
                         if g.prompt_text else None),
            tokens=np.array([s.id for s in steps], np.int32),
            token_bytes=[ctypes.string_at(s.bytes, s.n_bytes) for s in steps],
            logits=np.array([s.logit for s in steps], np.float32),
            logprobs=np.array([s.logprob for s in steps], np.float64),
            digests=[bytes(s.logits_sha256) for s in steps],
            top=_padded_top([np.frombuffer(ctypes.string_at(s.top, s.n_top * LOGPROB.itemsize),
                                           LOGPROB) for s in steps],
                            max((s.n_top for s in steps), default=0)),
            complete=bool(g.complete),
            stop=g.stop.decode())
    finally:
        lib.ds4ref_golden_free(ptr)


@dataclasses.dataclass(frozen=True)
class DiffResult:
    """ds4check_diff_result plus the report ds4ref-diff would print (text, or
    JSON with json=True).  passed: no threshold violated.  first_divergence:
    the first step whose tokens differ, None when none does; max_dlogprob
    and max_kl are NaN when nothing could be measured."""

    passed: bool
    violations: int
    exact: bool
    prompt_differs: bool
    first_divergence: int | None
    n_steps_a: int
    n_steps_b: int
    n_compared: int
    top1: float
    max_dlogprob: float
    max_kl: float
    report: str


def diff(golden, other, *, case=None, all_steps=False, json=False, quiet=False,
         max_dlogprob=None, min_top1=None, min_top5_overlap=None, min_top20_overlap=None,
         max_kl=None, exact=False, ignore_model=False) -> DiffResult:
    """Compare the token stream of `other` with the reference `golden`, as
    `ds4ref-diff GOLDEN OTHER` does (docs/FORMATS.md, section 4).  Either
    file may be a ds4ref golden, a ds4 --dump-logprobs JSON or an
    official.vec (case: which of its cases).  The thresholds are those of
    ds4ref-diff; None leaves one unchecked, and with none at all (and not
    exact) min_top1=1 applies, so a divergence fails.  ignore_model: goldens
    of different models are noted, not held against exact (a model and its
    unquantized twin).  A violated threshold is a
    result (passed False), not an error; errors are files that cannot be
    read or parsed."""
    lib = _lib.check_lib()
    opts = _lib.DiffOptions()
    lib.ds4check_diff_options_init(ctypes.byref(opts))
    opts.case_id = None if case is None else _cstr(case, "case")
    opts.all_steps, opts.json, opts.quiet = int(bool(all_steps)), int(bool(json)), int(bool(quiet))
    opts.exact = int(bool(exact))
    opts.ignore_model = int(bool(ignore_model))
    for name, value in (("max_dlogprob", max_dlogprob), ("min_top1", min_top1),
                        ("min_top5_overlap", min_top5_overlap),
                        ("min_top20_overlap", min_top20_overlap), ("max_kl", max_kl)):
        if value is not None:
            value = _number(value, name)
            if not value >= 0:    # the C API reads negative or NaN as "unchecked"
                raise Error(Status.E_ARG, f"{name}: expected a number >= 0, got {value}")
            setattr(opts, name, value)
    res = _lib.DiffResultStruct()
    report = _Memstream()
    try:
        _lib.call(lib.ds4check_diff_files, _lib.fsencode(golden, "golden"), _lib.fsencode(other, "other"),
                  ctypes.byref(opts), report.file, ctypes.byref(res))
    finally:
        text = report.close()
    return DiffResult(
        passed=res.violations == 0, violations=res.violations, exact=bool(res.exact),
        prompt_differs=bool(res.prompt_differs),
        first_divergence=None if res.first_divergence < 0 else res.first_divergence,
        n_steps_a=res.n_steps_a, n_steps_b=res.n_steps_b, n_compared=res.n_compared,
        top1=res.top1, max_dlogprob=res.max_dlogprob, max_kl=res.max_kl,
        report=text.decode("utf-8", "replace"))


class _Memstream:
    """A C FILE * writing into memory (POSIX open_memstream), for the report
    ds4check_diff_files writes."""

    _libc = None

    def __init__(self):
        if _Memstream._libc is None:
            libc = ctypes.CDLL(None)    # the C library the process already has
            libc.open_memstream.restype = ctypes.c_void_p
            libc.open_memstream.argtypes = [ctypes.POINTER(ctypes.c_void_p),
                                            ctypes.POINTER(ctypes.c_size_t)]
            libc.fclose.argtypes = [ctypes.c_void_p]
            libc.free.argtypes = [ctypes.c_void_p]
            _Memstream._libc = libc
        self._buf, self._size = ctypes.c_void_p(), ctypes.c_size_t()
        self.file = self._libc.open_memstream(ctypes.byref(self._buf), ctypes.byref(self._size))
        if not self.file:
            raise Error(Status.E_NOMEM, "open_memstream failed: out of memory for the report")

    def close(self) -> bytes:
        """Everything written; releases the stream and its buffer."""
        self._libc.fclose(self.file)
        try:
            return ctypes.string_at(self._buf, self._size.value) if self._size.value else b""
        finally:
            self._libc.free(self._buf)
