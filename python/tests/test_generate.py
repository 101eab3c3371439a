"""Model.generate against the committed goldens, the teacher-forced logits,
speculative decoding and the command line's sampler."""
import hashlib

import numpy as np
import pytest

import ds4ref
from ds4ref import model as model_module
from conftest import TINY, VECTORS, run, tool, write_ids


@pytest.fixture(scope="module")
def capital(model):
    """The committed golden of vectors/manifest.txt's first line and its
    prompt, rendered as make_vectors.sh does (-sys "" --nothink)."""
    golden = ds4ref.read_golden(VECTORS / "tiny-ds4-qaton-capital.jsonl")
    ids = model.chat((VECTORS / "prompts" / "capital.txt").read_bytes(), system="", think=False)
    assert ids.tolist() == golden.prompt.tolist()
    return golden, ids


def test_greedy_generation_reproduces_the_committed_golden(model, capital, tmp_path):
    golden, ids = capital
    out = tmp_path / "mine.jsonl"
    gen = model.generate(ids, golden.max_steps, top_k=golden.top_k, stop_at_eos=False, golden=out)
    assert gen.tokens.tolist() == golden.tokens.tolist()
    assert gen.token_bytes == golden.token_bytes
    assert gen.logits.tobytes() == golden.logits.tobytes()
    assert gen.logprobs.tobytes() == golden.logprobs.tobytes()
    assert gen.digests == golden.digests
    assert gen.top.tobytes() == golden.top.tobytes()
    assert gen.spec["proposed"] == 0
    # The golden written on the way is the same stream, as ds4ref-diff sees it.
    d = ds4ref.diff(VECTORS / "tiny-ds4-qaton-capital.jsonl", out, exact=True)
    assert d.passed and d.exact and d.first_divergence is None, d.report


def test_step_digests_are_the_teacher_forced_logits(model):
    prompt = model.chat("Hello")
    gen = model.generate(prompt, 12, stop_at_eos=False)
    with model.session() as s:
        logits = s.eval(np.concatenate([prompt, gen.tokens]))
    for i, digest in enumerate(gen.digests):
        row = logits[prompt.size - 1 + i]
        assert hashlib.sha256(row.astype("<f4").tobytes()).digest() == digest
        assert gen.tokens[i] == int(np.argmax(row))    # greedy, first maximum


def test_speculative_decoding_with_the_mtp_head_is_greedy(model, capital):
    golden, ids = capital
    gen = model.generate(ids, 40, draft=2, top_k=golden.top_k, stop_at_eos=False)
    assert gen.spec["proposed"] > 0
    assert gen.tokens.tolist() == golden.tokens[:40].tolist()
    assert gen.logprobs.tobytes() == golden.logprobs[:40].tobytes()
    assert gen.top.tobytes() == golden.top[:40].tobytes()


def test_sampling_matches_the_command_line(model, tmp_path):
    ids = model.chat("Tell me a joke")
    ids_file = write_ids(tmp_path / "ids.txt", ids)
    cli = run(tool("ds4ref"), "-m", TINY, "--tokens-file", ids_file, "-n", "12", "--temp", "0.8",
              "--seed", "3", "--ignore-eos").stdout
    gen = model.generate(ids, 12, temp=0.8, seed=3, stop_at_eos=False)
    # ds4ref prints the tokens' bytes and a final newline.
    assert b"".join(gen.token_bytes) + b"\n" == cli
    other = model.generate(ids, 12, temp=0.8, seed=4, stop_at_eos=False)
    assert other.tokens.tolist() != gen.tokens.tolist()


def test_the_default_seed_is_0(model, tmp_path):
    # The signature; the command line's --seed defaults to 1.
    ids = model.chat("Tell me a joke")
    ids_file = write_ids(tmp_path / "ids.txt", ids)
    cli = run(tool("ds4ref"), "-m", TINY, "--tokens-file", ids_file, "-n", "12", "--temp", "0.8",
              "--seed", "0", "--ignore-eos").stdout
    gen = model.generate(ids, 12, temp=0.8, stop_at_eos=False)
    assert b"".join(gen.token_bytes) + b"\n" == cli
    seed1 = model.generate(ids, 12, temp=0.8, seed=1, stop_at_eos=False)
    assert seed1.tokens.tolist() != gen.tokens.tolist()


def test_an_exception_in_the_step_callback_reaches_the_caller(model, monkeypatch):
    # Without the record dtype the callback fails on the first step.
    monkeypatch.setattr(model_module, "LOGPROB", None)
    ids = model.chat("hi")
    with pytest.raises(AttributeError):
        model.generate(ids, 50)
    monkeypatch.undo()
    assert model.generate(ids, 2).tokens.size == 2
