"""read_golden against an independent reading of the same files (Python's
json module), and diff over the C comparison."""
import json

import numpy as np
import pytest

import ds4ref
from conftest import VECTORS

GOLDENS = sorted(VECTORS.glob("*.jsonl"))


def parse(path):
    """The golden file read with the json module: header, steps, end."""
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    return lines[0], lines[1:-1], lines[-1]


def check_model(mine, theirs):
    assert mine.file == theirs["file"] and mine.size == theirs["size"]
    assert mine.metadata_sha256 == theirs["metadata_sha256"]
    assert mine.tensor_data_sha256 == theirs["tensor_data_sha256"]


@pytest.mark.parametrize("path", GOLDENS, ids=lambda p: p.stem)
def test_read_golden_returns_what_the_file_says(path):
    head, steps, end = parse(path)
    g = ds4ref.read_golden(path)
    assert g.version == head["ds4ref_version"]
    check_model(g.model, head["model"])
    if "mtp" in head:
        check_model(g.mtp, head["mtp"])
    else:
        assert g.mtp is None
    for key, value in head["settings"].items():
        assert getattr(g, key) == value, key
    assert g.prompt.dtype == np.int32 and g.prompt.tolist() == head["prompt"]["tokens"]
    assert g.prompt_text == bytes.fromhex(head["prompt"]["text_hex"])
    assert len(steps) == end["steps"] == g.tokens.size
    assert g.complete == end["complete"] and g.stop == end["stop"]
    # f32 values are written with %.9g and doubles with %.17g: both read
    # back to the identical bits.
    assert g.tokens.tolist() == [s["token"] for s in steps]
    assert g.token_bytes == [bytes.fromhex(s["bytes"]) for s in steps]
    assert g.logits.tobytes() == np.array([s["logit"] for s in steps], np.float32).tobytes()
    assert g.logprobs.tobytes() == np.array([s["logprob"] for s in steps]).tobytes()
    assert g.digests == [bytes.fromhex(s["logits_sha256"]) for s in steps]
    assert g.top.shape == (len(steps), g.top_k)
    for row, s in zip(g.top, steps):
        assert row["id"].tolist() == [t["id"] for t in s["top"]]
        assert row["logit"].tobytes() == np.array([t["logit"] for t in s["top"]], np.float32).tobytes()
        assert row["logprob"].tolist() == [t["logprob"] for t in s["top"]]


def test_read_golden_errors_name_the_file(tmp_path):
    missing = tmp_path / "missing.jsonl"
    with pytest.raises(ds4ref.Error) as e:
        ds4ref.read_golden(missing)
    assert e.value.code == ds4ref.Status.E_IO and str(missing) in e.value.message
    # Without its end line the file is incomplete: the strict reader says
    # where.
    cut = tmp_path / "cut.jsonl"
    cut.write_text("".join(GOLDENS[0].read_text().splitlines(keepends=True)[:-1]))
    with pytest.raises(ds4ref.Error) as e:
        ds4ref.read_golden(cut)
    assert e.value.code == ds4ref.Status.E_FORMAT and e.value.message.startswith(f"{cut}:")


def test_diff_passes_on_the_same_stream_and_reports_a_divergence():
    on = VECTORS / "tiny-ds4-qaton-capital.jsonl"
    off = VECTORS / "tiny-ds4-qatoff-capital.jsonl"
    same = ds4ref.diff(on, on, exact=True)
    assert same.passed and same.exact and same.violations == 0
    assert same.first_divergence is None and same.n_compared == same.n_steps_a == 160
    assert same.top1 == 1.0 and same.max_dlogprob == 0.0
    assert same.report.rstrip().endswith("result: PASS")
    # QAT off changes the numbers: an exact comparison fails, with the
    # violation in the report, and the figures are those of the JSON report.
    d = ds4ref.diff(on, off, exact=True, max_dlogprob=0)
    assert not d.passed and d.violations == 2 and not d.exact
    assert "result: FAIL" in d.report and d.report.count("  violated: ") == 2
    # No threshold asked for: --min-top1 1 applies, and the streams diverge.
    j = ds4ref.diff(on, off, json=True)
    assert not j.passed and j.violations == 1 and j.first_divergence is not None
    assert j.top1 == (j.first_divergence) / (j.first_divergence + 1)
    report = json.loads(j.report)
    assert isinstance(report, dict) and j.max_dlogprob > 0 and j.n_steps_b == 160


def test_diff_errors():
    on = VECTORS / "tiny-ds4-qaton-capital.jsonl"
    with pytest.raises(ds4ref.Error) as e:
        ds4ref.diff(on, VECTORS / "missing.jsonl")
    assert e.value.code == ds4ref.Status.E_IO and "missing.jsonl" in e.value.message
    with pytest.raises(ds4ref.Error) as e:
        ds4ref.diff(on, VECTORS / "tiny.vec", case="no-such-case")
    assert e.value.code == ds4ref.Status.E_ARG and "no-such-case" in e.value.message
    with pytest.raises(ds4ref.Error) as e:
        ds4ref.diff(on, on, max_kl=-1)
    assert e.value.code == ds4ref.Status.E_ARG and "max_kl" in e.value.message


def test_a_numerics_profile_is_named_in_the_golden(tmp_path):
    """Model(numerics=...) decodes under another engine's rounding
    (docs/NUMERICS.md section 7): its golden names the profile, a golden of
    the official numerics says "official", and the two streams differ in
    their logprobs; an unknown profile is refused by name."""
    from conftest import TINY
    paths = {}
    for numerics in (None, "ggml-act,f16-kv"):
        with ds4ref.Model(TINY, numerics=numerics) as m:
            ids = m.chat("What is the capital of Italy?")
            paths[numerics] = tmp_path / f"{numerics}.jsonl"
            m.generate(ids, 4, golden=paths[numerics])
    official, profile = ds4ref.read_golden(paths[None]), ds4ref.read_golden(paths["ggml-act,f16-kv"])
    assert official.numerics == "official" and profile.numerics == "ggml-act,f16-kv"
    assert not np.array_equal(official.logprobs, profile.logprobs)
    with pytest.raises(ds4ref.Error) as e:
        ds4ref.Model(TINY, numerics="ggml")
    assert e.value.code == ds4ref.Status.E_ARG and '"ggml"' in e.value.message
