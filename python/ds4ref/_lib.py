"""libds4ref through ctypes: finding the library, the C structs of
include/ds4ref.h, the function prototypes, and turning a failed call into
ds4ref.Error.

Every struct below mirrors one of include/ds4ref.h field for field; the tests
compare their sizes and offsets with what the C compiler says
(python/tests/test_api_layout.py), so a change of the header that is not made
here too fails there rather than corrupting memory.
"""
from __future__ import annotations

import ctypes
import enum
import os
import pathlib
import threading

import numpy as np


class Status(enum.IntEnum):
    """The DS4REF_E_* codes of include/ds4ref.h (enum ds4ref_status)."""

    OK = 0
    E_ARG = 2
    E_IO = 3
    E_FORMAT = 4
    E_MODEL = 5
    E_NOMEM = 6
    E_RANGE = 7
    E_UNSUPPORTED = 8
    E_MISMATCH = 9
    E_INTERRUPTED = 10
    E_INTERNAL = 11


class Error(Exception):
    """Every failure of this package, a bad argument included: a DS4REF_E_*
    code and a one-line message naming the file, tensor or argument involved
    (DS4REF_E_ARG for an argument of the wrong type or form).  `code` is a
    Status (an int); `name` is its C spelling, e.g. "DS4REF_E_RANGE".

    An exception raised by the caller's own code while the package calls it
    propagates as it is: a KeyboardInterrupt during an evaluation, or an
    error from an argument's own methods (an os.PathLike's __fspath__, an
    iterable's iteration)."""

    def __init__(self, code: int, message: str):
        try:
            self.code = Status(code)
            self.name = "DS4REF_" + self.code.name
        except ValueError:          # a code this package does not know yet
            self.code = code
            self.name = "DS4REF_E_UNKNOWN"
        self.message = message
        super().__init__(f"{self.name}: {message}")


# --------------------------------------------------------------- C structs

class ErrorStruct(ctypes.Structure):
    _fields_ = [("code", ctypes.c_int), ("message", ctypes.c_char * 512)]


class ModelOptions(ctypes.Structure):
    _fields_ = [("path", ctypes.c_char_p), ("mtp_path", ctypes.c_char_p),
                ("qat", ctypes.c_int), ("max_batch", ctypes.c_uint32),
                ("numerics", ctypes.c_char_p), ("dspark_path", ctypes.c_char_p)]


class ModelInfoStruct(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint32) for name in
                ("n_layer", "n_embd", "n_vocab", "n_head", "head_dim", "n_hc",
                 "n_expert", "n_expert_used", "context_length")] + \
               [("has_mtp", ctypes.c_int), ("has_tokenizer", ctypes.c_int),
                ("bos", ctypes.c_int32), ("eos", ctypes.c_int32)]


class ChatOptions(ctypes.Structure):
    _fields_ = [("system", ctypes.c_char_p), ("system_len", ctypes.c_size_t),
                ("thinking", ctypes.c_int), ("think_max", ctypes.c_int),
                ("reasoning_effort", ctypes.c_char_p), ("release", ctypes.c_int)]


ProgressFn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_uint32, ctypes.c_uint32)


class SessionOptions(ctypes.Structure):
    _fields_ = [("ctx", ctypes.c_uint32), ("chunk", ctypes.c_uint32),
                ("progress", ProgressFn), ("progress_ud", ctypes.c_void_p)]


class Logprob(ctypes.Structure):
    _fields_ = [("id", ctypes.c_int32), ("logit", ctypes.c_float),
                ("logprob", ctypes.c_double)]


class Step(ctypes.Structure):
    _fields_ = [("index", ctypes.c_uint32), ("id", ctypes.c_int32),
                ("bytes", ctypes.c_void_p), ("n_bytes", ctypes.c_size_t),
                ("logit", ctypes.c_float), ("logprob", ctypes.c_double),
                ("n_top", ctypes.c_uint32), ("top", ctypes.c_void_p),
                ("logits_sha256", ctypes.c_void_p)]


StepFn = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(Step))


class SpecStats(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint64) for name in ("passes", "iters", "proposed", "accepted", "deepest")] + \
        [("proposed_at", ctypes.c_uint64 * 16), ("accepted_at", ctypes.c_uint64 * 16)]


