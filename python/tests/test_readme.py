"""The Python example of README.md runs as printed (its own assert checks
the recomputed output head against ds4ref's logits), in the ten lines issue
19 asks for."""
import re

from conftest import ROOT


def test_the_readme_example_runs_verbatim(monkeypatch):
    blocks = re.findall(r"^```python\n(.*?)^```", (ROOT / "README.md").read_text(), re.S | re.M)
    assert len(blocks) == 1
    assert len(blocks[0].splitlines()) == 10, blocks[0]
    monkeypatch.chdir(ROOT)       # it opens models/tiny.gguf
    scope = {}
    exec(compile(blocks[0], "README.md", "exec"), scope)
    # It did what it says: the head over the vocabulary, from the last layer.
    assert scope["head"].shape == (scope["m"].info.n_vocab,)
    assert scope["x"].shape == (scope["m"].info.n_hc * scope["m"].info.n_embd,)
