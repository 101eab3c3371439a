"""ds4ref from Python: the CPU reference of DeepSeek V4 Flash inference
(libds4ref, include/ds4ref.h) with logits, debug taps and goldens as NumPy
arrays.

    import ds4ref
    with ds4ref.Model("models/tiny.gguf") as m:
        ids = m.chat("What is the capital of Italy?")
        with m.session() as s:
            logits = s.eval(ids)            # float32 [len(ids), n_vocab]

The library is found through the DS4REF_LIB variable (a path to
libds4ref.so), else in the build tree this package sits in
(python/../build/libds4ref.so), else by the system loader (make install).
Every failure raises ds4ref.Error, with the DS4REF_E_* code and a message, a
bad argument included (DS4REF_E_ARG); an exception of the caller's own code
(a KeyboardInterrupt, an argument's own methods) propagates as it is.
"""
from ._lib import Error, Status
from .golden import DiffResult, Golden, GoldenModel, diff, read_golden
from .model import (DEFAULT_SYSTEM, FIXED_TAPS, LOGPROB, TAP_NAMES, Generation, Model,
                    ModelInfo, Session)


def version() -> str:
    """The version of the loaded libds4ref (ds4ref_version)."""
    from . import _lib
    return _lib.lib().ds4ref_version().decode()


def library_path() -> str:
    """What the library was loaded from (a path, or the soname the system
    loader resolved)."""
    from . import _lib
    _lib.lib()
    return _lib.path


__all__ = ["DEFAULT_SYSTEM", "DiffResult", "Error", "FIXED_TAPS", "Generation", "Golden",
           "GoldenModel", "LOGPROB", "Model", "ModelInfo", "Session", "Status", "TAP_NAMES",
           "diff", "library_path", "read_golden", "version"]