class GenerateOptions(ctypes.Structure):
    _fields_ = [("n_tokens", ctypes.c_uint32), ("top_k", ctypes.c_uint32),
                ("stop_at_eos", ctypes.c_int), ("temperature", ctypes.c_double),
                ("seed", ctypes.c_uint64), ("mtp_draft", ctypes.c_uint32),
                ("golden_path", ctypes.c_char_p), ("dump_path", ctypes.c_char_p),
                ("vec_path", ctypes.c_char_p), ("vec_id", ctypes.c_char_p),
                ("vec_prompt_path", ctypes.c_char_p),
                ("prompt_text", ctypes.c_void_p), ("prompt_text_len", ctypes.c_size_t),
                ("stop", ctypes.c_void_p), ("stats", ctypes.POINTER(SpecStats)),
                ("dspark_confidence", ctypes.c_double)]


class Tap(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("layer", ctypes.c_uint32),
                ("pos", ctypes.c_uint32), ("kind", ctypes.c_int),
                ("data", ctypes.c_void_p), ("n", ctypes.c_uint32)]


TapFn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.POINTER(Tap))

# enum ds4ref_tap_kind, in order.
TAP_F32, TAP_I32, TAP_F64 = 0, 1, 2


class DiffOptions(ctypes.Structure):
    _fields_ = [("case_id", ctypes.c_char_p), ("all_steps", ctypes.c_int),
                ("json", ctypes.c_int), ("quiet", ctypes.c_int),
                ("max_dlogprob", ctypes.c_double), ("min_top1", ctypes.c_double),
                ("min_top5_overlap", ctypes.c_double), ("min_top20_overlap", ctypes.c_double),
                ("max_kl", ctypes.c_double), ("exact", ctypes.c_int),
                ("ignore_model", ctypes.c_int)]


class DiffResultStruct(ctypes.Structure):
    _fields_ = [("violations", ctypes.c_uint32), ("exact", ctypes.c_int),
                ("prompt_differs", ctypes.c_int), ("first_divergence", ctypes.c_int64),
                ("n_steps_a", ctypes.c_uint32), ("n_steps_b", ctypes.c_uint32),
                ("n_compared", ctypes.c_uint32), ("top1", ctypes.c_double),
                ("max_dlogprob", ctypes.c_double), ("max_kl", ctypes.c_double)]


class GoldenModelStruct(ctypes.Structure):
    _fields_ = [("file", ctypes.c_char_p), ("size", ctypes.c_uint64),
                ("metadata_sha256", ctypes.c_uint8 * 32),
                ("tensor_data_sha256", ctypes.c_uint8 * 32)]


class GoldenStepStruct(ctypes.Structure):
    _fields_ = [("id", ctypes.c_int32), ("logit", ctypes.c_float),
                ("logprob", ctypes.c_double), ("bytes", ctypes.c_void_p),
                ("n_bytes", ctypes.c_uint32), ("logits_sha256", ctypes.c_uint8 * 32),
                ("n_top", ctypes.c_uint32), ("top", ctypes.c_void_p)]


class GoldenStruct(ctypes.Structure):
    _fields_ = [("version", ctypes.c_char_p), ("model", GoldenModelStruct),
                ("has_mtp", ctypes.c_int), ("mtp", GoldenModelStruct),
                ("qat", ctypes.c_int), ("ctx", ctypes.c_uint32), ("chunk", ctypes.c_uint32),
                ("top_k", ctypes.c_uint32), ("max_steps", ctypes.c_uint32),
                ("mtp_draft", ctypes.c_uint32), ("stop_at_eos", ctypes.c_int),
                ("n_prompt", ctypes.c_uint32), ("prompt", ctypes.c_void_p),
                ("prompt_text", ctypes.c_void_p), ("n_prompt_text", ctypes.c_size_t),
                ("n_steps", ctypes.c_uint32), ("steps", ctypes.POINTER(GoldenStepStruct)),
                ("complete", ctypes.c_int), ("stop", ctypes.c_char_p),
                ("numerics", ctypes.c_char_p)]


# C struct name -> its mirror, for the layout test.
STRUCTS = {
    "ds4ref_error": ErrorStruct,
    "ds4ref_model_options": ModelOptions,
    "ds4ref_model_info": ModelInfoStruct,
    "ds4ref_chat_options": ChatOptions,
    "ds4ref_session_options": SessionOptions,
    "ds4ref_logprob": Logprob,
    "ds4ref_step": Step,
    "ds4ref_spec_stats": SpecStats,
    "ds4ref_generate_options": GenerateOptions,
    "ds4ref_tap": Tap,
    "ds4check_diff_options": DiffOptions,
    "ds4check_diff_result": DiffResultStruct,
    "ds4ref_golden_model": GoldenModelStruct,
    "ds4ref_golden_step": GoldenStepStruct,
    "ds4ref_golden": GoldenStruct,
}

# --------------------------------------------------------------- prototypes

_p = ctypes.c_void_p
_err = ctypes.POINTER(ErrorStruct)
_u32, _i32, _u64, _size = ctypes.c_uint32, ctypes.c_int32, ctypes.c_uint64, ctypes.c_size_t

