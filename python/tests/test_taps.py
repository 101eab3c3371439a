"""Model.taps against the C tap consumers and against the relations between
taps that hold exactly.  Two C programs: the README's example
(examples/compare_head.c), which uses one tap, the last layer's hc_ffn of the
last token, to recompute the output head and prints how far that is from
ds4ref's logits; and chelper.c, written for these tests, which records every
tap of every layer and position, so that all of them are compared bit for
bit."""
import math
import struct
import subprocess

import numpy as np
import pytest

import ds4ref
from ds4ref import model as model_module
from conftest import TINY, run, write_ids

KIND_DTYPES = {0: np.dtype("<f4"), 1: np.dtype("<i4"), 2: np.dtype("<f8")}


@pytest.fixture(scope="module")
def ids(model):
    # 45 tokens: compressed rows at positions 3, 7, ... and 127, an indexer
    # that must choose from position 19 on.
    ids = model.chat("Explain how a bicycle stays upright while moving, step by step.")
    assert ids.size >= 40
    return ids


@pytest.fixture(scope="module")
def taps(model, ids):
    return model.taps(ids)


def c_taps(chelper, ids, tmp_path):
    """(name, layer, pos) -> array, from the C tap consumer."""
    out = tmp_path / "taps.bin"
    subprocess.run([chelper, "taps", str(TINY), str(write_ids(tmp_path / "ids.txt", ids)),
                    str(out)], check=True)
    data, at, records = out.read_bytes(), 0, {}
    while at < len(data):
        end = data.index(b"\0", at)
        name = data[at:end].decode()
        layer, pos, kind, n = struct.unpack_from("<4I", data, end + 1)
        at = end + 17
        dt = KIND_DTYPES[kind]
        records[name, layer, pos] = np.frombuffer(data, dt, n, at)
        at += n * dt.itemsize
    return records


def test_taps_equal_what_a_c_tap_consumer_receives(model, ids, taps, chelper, tmp_path):
    c = c_taps(chelper, ids, tmp_path)
    assert {name for name, _, _ in c} == set(ds4ref.TAP_NAMES)
    mine = {}
    for name, layers in taps.items():
        for layer, value in layers.items():
            for pos, v in enumerate(value):
                if v is not None:
                    mine[name, layer, pos] = v
    assert mine.keys() == c.keys()
    for key, v in c.items():
        assert mine[key].dtype == v.dtype.newbyteorder("=") and mine[key].tobytes() == v.tobytes(), key
    # Fixed-width taps come as one [n_tokens, width] array per layer.
    info = model.info
    assert sorted(taps["hc_ffn"]) == list(range(info.n_layer))
    assert taps["hc_ffn"][0].shape == (ids.size, info.n_hc * info.n_embd)
    assert taps["experts"][0].shape == (ids.size, info.n_expert_used)


def example_head(model, x) -> list:
    """head() of examples/compare_head.c: the same double operations in the
    same order (C without contraction, Python floats), so the same bits."""
    info = model.info
    E, H, V = info.n_embd, info.n_hc, info.n_vocab
    fn, scale, base, norm, out = (model.tensor(name + ".weight").astype(np.float64).ravel().tolist()
                                  for name in ("output_hc_fn", "output_hc_scale", "output_hc_base",
                                               "output_norm", "output"))
    x = x.astype(np.float64).tolist()
    ss = 0.0
    for v in x:
        ss += v * v
    rs = 1 / math.sqrt(ss / (H * E) + 1e-6)
    w = []
    for h in range(H):
        mix = 0.0
        for i in range(H * E):
            mix += fn[h * H * E + i] * x[i]
        w.append(1 / (1 + math.exp(-(mix * rs * scale[0] + base[h]))) + 1e-6)
    y, ss = [0.0] * E, 0.0
    for d in range(E):
        for h in range(H):
            y[d] += w[h] * x[h * E + d]
        ss += y[d] * y[d]
    rs = 1 / math.sqrt(ss / E + 1e-6)
    yn = [y[d] * rs * norm[d] for d in range(E)]
    logits = []
    for v in range(V):
        acc = 0.0
        for d in range(E):
            acc += out[v * E + d] * yn[d]
        logits.append(acc)
    return logits


def test_taps_agree_with_the_c_example(model, compare_head):
    prompt = "What is the capital of Italy?"
    printed = run(compare_head, TINY, prompt).stdout.decode()
    ids = model.chat(prompt, system="", think=False)     # as the example renders it
    x = model.taps(ids, names=["hc_ffn"])["hc_ffn"][model.info.n_layer - 1][-1]
    with model.session() as s:
        logits = s.eval(ids)[-1]
    maxd = max(abs(mine - float(ref)) for mine, ref in zip(example_head(model, x), logits))
    assert printed == (f"{ids.size} prompt tokens; last-layer HC state from the tap ({x.size} values)\n"
                       f"output head recomputed here vs ds4ref: max |dlogit| = {maxd:.3g} over "
                       f"{model.info.n_vocab} logits\n")
    assert 0 < maxd < 1e-5


def test_selected_experts_are_the_top_biased_scores(model, taps):
    # On the score-routed layers (not hash-routed) the experts are the
    # n_expert_used highest biased scores, ties to the lowest id, in order.
    k = model.info.n_expert_used
    assert taps["expert_scores"]
    for layer, scores in taps["expert_scores"].items():
        order = np.argsort(-scores, axis=1, kind="stable")[:, :k]
        assert np.array_equal(order, taps["experts"][layer])


def test_indexer_selection_is_the_top_scored_rows(model, taps):
    # Where the indexer must choose, it attends the 4 (the tiny model's
    # indexer top_k) best-scored compressed rows, ties to the lowest index,
    # listed ascending.
    chose = 0
    for layer, rows in taps["indexer_scores"].items():
        for pos, scores in enumerate(rows):
            if scores is None:
                continue
            best = np.sort(np.argsort(-scores, kind="stable")[:4])
            assert taps["indexer_sel"][layer][pos].tolist() == best.tolist()
            chose += 1
    assert chose > 10


def test_names_select_taps(model, ids, taps):
    some = model.taps(ids, names=["experts", "comp_row"])
    assert set(some) == {"experts", "comp_row"}
    for layer, value in some["experts"].items():
        assert np.array_equal(value, taps["experts"][layer])
    with pytest.raises(ds4ref.Error) as e:
        model.taps(ids, names=["hc_fnn"])
    assert e.value.code == ds4ref.Status.E_ARG and "hc_fnn" in e.value.message


def test_an_exception_in_the_tap_callback_reaches_the_caller(model, ids, monkeypatch):
    # No dtype for any kind: the callback fails on the first report.
    monkeypatch.setattr(model_module, "_TAP_DTYPES", {})
    with pytest.raises(KeyError):
        model.taps(ids[:4])
    monkeypatch.undo()
    # The tap was removed (a plain evaluation would otherwise call the
    # callback freed with it) and the model still works.
    with model.session() as s:
        s.eval(ids[:4])
    assert model.taps(ids[:4], names=["experts"])["experts"][0].shape[0] == 4
