"""Session.eval, logits, truncate and top_logprobs against the command line
(`ds4ref --tokens-file F -n 0 --logits-out L`) and against each other."""
import math

import numpy as np
import pytest

import ds4ref
from conftest import TINY, run, tool, write_ids

# Long enough for the sliding window (16), a completed ratio-4 compression
# window and an indexer that must choose (more than 4 compressed rows).
PROMPT = "Write a short story about a robot who learns to paint, in three sentences."


@pytest.fixture(scope="module")
def ids(model):
    ids = model.chat(PROMPT)
    assert ids.size > 40
    return ids


@pytest.mark.parametrize("which, qat", [("ds4", True), ("ds4", False), ("f32", True)])
def test_eval_logits_equal_the_cli_bit_for_bit(which, qat, ids, tiny_f32, tmp_path):
    path = TINY if which == "ds4" else tiny_f32
    ids_file = write_ids(tmp_path / "ids.txt", ids)
    out = tmp_path / "logits.f32"
    run(tool("ds4ref"), "-m", path, "--tokens-file", ids_file, "-n", "0", "--qat",
        "on" if qat else "off", "--logits-out", out)
    with ds4ref.Model(path, qat=qat) as m, m.session() as s:
        mine = s.eval(ids)
        assert mine.dtype == np.float32 and mine.shape == (ids.size, m.info.n_vocab)
    cli = np.fromfile(out, "<f4").reshape(mine.shape)
    assert mine.tobytes() == cli.tobytes()


def test_any_chunking_and_thread_count_give_the_same_bits(model, ids):
    with model.session() as s:
        ref = s.eval(ids)
    with ds4ref.Model(TINY, threads=1) as one, one.session(chunk=7) as s:
        parts = [s.eval(ids[:5]), s.eval(ids[5:6]), s.eval(ids[6:])]
    assert np.concatenate(parts).tobytes() == ref.tobytes()


def test_logits_truncate_and_top_logprobs_agree_with_eval(model, ids):
    with model.session() as s:
        ref = s.eval(ids)
        n = ids.size
        assert s.pos == n
        # Earlier positions are recomputed exactly; the state stays.
        for pos in (0, 17, n - 1):
            assert s.logits(pos).tobytes() == ref[pos].tobytes()
        assert s.pos == n
        s.truncate(20)
        assert s.pos == 20
        assert s.eval(ids[20:]).tobytes() == ref[20:].tobytes()
        assert s.eval(ids[:0], logits=False) is None and s.pos == n

        pos, k = 25, 10
        top = s.top_logprobs(pos, k)
        assert top.dtype == ds4ref.LOGPROB and top.size == k
        row = ref[pos]
        # By logit descending, ties to the lowest id.
        order = sorted(range(row.size), key=lambda i: (-row[i], i))[:k]
        assert top["id"].tolist() == order
        assert top["logit"].tobytes() == row[order].tobytes()
        lse = max(row) + math.log(math.fsum(math.exp(float(v) - float(max(row))) for v in row))
        np.testing.assert_allclose(top["logprob"], row[order].astype(np.float64) - lse,
                                   rtol=0, atol=1e-12)


def test_a_checkpoint_folder_gives_the_cli_logits_and_drafts_from_its_mtp_layer(tmp_path):
    """The official checkpoint's layout (ds4ref-mkmodel --format hf) opens
    by its folder, its MTP layer being inside it: QAT on, the CLI's logits
    bit for bit, and speculative decoding's tokens are plain decoding's."""
    ck = tmp_path / "ck"
    run(tool("ds4ref-mkmodel"), "--config", "tiny-ckpt", "--format", "hf", "-o", ck)
    with ds4ref.Model(ck, mtp=ck) as m:
        ids = m.chat(PROMPT)
        ids_file = write_ids(tmp_path / "ids.txt", ids)
        out = tmp_path / "logits.f32"
        run(tool("ds4ref"), "-m", ck, "--tokens-file", ids_file, "-n", "0", "--logits-out", out)
        with m.session() as s:
            mine = s.eval(ids)
        assert mine.tobytes() == np.fromfile(out, "<f4").reshape(mine.shape).tobytes()
        plain = m.generate(ids, 6, stop_at_eos=False)
        spec = m.generate(ids, 6, draft=3, stop_at_eos=False)
        assert spec.digests == plain.digests and spec.tokens.size == 6
