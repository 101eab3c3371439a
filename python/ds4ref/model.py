"""Models, sessions, generation and taps over the C API (include/ds4ref.h).

Everything a call returns is a copy owned by Python: logits, tokens, tensors
and tap values are copied out of C memory before the call returns, and every
buffer the library allocated for us is released with ds4ref_free at once.
Models and sessions hold a C handle that close() (or the end of a `with`
block, or garbage collection) releases exactly once.
"""
from __future__ import annotations

import collections.abc
import ctypes
import dataclasses
import threading
import weakref

import numpy as np

from . import _lib
from ._lib import Error, Status

# ds4ref_logprob as a NumPy record: top_logprobs() and the `top` arrays of
# generations and goldens have this dtype, fields "id", "logit", "logprob".
# align=True gives the C layout, so C can write into such an array directly.
LOGPROB = np.dtype([("id", np.int32), ("logit", np.float32), ("logprob", np.float64)],
                   align=True)

# DS4REF_DEFAULT_SYSTEM: the system prompt of `ds4ref -p`.
DEFAULT_SYSTEM = "You are a helpful assistant"

# The taps include/ds4ref.h documents.  Those of FIXED_TAPS report one
# vector of the same width for every token of every layer that has them; the
# others report variable lengths (indexer_sel, indexer_scores) or only at some
# positions (comp_row, idx_row: where a compression window completes).
FIXED_TAPS = ("hc_attn", "hc_ffn", "attn_out", "ffn_out", "experts", "expert_weights",
              "expert_scores")
TAP_NAMES = FIXED_TAPS + ("indexer_scores", "indexer_sel", "comp_row", "idx_row")
_TAP_DTYPES = {_lib.TAP_F32: np.float32, _lib.TAP_I32: np.int32, _lib.TAP_F64: np.float64}