# name: (restype, argtypes).  Handles (models, sessions) travel as void *.
_PROTOTYPES = {
    "ds4ref_status_name": (ctypes.c_char_p, [ctypes.c_int]),
    "ds4ref_version": (ctypes.c_char_p, []),
    "ds4ref_free": (None, [_p]),
    "ds4ref_set_threads": (None, [ctypes.c_int]),
    "ds4ref_model_options_init": (None, [ctypes.POINTER(ModelOptions)]),
    "ds4ref_model_open": (ctypes.c_int, [ctypes.POINTER(ModelOptions), ctypes.POINTER(_p), _err]),
    "ds4ref_model_close": (None, [_p]),
    "ds4ref_model_get_info": (None, [_p, ctypes.POINTER(ModelInfoStruct)]),
    "ds4ref_tensor_f32": (ctypes.c_int, [_p, ctypes.c_char_p, ctypes.POINTER(_p),
                                         ctypes.POINTER(_u64 * 4), _err]),
    "ds4ref_tokenize": (ctypes.c_int, [_p, ctypes.c_char_p, _size, ctypes.c_uint,
                                       ctypes.POINTER(_p), ctypes.POINTER(_size), _err]),
    "ds4ref_detokenize": (ctypes.c_int, [_p, _p, _size, ctypes.POINTER(_p),
                                         ctypes.POINTER(_size), _err]),
    "ds4ref_chat_prompt": (ctypes.c_int, [_p, ctypes.c_char_p, _size, ctypes.POINTER(ChatOptions),
                                          ctypes.POINTER(_p), ctypes.POINTER(_size), _err]),
    "ds4ref_session_new": (ctypes.c_int, [_p, ctypes.POINTER(SessionOptions), ctypes.POINTER(_p),
                                          _err]),
    "ds4ref_session_free": (None, [_p]),
    "ds4ref_session_pos": (_u32, [_p]),
    "ds4ref_session_eval": (ctypes.c_int, [_p, _p, _size, _p, _err]),
    "ds4ref_session_truncate": (ctypes.c_int, [_p, _u32, _err]),
    "ds4ref_session_logits": (ctypes.c_int, [_p, _u32, _p, _err]),
    "ds4ref_session_top_logprobs": (ctypes.c_int, [_p, _u32, _u32, _p, ctypes.POINTER(_u32),
                                                   _err]),
    "ds4ref_generate_options_init": (None, [ctypes.POINTER(GenerateOptions)]),
    "ds4ref_generate": (ctypes.c_int, [_p, _p, _size, ctypes.POINTER(GenerateOptions), StepFn,
                                       _p, _err]),
    "ds4ref_set_tap": (None, [_p, TapFn, _p]),
    "ds4ref_golden_read": (ctypes.c_int, [ctypes.c_char_p, ctypes.POINTER(ctypes.POINTER(GoldenStruct)),
                                          _err]),
    "ds4ref_golden_free": (None, [ctypes.POINTER(GoldenStruct)]),
}

# The checking library's (libds4check, include/ds4check.h).
_CHECK_PROTOTYPES = {
    "ds4check_diff_options_init": (None, [ctypes.POINTER(DiffOptions)]),
    "ds4check_diff_files": (ctypes.c_int, [ctypes.c_char_p, ctypes.c_char_p,
                                           ctypes.POINTER(DiffOptions), _p,
                                           ctypes.POINTER(DiffResultStruct), _err]),
}

# ------------------------------------------------------------------ loading

_lock = threading.Lock()
_loaded = None
_check_loaded = None
path = None    # where the library was loaded from, once it is
default_threads = None   # OpenMP's thread count for a thread that set none


def _candidates(name="ds4ref", env_var="DS4REF_LIB"):
    """(how it was found, what to dlopen) in the order they are tried: the
    environment variable alone when it is set (a wrong path should fail, not
    quietly load another build); otherwise the build tree this package sits
    in (python/ds4ref/ -> build/libNAME.so), then the system loader, then
    make install's ~/.local and /usr/local."""
    env = os.environ.get(env_var)
    if env:
        return [(env_var, env)]
    in_tree = pathlib.Path(__file__).resolve().parent.parent.parent / "build" / f"lib{name}.so"
    found = [("build tree", str(in_tree))] if in_tree.is_file() else []
    # The soname make install gives it; the system loader searches
    # LD_LIBRARY_PATH and the ld.so cache.  Then the lib/ folders of the
    # prefixes the README installs to, which the loader does not search
    # (~/.local) or knows only once ldconfig has run (/usr/local): a package
    # pip installed into a virtual environment finds such an install.
    found.append(("system loader", f"lib{name}.so.1"))
    for prefix in (pathlib.Path.home() / ".local", pathlib.Path("/usr/local")):
        lib = prefix / "lib" / f"lib{name}.so.1"
        if lib.is_file():
            found.append((f"make install into {prefix}", str(lib)))
    return found


