"""Every failure raises ds4ref.Error with the library's code and a message
that names what was wrong; a failed call leaves sessions as they were."""
import os

import numpy as np
import pytest

import ds4ref
from conftest import ROOT, TINY, VECTORS


def fails(code, fn, *args, **kw) -> str:
    """fn(*args, **kw) must raise Error with this code; its message."""
    with pytest.raises(ds4ref.Error) as e:
        fn(*args, **kw)
    assert e.value.code == code, e.value
    assert str(e.value) == f"DS4REF_{code.name}: {e.value.message}"
    assert e.value.name == f"DS4REF_{code.name}"
    return e.value.message


def test_opening_bad_files(tmp_path):
    missing = tmp_path / "none.gguf"
    assert str(missing) in fails(ds4ref.Status.E_IO, ds4ref.Model, missing)
    assert str(missing) in fails(ds4ref.Status.E_IO, ds4ref.Model, TINY, mtp=missing)
    not_gguf = ROOT / "README.md"
    assert str(not_gguf) in fails(ds4ref.Status.E_FORMAT, ds4ref.Model, not_gguf)
    fails(ds4ref.Status.E_ARG, ds4ref.Model, 42)


def test_bad_token_ids_leave_the_session_unchanged(model):
    V = model.info.n_vocab
    with model.session() as s:
        before = s.eval([1, 2, 3])
        assert "vocabulary" in fails(ds4ref.Status.E_RANGE, s.eval, [4, V])
        fails(ds4ref.Status.E_RANGE, s.eval, [-1])
        assert "int32" in fails(ds4ref.Status.E_RANGE, s.eval, [2**40])
        fails(ds4ref.Status.E_ARG, s.eval, [[1, 2]])
        fails(ds4ref.Status.E_ARG, s.eval, [1.5])
        fails(ds4ref.Status.E_ARG, s.eval, "12")
        assert s.pos == 3
        assert s.logits(2).tobytes() == before[2].tobytes()


def test_positions_and_context_out_of_range(model):
    with model.session(ctx=4) as s:
        assert "context" in fails(ds4ref.Status.E_RANGE, s.eval, [1, 2, 3, 4, 5])
        s.eval([1, 2, 3, 4])
        fails(ds4ref.Status.E_RANGE, s.eval, [5])
        assert "evaluated" in fails(ds4ref.Status.E_RANGE, s.logits, 4)
        fails(ds4ref.Status.E_RANGE, s.top_logprobs, 4, 5)
        fails(ds4ref.Status.E_RANGE, s.truncate, 5)
        fails(ds4ref.Status.E_RANGE, s.truncate, -1)
        fails(ds4ref.Status.E_RANGE, s.logits, 2**32)
        assert s.pos == 4


def test_arguments_the_library_refuses(model):
    ids = model.chat("hi")
    with ds4ref.Model(TINY) as plain:
        assert "MTP" in fails(ds4ref.Status.E_ARG, plain.generate, ids, 4, draft=2)
    assert "nope" in fails(ds4ref.Status.E_ARG, model.tensor, "nope")
    fails(ds4ref.Status.E_ARG, model.tokenize, 3)
    fails(ds4ref.Status.E_RANGE, model.generate, ids, 4, seed=-1)
    fails(ds4ref.Status.E_ARG, model.session, ctx=1.5)
    assert "low is 0731's" in fails(ds4ref.Status.E_ARG, model.chat, "hi", reasoning_effort="low")
    assert "medium" in fails(ds4ref.Status.E_ARG, model.chat, "hi", reasoning_effort="medium",
                             release="0731")
    assert "0732" in fails(ds4ref.Status.E_ARG, model.chat, "hi", release="0732")
    # 0731's "high" is the first release's "max" text.
    assert list(model.chat("hi", reasoning_effort="high", release="0731")) == \
        list(model.chat("hi", think_max=True))


def test_arguments_of_the_wrong_type_or_form(model):
    # Refused where they enter the package, as DS4REF_E_ARG naming the
    # argument: not as the AttributeError, TypeError or ValueError of a
    # conversion, nor cut short at a NUL byte by C.
    arg = ds4ref.Status.E_ARG
    golden = VECTORS / "tiny-ds4-qaton-capital.jsonl"
    ids = model.chat("hi")
    assert fails(arg, ds4ref.diff, golden, golden, case=5).startswith("case:")
    assert fails(arg, ds4ref.diff, golden, golden, case="a\0b").startswith("case:")
    assert fails(arg, ds4ref.diff, golden, golden, max_kl="x").startswith("max_kl:")
    assert fails(arg, ds4ref.diff, golden, golden, min_top1=[1]).startswith("min_top1:")
    assert fails(arg, model.taps, ids, names=5).startswith("names:")
    assert fails(arg, model.taps, ids, names="hc_ffn").startswith("names:")
    assert fails(arg, model.taps, ids, names=["hc_ffn", "nope"]).startswith("names:")
    assert fails(arg, model.generate, ids, 2, temp="0.5").startswith("temp:")
    assert fails(arg, model.generate, [[1], [2, 3]], 2).startswith("prompt_ids:")
    assert fails(arg, model.detokenize, [[1], [2, 3]]).startswith("ids:")
    assert fails(arg, model.tensor, "output.weight\0x").startswith("name:")
    assert fails(arg, ds4ref.Model, f"{TINY}\0junk").startswith("path:")


def test_the_callers_own_exceptions_propagate(model):
    class Path(os.PathLike):
        def __fspath__(self):
            raise KeyError("the caller's own")

    def names():
        yield "hc_ffn"
        raise KeyError("the caller's own")

    with pytest.raises(KeyError):
        ds4ref.Model(Path())
    with pytest.raises(KeyError):
        model.taps(model.chat("hi"), names=names())


def test_closed_sessions_and_models_refuse_calls():
    m = ds4ref.Model(TINY)
    s, t = m.session(), m.session()
    s.close()
    s.close()    # idempotent
    assert "closed" in fails(ds4ref.Status.E_ARG, s.eval, [1])
    m.close()    # closes t too
    assert "closed" in fails(ds4ref.Status.E_ARG, t.eval, [1])
    assert "closed" in fails(ds4ref.Status.E_ARG, m.session)
    assert "closed" in fails(ds4ref.Status.E_ARG, m.chat, "hi")
    m.close()


def test_an_unknown_code_still_makes_an_error():
    e = ds4ref.Error(99, "from a newer library")
    assert e.code == 99 and e.name == "DS4REF_E_UNKNOWN" and "newer" in str(e)
