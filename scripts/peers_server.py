"""The `openai` Python client (PyPI) against ds4ref-server: what a user of
the official client gets must be what ds4ref's goldens say.

    python3 scripts/peers_server.py BIN_DIR MODEL

Starts BIN_DIR/ds4ref-server on MODEL (any free port), then through
openai.OpenAI(base_url=...):
  - completions with token-id prompts, logprobs 5 and vLLM's extra fields
    (ignore_eos, return_tokens_as_token_ids): the tokens and logprobs of
    `ds4ref --tokens-file --golden-out`, digit for digit;
  - chat completions with logprobs and top_logprobs: the bytes and
    logprobs of `ds4ref -p`'s golden (its default system prompt, thinking);
  - a streamed completion: its text is the whole one's;
  - a streamed chat with thinking and stream_options.include_usage: its
    reasoning_content and content joined are the whole answer's, its last
    chunk the usage;
  - n=2: the client raises BadRequestError with the server's message;
  - /metrics read by prometheus_client's own parser: the families, the
    counters the requests above moved.
Exit status 0 when all hold; each check is one line."""
import json
import os
import re
import subprocess
import sys
import tempfile
import urllib.request

import openai
from prometheus_client.parser import text_string_to_metric_families

bin_dir, model = sys.argv[1], sys.argv[2]
fails = 0


def check(what, ok):
    global fails
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    fails += not ok


def golden(args):
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "g.jsonl")
        subprocess.run([os.path.join(bin_dir, "ds4ref"), "-m", model, *args, "--golden-out", out],
                       check=True, capture_output=True)
        with open(out) as f:
            return [r for r in map(json.loads, f) if "step" in r]


srv = subprocess.Popen([os.path.join(bin_dir, "ds4ref-server"), "-m", model, "--port", "0"],
                       stderr=subprocess.PIPE, text=True)
try:
    m = re.search(r"http://[0-9.]+:[0-9]+", srv.stderr.readline())
    client = openai.OpenAI(base_url=m.group(0) + "/v1", api_key="none")
    name = client.models.list().data[0].id
    check(f"openai {openai.__version__}: models.list names the model ({name})", bool(name))

    req = urllib.request.Request(m.group(0) + "/tokenize", data=b'{"prompt": "Hello there"}')
    ids = json.load(urllib.request.urlopen(req))["tokens"]
    prompt = ids + [300, 301, 302]
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write(" ".join(map(str, prompt)))
    want = golden(["--tokens-file", f.name, "-n", "10", "--ignore-eos"])
    r = client.completions.create(model=name, prompt=prompt, max_tokens=10, logprobs=5,
                                  extra_body={"ignore_eos": True, "return_tokens_as_token_ids": True})
    lp = r.choices[0].logprobs
    got = [(int(t.split(":")[1]), "%.17g" % p) for t, p in zip(lp.tokens, lp.token_logprobs)]
    check("completions.create: ds4ref --golden-out's tokens and logprobs",
          got == [(g["token"], "%.17g" % g["logprob"]) for g in want])

    want_c = golden(["-p", "Hello there", "-n", "6", "--ignore-eos"])
    r = client.chat.completions.create(
        model=name, max_tokens=6, logprobs=True, top_logprobs=3,
        messages=[{"role": "system", "content": "You are a helpful assistant"},
                  {"role": "user", "content": "Hello there"}],
        extra_body={"ignore_eos": True, "chat_template_kwargs": {"thinking": True}})
    content = r.choices[0].logprobs.content
    check("chat.completions.create: ds4ref -p's golden, bytes and logprobs",
          [(bytes(c.bytes).hex(), "%.17g" % c.logprob) for c in content] ==
          [(g["bytes"], "%.17g" % g["logprob"]) for g in want_c])
    check("... with 3 alternatives a token", all(len(c.top_logprobs) == 3 for c in content))

    whole = client.completions.create(model=name, prompt="Hello there", max_tokens=12,
                                      extra_body={"ignore_eos": True}).choices[0].text
    text = "".join(c.choices[0].text for c in client.completions.create(
        model=name, prompt="Hello there", max_tokens=12, stream=True, extra_body={"ignore_eos": True}))
    check("a streamed completion's text is the whole one's", text == whole)

    # Seed 8 at temperature 3 writes </think> within 300 tokens on tiny.
    think = dict(model=name, max_tokens=300, temperature=3, seed=8,
                 messages=[{"role": "user", "content": "hi"}],
                 extra_body={"ignore_eos": True, "thinking": True})
    msg = client.chat.completions.create(**think).choices[0].message
    chunks = list(client.chat.completions.create(**think, stream=True,
                                                 stream_options={"include_usage": True}))
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    check("a streamed chat with thinking: reasoning_content and content are the whole answer's",
          msg.content and "".join(getattr(d, "reasoning_content", None) or "" for d in deltas) ==
          msg.reasoning_content and "".join(d.content or "" for d in deltas) == msg.content)
    check("... and include_usage's last chunk has the usage",
          not chunks[-1].choices and chunks[-1].usage.completion_tokens == 300)

    try:
        client.completions.create(model=name, prompt="x", n=2)
        check("n=2 raises BadRequestError", False)
    except openai.BadRequestError as e:
        check("n=2 raises BadRequestError with the server's message", "'n' must be 1" in str(e))

    text = urllib.request.urlopen(m.group(0) + "/metrics").read().decode()
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    value = {(s.name, tuple(sorted(s.labels.items()))): s.value
             for f in fams.values() for s in f.samples}
    check("prometheus_client parses /metrics: histograms, counters, gauges",
          fams["ds4ref_e2e_request_latency_seconds"].type == "histogram" and
          fams["ds4ref_generation_tokens"].type == "counter" and
          fams["ds4ref_num_requests_running"].type == "gauge")
    check("... counting the completions and chats above",
          value[("ds4ref_requests_total", (("code", "200"), ("endpoint", "/v1/chat/completions")))]
          == 3 and value[("ds4ref_time_to_first_token_seconds_count", ())] >= 6)
finally:
    srv.terminate()
    check("the server exits 0 on SIGTERM", srv.wait(timeout=60) == 0)
sys.exit(1 if fails else 0)