def _open(name, env_var, prototypes):
    """The first candidate that loads, with its prototypes declared, and
    where it came from."""
    tried = []
    for how, where in _candidates(name, env_var):
        try:
            # ctypes.CDLL (not PyDLL) releases the GIL during every call.
            handle = ctypes.CDLL(where)
        except OSError as e:
            tried.append(f"{how}: {e}")
            continue
        for fn, (res, args) in prototypes.items():
            f = getattr(handle, fn)
            f.restype, f.argtypes = res, args
        return handle, where
    raise Error(Status.E_IO, f"lib{name} not found (" + "; ".join(tried) +
                f"): build it with make, install it with make install, or set "
                f"{env_var} to the path of lib{name}.so")


def _openmp_default(handle: ctypes.CDLL) -> int:
    """The thread count OpenMP gives a thread that never chose one
    (OMP_NUM_THREADS, else the CPUs available).  OpenMP keeps the setting
    per thread, so it is asked from a new one.  omp_get_max_threads is
    found through libds4ref's dependency on the OpenMP runtime."""
    f = handle.omp_get_max_threads
    f.restype, f.argtypes = ctypes.c_int, []
    out = []
    t = threading.Thread(target=lambda: out.append(f()))
    t.start()
    t.join()
    return out[0]


def lib() -> ctypes.CDLL:
    """The loaded library, with its prototypes declared (loaded on first use,
    so that importing ds4ref never fails)."""
    global _loaded, path, default_threads
    with _lock:
        if _loaded is not None:
            return _loaded
        # The OpenMP runtime reads its wait policy once, when the library
        # loads it: the short spin ds4ref's programs use (programs/wait_policy.h)
        # unless the user chose one.
        if not any(v in os.environ for v in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME")):
            os.environ["GOMP_SPINCOUNT"] = "10000"
            os.environ["KMP_BLOCKTIME"] = "1"
        handle, where = _open("ds4ref", "DS4REF_LIB", _PROTOTYPES)
        default_threads = _openmp_default(handle)
        _loaded, path = handle, where
        return handle


def check_lib() -> ctypes.CDLL:
    """The checking library (diffing), loaded on first use like lib().  It
    carries the parts of the model it uses and takes paths, so no handle of
    lib() ever reaches it."""
    global _check_loaded
    lib()    # the wait policy, set before any OpenMP runtime loads
    with _lock:
        if _check_loaded is None:
            _check_loaded, _ = _open("ds4check", "DS4CHECK_LIB", _CHECK_PROTOTYPES)
        return _check_loaded


def call(fn, *args) -> None:
    """fn(*args, &err); a non-zero status becomes Error."""
    err = ErrorStruct()
    rc = fn(*args, ctypes.byref(err))
    if rc:
        raise Error(rc, err.message.decode("utf-8", "replace"))


def call_back(failure: list, fn, *args) -> None:
    """call(fn, *args) for a call that runs Python callbacks.  An exception
    cannot cross the C frames, so a callback keeps the first one in failure
    (and may stop the call); it is raised here, in place of any error of
    the library it caused."""
    try:
        call(fn, *args)
    except Error:
        if not failure:
            raise
    if failure:
        raise failure[0]


def take(ptr: int, nbytes: int) -> bytes:
    """The nbytes at ptr as Python bytes, then ds4ref_free(ptr)."""
    try:
        return ctypes.string_at(ptr, nbytes) if nbytes else b""
    finally:
        lib().ds4ref_free(ptr)


def take_array(ptr: int, dtype, count: int) -> np.ndarray:
    """count elements at ptr copied once into a new NumPy array, then
    ds4ref_free(ptr) (a tensor of the real model can be gigabytes)."""
    try:
        out = np.empty(count, dtype)
        ctypes.memmove(out.ctypes.data, ptr, out.nbytes)
        return out
    finally:
        lib().ds4ref_free(ptr)


def fsencode(path, what: str) -> bytes:
    """A path argument as the bytes C gets; a NUL byte would end it early in
    C, opening another file, so it is refused."""
    try:
        data = os.fsencode(path)
    except TypeError:
        raise Error(Status.E_ARG, f"{what}: expected a path, got {type(path).__name__}") from None
    if b"\0" in data:
        raise Error(Status.E_ARG, f"{what}: {path!r} contains a NUL byte")
    return data