def _u32(value, what: str, bits: int = 32) -> int:
    """An unsigned argument of 32 (or `bits`) bits; ctypes would silently
    wrap a negative or larger value."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise Error(Status.E_ARG, f"{what}: expected an integer, got {type(value).__name__}")
    if not 0 <= value < 2**bits:
        raise Error(Status.E_RANGE, f"{what}: {value} is outside [0, 2**{bits})")
    return int(value)


def _number(value, what: str) -> float:
    """A real-valued argument (not a bool, not a string of digits)."""
    if isinstance(value, (bool, np.bool_)) or \
            not isinstance(value, (int, float, np.integer, np.floating)):
        raise Error(Status.E_ARG, f"{what}: expected a number, got {type(value).__name__}")
    return float(value)


def _token_ids(ids, what: str = "ids") -> np.ndarray:
    """ids as a contiguous int32 vector, checked before any narrowing: an id
    that does not fit in int32 is refused here, one outside the vocabulary by
    the library."""
    try:
        a = np.asarray(ids)
    except (ValueError, TypeError):     # a ragged nesting, for one
        raise Error(Status.E_ARG, f"{what}: expected a 1-D sequence of token ids, got a "
                                  f"{type(ids).__name__} NumPy cannot make an array of") from None
    if a.ndim != 1:
        raise Error(Status.E_ARG, f"{what}: expected a 1-D sequence of token ids, got shape {a.shape}")
    if a.size == 0:
        return np.zeros(0, np.int32)
    if a.dtype.kind not in "iu":
        raise Error(Status.E_ARG, f"{what}: expected integer token ids, got {a.dtype}")
    bad = np.flatnonzero((a < -2**31) | (a > 2**31 - 1))
    if bad.size:
        i = int(bad[0])
        raise Error(Status.E_RANGE, f"{what}: token id {a[i]} at index {i} does not fit in int32")
    return np.ascontiguousarray(a, dtype=np.int32)


def _ptr(a: np.ndarray) -> int:
    return a.ctypes.data


def _spec_value(v):
    """A counter of ds4ref_spec_stats, or a per-position array of them as a list."""
    return list(v) if isinstance(v, ctypes.Array) else v


def _padded_top(rows: list, width: int) -> np.ndarray:
    """Per-step alternative lists as one [n_steps, width] LOGPROB array; a
    step with fewer entries is padded with id -1 and NaN scores."""
    top = np.zeros((len(rows), width), LOGPROB)
    top["id"], top["logit"], top["logprob"] = -1, np.nan, np.nan
    for i, r in enumerate(rows):
        top[i, :len(r)] = r
    return top


@dataclasses.dataclass(frozen=True)
class ModelInfo:
    """ds4ref_model_info: the model's dimensions; bos/eos are -1 without a
    tokenizer."""

    n_layer: int
    n_embd: int
    n_vocab: int
    n_head: int
    head_dim: int
    n_hc: int
    n_expert: int
    n_expert_used: int
    context_length: int
    has_mtp: bool
    has_tokenizer: bool
    bos: int
    eos: int


@dataclasses.dataclass(eq=False)
class Generation:
    """What Model.generate produced, one entry per generated token: the
    token, its bytes, its logit and logprob (logit - logsumexp, in double),
    the SHA-256 of the whole logits vector it was chosen from (the golden
    digest) and the alternatives (`top`, LOGPROB [n, k], by logit
    descending then id ascending).  `spec` counts the speculative passes
    (all zero without drafting)."""

    tokens: np.ndarray
    token_bytes: list
    logits: np.ndarray
    logprobs: np.ndarray
    digests: list
    top: np.ndarray
    spec: dict


class Model:
    """A DeepSeek V4 Flash GGUF opened with ds4ref (ds4ref_model_open).

    mtp: the MTP head GGUF (needed for generate(draft=...)).  threads: the
    OpenMP threads of every call on this model, `self.threads` (None:
    ds4ref's choice, ds4ref_set_threads(0): OMP_NUM_THREADS, else every CPU,
    or on a machine of more than 16 the count its passes measure fastest;
    `self.threads` is then OpenMP's default count, the most it uses).  The
    thread count never changes a bit, but one model must always run with
    the same one: the library sizes some per-thread scratch with the count
    of an earlier call, and a later call with more threads would overrun
    it.  OpenMP keeps the count per calling thread, so it is set again
    (ds4ref_set_threads) before every call, whichever thread makes it.
    qat: the official FP8 KV / FP4 indexer simulation (on by default).
    numerics: a numerics profile (ds4ref_model_options.numerics; None: official).

    One model's calls never run concurrently: the library forbids it, so
    calls from several Python threads take turns on a lock.  Use it as a
    context manager, or call close(); garbage collection closes it too.
    """

    def __init__(self, path, mtp=None, threads=None, qat=True, numerics=None):
        lib = _lib.lib()
        self._handle = None
        self.threads = _lib.default_threads if threads is None else _u32(threads, "threads")
        # What ds4ref_set_threads gets before every call: 0 lets ds4ref choose.
        self._set_threads = 0 if threads is None else self.threads
        if self.threads < 1:
            raise Error(Status.E_RANGE, f"threads: expected at least 1, got {self.threads}")
        # Reentrant: a session dropped by the garbage collector while this
        # thread is inside a call on the same model frees itself through the
        # same lock.
        self._lock = threading.RLock()
        self._sessions = weakref.WeakSet()
        self._close = lib.ds4ref_model_close
        opts = _lib.ModelOptions()
        lib.ds4ref_model_options_init(ctypes.byref(opts))
        opts.path = _lib.fsencode(path, "path")
        opts.mtp_path = None if mtp is None else _lib.fsencode(mtp, "mtp")
        opts.qat = 1 if qat else 0
        # A numerics profile: another engine's intended rounding, reproduced
        # exactly ("ggml-act", "ds4-act", "f16-kv", "ds4" or a comma list;
        # "jitter" adds one ulp of noise to every product's output).
        opts.numerics = None if numerics is None else str(numerics).encode("utf-8")
        handle = ctypes.c_void_p()
        lib.ds4ref_set_threads(self._set_threads)
        _lib.call(lib.ds4ref_model_open, ctypes.byref(opts), ctypes.byref(handle))
        self._handle = handle.value
        raw = _lib.ModelInfoStruct()
        lib.ds4ref_model_get_info(self._handle, ctypes.byref(raw))
        fields = {name: getattr(raw, name) for name, _ in raw._fields_}
        fields["has_mtp"], fields["has_tokenizer"] = bool(raw.has_mtp), bool(raw.has_tokenizer)
        self.info = ModelInfo(**fields)

    # ------------------------------------------------------------ lifetime

    def close(self) -> None:
        """Close the model and every session still open on it; idempotent."""
        with self._lock:
            for s in list(self._sessions):
                s.close()
            if self._handle is not None:
                self._close(self._handle)
                self._handle = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        # A failed __init__ leaves no handle behind.
        if getattr(self, "_handle", None) is not None:
            self.close()

    def _calling(self):
        """The lock for one call into the library, with the model's thread
        count applied in this thread; raises Error when the model is closed."""
        return _Call(self)

    # ------------------------------------------------------------ text

    def tokenize(self, text, special: bool = False) -> np.ndarray:
        """Token ids of text (str as UTF-8, or bytes), no BOS added.
        special: recognise special-token strings in the text."""
        data = _text(text, "text")
        ptr, n = ctypes.c_void_p(), ctypes.c_size_t()
        flags = 1 if special else 0   # DS4REF_TOKENIZE_SPECIAL
        with self._calling() as h:
            _lib.call(_lib.lib().ds4ref_tokenize, h, data, len(data), flags,
                      ctypes.byref(ptr), ctypes.byref(n))
        return _lib.take_array(ptr.value, np.int32, n.value)

    def detokenize(self, ids) -> bytes:
        """The bytes of a token sequence."""
        a = _token_ids(ids)
        ptr, n = ctypes.c_void_p(), ctypes.c_size_t()
        with self._calling() as h:
            _lib.call(_lib.lib().ds4ref_detokenize, h, _ptr(a), a.size, ctypes.byref(ptr),
                      ctypes.byref(n))
        return _lib.take(ptr.value, n.value)

    def chat(self, prompt, system=DEFAULT_SYSTEM, think: bool = True,
             think_max: bool = False, reasoning_effort=None,
             release: str = "v4") -> np.ndarray:
        """A one-user-turn prompt rendered with the official chat template and
        tokenized: the ids `ds4ref -p PROMPT` evaluates with the same -sys,
        --think/--nothink/--think-max, --reasoning-effort and --chat-release.
        system=None renders no system turn; "" is an empty one (ds4ref -sys
        "").  reasoning_effort is "low", "high" or "max" (None: the release's
        default); release "v4" (DeepSeek-V4-Flash) or "0731" (-0731's
        encoder).  A prompt that starts with the BOS string is taken as
        already rendered."""
        data = _text(prompt, "prompt")
        opts = _lib.ChatOptions()
        if system is not None:
            sys_data = _text(system, "system")
            opts.system, opts.system_len = sys_data, len(sys_data)
        opts.thinking, opts.think_max = int(bool(think)), int(bool(think_max))
        releases = {"v4": 0, "0731": 1}
        if release not in releases:
            raise Error(Status.E_ARG, f"release {release!r}: expected 'v4' or '0731'")
        opts.release = releases[release]
        if reasoning_effort is not None:
            opts.reasoning_effort = _cstr(reasoning_effort, "reasoning_effort")
        ptr, n = ctypes.c_void_p(), ctypes.c_size_t()
        with self._calling() as h:
            _lib.call(_lib.lib().ds4ref_chat_prompt, h, data, len(data), ctypes.byref(opts),
                      ctypes.byref(ptr), ctypes.byref(n))
        return _lib.take_array(ptr.value, np.int32, n.value)

    # ------------------------------------------------------------ weights

    def tensor(self, name: str) -> np.ndarray:
        """A weight tensor (GGUF name; the MTP file's are mtp.0.*) dequantized
        exactly to float32, in NumPy order: GGUF's ne[0] is the last axis,
        so a matrix [ne0=n_in, ne1=n_out] comes back as (n_out, n_in) with
        one output row per index.  Trailing dimensions of size 1 are
        dropped."""
        ptr, ne = ctypes.c_void_p(), (ctypes.c_uint64 * 4)()
        with self._calling() as h:
            _lib.call(_lib.lib().ds4ref_tensor_f32, h, _cstr(name, "name"), ctypes.byref(ptr),
                      ctypes.byref(ne))
        dims = list(ne)
        while len(dims) > 1 and dims[-1] == 1:
            dims.pop()
        return _lib.take_array(ptr.value, np.float32, int(np.prod(dims))).reshape(dims[::-1])

    # ------------------------------------------------------------ evaluation

    def session(self, ctx=None, chunk=None) -> "Session":
        """A new session (ds4ref_session_new).  ctx: positions available
        (None: the model's context, at most 32768); chunk: tokens per forward
        pass (None: 256; never changes a bit)."""
        return Session(self, ctx, chunk)

    def generate(self, prompt_ids, n: int, draft: int = 0, temp: float = 0.0, seed: int = 0,
                 top_k: int = 20, stop_at_eos: bool = True, ctx=None, golden=None) -> Generation:
        """Evaluate prompt_ids on a fresh session and generate up to n tokens
        (ds4ref_generate): greedy by default, speculative with draft > 0 (the
        model must have been opened with mtp=; bit-identical to greedy),
        sampled with temp > 0 from seed (any 64-bit value, as `ds4ref --seed`;
        the command line's default is 1, so seed=1 matches a `ds4ref --temp`
        run without --seed).  top_k alternatives are recorded per step (the C
        step callback carries at most 64).  ctx: the session's context (None:
        the prompt plus n).  golden: also write the golden stream to this
        path (greedy only), as ds4ref --golden-out does."""
        lib = _lib.lib()
        prompt = _token_ids(prompt_ids, "prompt_ids")
        opts = _lib.GenerateOptions()
        lib.ds4ref_generate_options_init(ctypes.byref(opts))
        opts.n_tokens = _u32(n, "n")
        opts.top_k = _u32(top_k, "top_k")
        opts.stop_at_eos = int(bool(stop_at_eos))
        opts.temperature = _number(temp, "temp")
        opts.seed = _u32(seed, "seed", bits=64)
        opts.mtp_draft = _u32(draft, "draft")
        opts.golden_path = None if golden is None else _lib.fsencode(golden, "golden")
        stats = _lib.SpecStats()
        opts.stats = ctypes.pointer(stats)
        steps, failure = [], []

        def on_step(_ud, p):
            try:
                st = p.contents
                top = np.frombuffer(ctypes.string_at(st.top, st.n_top * LOGPROB.itemsize), LOGPROB)
                steps.append((st.id, ctypes.string_at(st.bytes, st.n_bytes), st.logit,
                              st.logprob, ctypes.string_at(st.logits_sha256, 32), top))
                return 0
            except BaseException as e:
                failure.append(e)
                return 1       # stop generating

        callback = _lib.StepFn(on_step)
        if ctx is None:
            ctx = max(1, prompt.size + opts.n_tokens)
        with self.session(ctx=ctx) as s, self._calling():
            _lib.call_back(failure, lib.ds4ref_generate, s._live(), _ptr(prompt), prompt.size,
                           ctypes.byref(opts), callback, None)
        width = max((len(st[5]) for st in steps), default=0)
        return Generation(
            tokens=np.array([st[0] for st in steps], np.int32),
            token_bytes=[st[1] for st in steps],
            logits=np.array([st[2] for st in steps], np.float32),
            logprobs=np.array([st[3] for st in steps], np.float64),
            digests=[st[4] for st in steps],
            top=_padded_top([st[5] for st in steps], width),
            spec={name: _spec_value(getattr(stats, name)) for name, _ in stats._fields_})

    def taps(self, ids, names=None, ctx=None) -> dict:
        """Evaluate ids on a fresh session (positions 0..len-1) with the debug
        tap installed (ds4ref_set_tap) and return what it reported, copied:
        result[name][layer] for each name asked for (default: all of
        TAP_NAMES) and each layer that reported it.

        For the taps of FIXED_TAPS (HC states, sublayer outputs, experts and
        their weights and scores) result[name][layer] is an array
        [len(ids), width], row i for position i.  For the others it is a list
        with one entry per position: the array reported there (indexer_sel:
        the compressed entries attended, ascending), or None where that
        position reported nothing (comp_row/idx_row outside window ends,
        indexer_scores while the indexer need not choose)."""
        lib = _lib.lib()
        a = _token_ids(ids)
        if names is None:
            wanted = TAP_NAMES
        elif isinstance(names, (str, bytes)) or not isinstance(names, collections.abc.Iterable):
            raise Error(Status.E_ARG, f"names: expected a list of tap names, got {type(names).__name__}")
        else:
            wanted = tuple(names)
        for name in wanted:
            if not isinstance(name, str) or name not in TAP_NAMES:
                raise Error(Status.E_ARG, f"names: no tap named {name!r} (taps: {', '.join(TAP_NAMES)})")
        keys = {name.encode(): name for name in wanted}
        got = {name: {} for name in wanted}   # name -> layer -> pos -> array
        failure = []

        def on_tap(_ud, p):
            try:
                t = p.contents
                name = keys.get(t.name)
                if name is None:
                    return
                v = np.empty(t.n, _TAP_DTYPES[t.kind])
                ctypes.memmove(_ptr(v), t.data, v.nbytes)
                got[name].setdefault(t.layer, {})[t.pos] = v
            except BaseException as e:
                failure.append(e)

        callback = _lib.TapFn(on_tap)
        with self.session(ctx=max(1, a.size) if ctx is None else ctx) as s, \
                self._calling() as h:
            lib.ds4ref_set_tap(h, callback, None)
            try:
                _lib.call_back(failure, lib.ds4ref_session_eval, s._live(), _ptr(a), a.size, None)
            finally:
                lib.ds4ref_set_tap(h, _lib.TapFn(), None)   # TapFn(): NULL, removes it
        out = {}
        for name, layers in got.items():
            out[name] = {}
            for layer, by_pos in sorted(layers.items()):
                rows = [by_pos.get(i) for i in range(a.size)]
                if name in FIXED_TAPS:
                    if any(r is None for r in rows):
                        raise Error(Status.E_INTERNAL,
                                    f"taps: {name} of layer {layer} is missing at some positions")
                    out[name][layer] = np.stack(rows)
                else:
                    out[name][layer] = rows
        return out


class _Call:
    """Model._calling(): a `with` block that holds the model's lock, applies
    its thread count and yields the live handle."""

    def __init__(self, model: Model):
        self.model = model

    def __enter__(self):
        m = self.model
        m._lock.acquire()
        if m._handle is None:
            m._lock.release()
            raise Error(Status.E_ARG, "the model is closed")
        _lib.lib().ds4ref_set_threads(m._set_threads)
        return m._handle

    def __exit__(self, *exc):
        self.model._lock.release()


class Session:
    """One sequence evaluated on a model (ds4ref_session): append tokens,
    go back, read the logits of any evaluated position.  Close it, use it as
    a context manager, or let garbage collection close it; closing the model
    closes it too."""

    def __init__(self, model: Model, ctx=None, chunk=None):
        lib = _lib.lib()
        self._handle = None
        self._model = model      # keeps the model open while this session is
        self._free = lib.ds4ref_session_free
        opts = _lib.SessionOptions()
        opts.ctx = 0 if ctx is None else _u32(ctx, "ctx")
        opts.chunk = 0 if chunk is None else _u32(chunk, "chunk")
        handle = ctypes.c_void_p()
        with model._calling() as h:
            _lib.call(lib.ds4ref_session_new, h, ctypes.byref(opts), ctypes.byref(handle))
            self._handle = handle.value
            model._sessions.add(self)

    def close(self) -> None:
        """Free the session; idempotent."""
        with self._model._lock:
            if self._handle is not None:
                self._free(self._handle)
                self._handle = None
                self._model._sessions.discard(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        if getattr(self, "_handle", None) is not None:
            self.close()

    def _live(self) -> int:
        """The handle, for a call made under the model's lock."""
        if self._handle is None:
            raise Error(Status.E_ARG, "the session is closed")
        return self._handle

    @property
    def pos(self) -> int:
        """Tokens evaluated so far (the next position)."""
        with self._model._calling():
            return _lib.lib().ds4ref_session_pos(self._live())

    def eval(self, ids, logits: bool = True):
        """Append tokens.  Returns their logits, float32 [len(ids), n_vocab]
        (row i: after token i), or None with logits=False (a long prompt's
        logits can be large)."""
        a = _token_ids(ids)
        out = np.empty((a.size, self._model.info.n_vocab), np.float32) if logits else None
        with self._model._calling():
            _lib.call(_lib.lib().ds4ref_session_eval, self._live(), _ptr(a), a.size,
                      None if out is None else _ptr(out))
        return out

    def truncate(self, pos: int) -> None:
        """Go back to position pos (<= self.pos); the state is exactly that of
        a fresh evaluation of the first pos tokens."""
        with self._model._calling():
            _lib.call(_lib.lib().ds4ref_session_truncate, self._live(), _u32(pos, "pos"))

    def logits(self, pos: int) -> np.ndarray:
        """The logits (float32 [n_vocab]) after token pos, for any evaluated
        position (an earlier one is recomputed exactly)."""
        out = np.empty(self._model.info.n_vocab, np.float32)
        with self._model._calling():
            _lib.call(_lib.lib().ds4ref_session_logits, self._live(), _u32(pos, "pos"), _ptr(out))
        return out

    def top_logprobs(self, pos: int, k: int) -> np.ndarray:
        """The k most likely next tokens after position pos, as a LOGPROB
        array (fields id, logit, logprob) by logit descending, ties to the
        lowest id."""
        k = _u32(k, "k")
        out = np.zeros(k, LOGPROB)
        n = ctypes.c_uint32()
        with self._model._calling():
            _lib.call(_lib.lib().ds4ref_session_top_logprobs, self._live(), _u32(pos, "pos"), k,
                      _ptr(out), ctypes.byref(n))
        return out[:n.value].copy()


def _text(text, what: str) -> bytes:
    if isinstance(text, str):
        return text.encode("utf-8")
    if isinstance(text, (bytes, bytearray)):
        return bytes(text)
    raise Error(Status.E_ARG, f"{what}: expected str or bytes, got {type(text).__name__}")


def _cstr(text, what: str) -> bytes:
    """_text for C's NUL-terminated strings (names, ids): a NUL byte would
    cut it short, so it is refused."""
    data = _text(text, what)
    if b"\0" in data:
        raise Error(Status.E_ARG, f"{what}: {text!r} contains a NUL byte")
    return data
