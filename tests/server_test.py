"""ds4ref-server against what it promises (docs/SERVER.md), with the Python
standard library only: greedy streams equal `ds4ref --golden-out`'s tokens
and logprobs; sampled ones `ds4ref --temp --seed`; requests in flight
together give the bits each gives alone; streaming gives the whole answer's
text; bad requests get a 4xx OpenAI error and the server goes on; a client
that leaves frees its row; SIGTERM ends it with status 0.

    python3 tests/server_test.py [BIN_DIR]      (run from the repository root)
"""
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import atexit

BIN = sys.argv[1] if len(sys.argv) > 1 else "."
MODEL = "models/tiny.gguf"
fails = 0
finished = False
servers = []


def show_servers():
    """What the servers said beyond their first line, when a check failed
    or the test stopped on an exception."""
    if fails or not finished:
        for sv in servers:
            text = "".join(sv.err).strip()
            if text:
                print(f"--- ds4ref-server's stderr:\n{text[-4000:]}")


atexit.register(show_servers)


def check(what, ok):
    global fails
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        fails += 1


class Server:
    def __init__(self, *extra):
        self.p = subprocess.Popen([os.path.join(BIN, "ds4ref-server"), "-m", MODEL, "--port", "0",
                                   *extra], stderr=subprocess.PIPE, text=True)
        atexit.register(lambda p=self.p: p.poll() is None and p.kill())
        line = self.p.stderr.readline()
        m = re.search(r"listening on http://([0-9.]+):([0-9]+)", line)
        assert m, f"ds4ref-server did not start: {line!r}"
        self.url = f"http://{m.group(1)}:{m.group(2)}"
        # The rest of its stderr is kept, to be shown if a check fails (a
        # sanitizer's report, say).
        self.err = []
        self.reader = threading.Thread(target=lambda: self.err.extend(self.p.stderr), daemon=True)
        self.reader.start()
        servers.append(self)

    def call(self, path, body=None, raw=None, timeout=120):
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        req = urllib.request.Request(self.url + path, data=data,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def json(self, path, body=None, **kw):
        status, text = self.call(path, body, **kw)
        return status, json.loads(text)

    def stop(self, sig=signal.SIGTERM):
        self.p.send_signal(sig)
        rc = self.p.wait(timeout=60)
        self.reader.join(timeout=10)
        return rc, "".join(self.err)


def golden(args):
    """The steps of `ds4ref ARGS --golden-out`."""
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "g.jsonl")
        subprocess.run([os.path.join(BIN, "ds4ref"), "-m", MODEL, *args, "--golden-out", out],
                       check=True, capture_output=True)
        with open(out) as f:
            return [r for r in map(json.loads, f) if "step" in r]


def ids_file(ids):
    f = tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False)
    f.write(" ".join(map(str, ids)) + "\n")
    f.close()
    return f.name


def logprob_text(x):
    # As the golden prints a double (%.17g): the same bits, the same digits.
    return "%.17g" % x


def steps_of(choice):
    lp = choice["logprobs"]
    return [(int(t.split(":")[1]), logprob_text(p))
            for t, p in zip(lp["tokens"], lp["token_logprobs"])]


def strip_ids(resp):
    """A response without what differs between two identical requests."""
    resp = dict(resp)
    for k in ("id", "created"):
        resp.pop(k, None)
    return resp


s = Server()
st, h = s.json("/health")
check("/health answers ok with no row in flight", st == 200 and h["status"] == "ok" and h["rows"] == 0)
st, m = s.json("/v1/models")
check("/v1/models lists the model", st == 200 and m["data"][0]["id"] == "tiny.gguf")
check("... with its file's absolute path as root",
      os.path.samefile(m["data"][0]["root"], "models/tiny.gguf") and m["data"][0]["root"].startswith("/"))
check("... and the CLI's default context (the model's, at most 32768)",
      m["data"][0]["max_model_len"] == 4096)   # tiny declares 4096
st, one = s.json("/v1/models/tiny.gguf")
check("/v1/models/{id}: the model", st == 200 and one["id"] == "tiny.gguf" and one["object"] == "model")
st, other = s.json("/v1/models/other")
check("/v1/models/{another id}: 404 naming both", st == 404 and "tiny.gguf" in other["error"]["message"])
st, v = s.json("/version")
check("/version: ds4ref's version", st == 200 and v["version"])
head = urllib.request.Request(s.url + "/health", method="HEAD")
with urllib.request.urlopen(head, timeout=30) as r:
    check("HEAD /health: 200, no body", r.status == 200 and r.read() == b"")
st, t = s.json("/tokenize", {"prompt": "Hello there"})
check("/tokenize gives the ids", st == 200 and t["count"] == len(t["tokens"]) > 0)
st, d = s.json("/detokenize", {"tokens": t["tokens"]})
check("/detokenize gives the text back", st == 200 and d["prompt"] == "Hello there")

# Greedy: the golden's tokens and logprobs, and its 20 alternatives.
prompt = t["tokens"] + [300, 301, 302]
want = golden(["--tokens-file", ids_file(prompt), "-n", "12", "--ignore-eos"])
body = {"prompt": prompt, "max_tokens": 12, "ignore_eos": True, "logprobs": 20,
        "return_tokens_as_token_ids": True}
st, r = s.json("/v1/completions", body)
got = steps_of(r["choices"][0])
check("greedy completions = ds4ref --golden-out: tokens and logprobs, to the digit",
      st == 200 and got == [(g["token"], logprob_text(g["logprob"])) for g in want])
tops = r["choices"][0]["logprobs"]["top_logprobs"]
check("... and the golden's 20 alternatives of every step",
      all(sorted((int(k.split(":")[1]), logprob_text(v)) for k, v in top.items()) ==
          sorted((a["id"], logprob_text(a["logprob"])) for a in g["top"])
          for top, g in zip(tops, want)))
check("... finish_reason length, usage counted",
      r["choices"][0]["finish_reason"] == "length" and r["usage"]["completion_tokens"] == 12)

# Sampled: ds4ref --temp --seed's stream (its bytes on stdout, then "\n").
def token_bytes(name):
    if name.startswith("bytes:"):
        return bytes(int(h, 16) for h in name[6:].split("\\x")[1:])
    return name.encode()


cli = subprocess.run([os.path.join(BIN, "ds4ref"), "-m", MODEL, "--tokens-file", ids_file(prompt),
                      "-n", "10", "--ignore-eos", "--temp", "0.9", "--seed", "7"],
                     capture_output=True, check=True).stdout
st, r = s.json("/v1/completions", {"prompt": prompt, "max_tokens": 10, "ignore_eos": True,
                                   "temperature": 0.9, "seed": 7, "logprobs": 0})
check("sampled completions = ds4ref --temp 0.9 --seed 7, byte for byte",
      st == 200 and b"".join(token_bytes(t) for t in r["choices"][0]["logprobs"]["tokens"]) + b"\n" == cli)

# Several requests in flight together: each gives what it gives alone.
prompts = [prompt, t["tokens"], [256, 258, 72, 105], prompt[:5]]
bodies = [{"prompt": p, "max_tokens": 8 + 3 * i, "ignore_eos": True, "logprobs": 5,
           "return_tokens_as_token_ids": True} for i, p in enumerate(prompts)]
alone = [strip_ids(s.json("/v1/completions", b)[1]) for b in bodies]
together = [None] * len(bodies)


def send(i):
    together[i] = strip_ids(s.json("/v1/completions", bodies[i])[1])


for rounds in range(2):
    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(bodies))]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    check(f"4 requests in flight together = each alone, bit for bit (round {rounds + 1})",
          together == alone)
st, r = s.json("/v1/completions", {"prompt": [prompt, t["tokens"]], "max_tokens": 8,
                                   "ignore_eos": True, "logprobs": 5,
                                   "return_tokens_as_token_ids": True})
check("a request of two prompts: two choices, each as alone",
      st == 200 and [c["logprobs"] for c in r["choices"]] ==
      [c["logprobs"] for c in (s.json("/v1/completions", dict(bodies[0], max_tokens=8))[1]["choices"][0],
                               s.json("/v1/completions", dict(bodies[1], max_tokens=8))[1]["choices"][0])])

# Streaming: the chunks' text is the whole answer's.
st, whole = s.json("/v1/completions", {"prompt": "Hello there", "max_tokens": 12, "ignore_eos": True})
st2, raw = s.call("/v1/completions", {"prompt": "Hello there", "max_tokens": 12, "ignore_eos": True,
                                      "stream": True})
events = [line[6:] for line in raw.decode().split("\n") if line.startswith("data: ")]
chunks = [json.loads(e) for e in events[:-1]]
check("stream: server-sent events ending with [DONE]", st2 == 200 and events[-1] == "[DONE]")
check("... whose text is the whole answer's",
      "".join(c["choices"][0]["text"] for c in chunks) == whole["choices"][0]["text"])
check("... and the last says why it ended", chunks[-1]["choices"][0]["finish_reason"] == "length")

# Echo: the prompt's own logprobs (what lm-evaluation-harness reads).
st, r = s.json("/v1/completions", {"prompt": prompt, "max_tokens": 1, "echo": True, "logprobs": 1,
                                   "return_tokens_as_token_ids": True})
lp = r["choices"][0]["logprobs"]
check("echo: the prompt's tokens first, the first without a logprob",
      st == 200 and [int(x.split(":")[1]) for x in lp["tokens"][:len(prompt)]] == prompt and
      lp["token_logprobs"][0] is None and all(isinstance(x, float) for x in lp["token_logprobs"][1:]))

# Logprobs as OpenAI and vLLM give them.  With logprobs 0 each entry of
# top_logprobs is the token alone (OpenAI: "up to logprobs + 1").
st, r = s.json("/v1/completions", {"prompt": prompt, "max_tokens": 6, "ignore_eos": True,
                                   "logprobs": 0, "temperature": 0.9, "seed": 3})
lp = r["choices"][0]["logprobs"]
check("logprobs 0: each top_logprobs entry is the token itself",
      st == 200 and all(top == {t: p} for t, p, top in
                        zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"])))


def units(b):
    """Characters of bytes decoded alone, as the server counts them: a
    well-formed character is one, and so is each byte that begins none."""
    n = i = 0
    while i < len(b):
        step = 1
        for k in (4, 3, 2):
            try:
                if len(b[i:i + k]) == k and len(b[i:i + k].decode("utf-8")) == 1:
                    step = k
                    break
            except UnicodeDecodeError:
                pass
        i += step
        n += 1
    return n


# text_offset: characters, each token's decoded alone (as vLLM sums its
# tokens' lengths), counted from the echoed prompt's start.
scored = {"prompt": "h\u00e9llo w\u00f6rld \u2713 ok", "max_tokens": 8, "ignore_eos": True,
          "echo": True, "logprobs": 2}
st, whole_e = s.json("/v1/completions", scored)
lp = whole_e["choices"][0]["logprobs"]
sums = [0]
for name in lp["tokens"][:-1]:
    sums.append(sums[-1] + units(token_bytes(name)))
check("text_offset counts characters, token by token, from the echoed prompt",
      st == 200 and lp["text_offset"] == sums and sums[-1] < len(
          b"".join(token_bytes(t) for t in lp["tokens"])))

# A stream of the same request: one id in every chunk (another stream's
# differs), the prompt's chunk first, the joined chunks equal the whole
# answer (text, tokens, logprobs, offsets), and with include_usage a last
# chunk without choices holding the usage (null in the others, as OpenAI).
def stream_chunks(path, body):
    st, raw = s.call(path, body)
    events = [line[6:] for line in raw.decode().split("\n") if line.startswith("data: ")]
    return st, [json.loads(e) for e in events[:-1]], events[-1]


st, chunks, last = stream_chunks("/v1/completions", dict(scored, stream=True,
                                                         stream_options={"include_usage": True}))
_, other, _ = stream_chunks("/v1/completions", dict(scored, stream=True))
body_chunks = [c for c in chunks if c["choices"]]
joined = {k: sum((c["choices"][0]["logprobs"][k] for c in body_chunks), [])
          for k in ("tokens", "token_logprobs", "top_logprobs", "text_offset")}
check("stream: one id and one created in every chunk, another stream's id differs",
      st == 200 and len({c["id"] for c in chunks}) == 1 and chunks[0]["id"] != other[0]["id"] and
      len({c["created"] for c in chunks}) == 1)
check("stream with echo: the prompt's chunk first, the joined chunks are the whole answer",
      last == "[DONE]" and "".join(c["choices"][0]["text"] for c in body_chunks) ==
      whole_e["choices"][0]["text"] and joined == lp and
      body_chunks[0]["choices"][0]["text"].startswith("h\u00e9llo"))
check("include_usage: a last chunk with no choices and the whole answer's usage",
      not chunks[-1]["choices"] and chunks[-1]["usage"] == whole_e["usage"] and
      all(c["usage"] is None for c in body_chunks) and "usage" not in other[0])

# Prompt scoring: max_tokens 0 with echo gives the prompt's logprobs alone.
st, r0 = s.json("/v1/completions", dict(scored, max_tokens=0))
c0 = r0["choices"][0]
n_prompt = r0["usage"]["prompt_tokens"]
check("max_tokens 0 with echo: the prompt's logprobs, nothing generated",
      st == 200 and c0["text"] == scored["prompt"] and r0["usage"]["completion_tokens"] == 0 and
      c0["finish_reason"] == "length" and
      c0["logprobs"]["token_logprobs"] == lp["token_logprobs"][:n_prompt])

# vLLM's prompt_logprobs: null first, then the token and its alternatives by
# id, each with its logprob and rank (vLLM's: the tokens at least as likely),
# against the prompt's logits from ds4ref --logits-out.
import array
import math
ids = s.json("/tokenize", {"prompt": scored["prompt"]})[1]["tokens"]
st, rp = s.json("/v1/completions", {"prompt": ids, "max_tokens": 1, "prompt_logprobs": 3})
plp = rp["choices"][0]["prompt_logprobs"]
with tempfile.TemporaryDirectory() as d:
    subprocess.run([os.path.join(BIN, "ds4ref"), "-m", MODEL, "--tokens-file", ids_file(ids),
                    "-n", "1", "--logits-out", os.path.join(d, "l.f32")], check=True,
                   capture_output=True)
    rows = array.array("f")
    with open(os.path.join(d, "l.f32"), "rb") as f:
        rows.frombytes(f.read())
nv = len(rows) // len(ids)
ok = st == 200 and len(plp) == len(ids) and plp[0] is None
for i in range(1, len(ids)):
    row = rows[(i - 1) * nv:i * nv]
    lse = max(row) + math.log(math.fsum(math.exp(x - max(row)) for x in row))
    entry = plp[i]
    tok = entry.get(str(ids[i]))
    order = sorted(range(nv), key=lambda k: (-row[k], k))[:3]
    ok &= tok is not None and abs(tok["logprob"] - (row[ids[i]] - lse)) < 1e-9
    ok &= tok["rank"] == (order.index(ids[i]) + 1 if ids[i] in order else
                          sum(x >= row[ids[i]] for x in row))
    ok &= all(entry[str(k)]["rank"] == n + 1 for n, k in enumerate(order))
    ok &= list(entry)[0] == str(ids[i]) and len(entry) == 3 + (ids[i] not in order)
check("prompt_logprobs: the token first, its rank and logprob, the 3 most likely ranked 1-3", ok)

# JSON's \u0000 is valid in text: a prompt holding one is scored, and it
# tokenizes and detokenizes back.
st, r = s.json("/v1/completions", {"prompt": "a\u0000b", "max_tokens": 0, "echo": True})
st2, t0 = s.json("/tokenize", {"prompt": "a\u0000b"})
st3, d0 = s.json("/detokenize", {"tokens": t0.get("tokens", [])})
check("a prompt with \\u0000: scored, tokenized and detokenized back",
      st == 200 and r["choices"][0]["text"] == "a\u0000b" and st2 == 200 and
      d0.get("prompt") == "a\u0000b")

# /tokenizer_info, as lm-evaluation-harness's remote tokenizer reads it: the
# special tokens' text, which /tokenize turns into their ids.
st, ti = s.json("/tokenizer_info")
eos = s.json("/tokenize", {"prompt": ti["eos_token"]})[1]["tokens"]
bos = s.json("/tokenize", {"prompt": ti["bos_token"]})[1]["tokens"]
with_bos = s.json("/tokenize", {"prompt": "Hello", "add_special_tokens": True})[1]["tokens"]
check("/tokenizer_info: the special tokens' text, one id each; add_special_tokens adds BOS",
      st == 200 and len(eos) == 1 and len(bos) == 1 and eos != bos and
      with_bos == bos + s.json("/tokenize", {"prompt": "Hello"})[1]["tokens"])

# The model's SHA-256 in /v1/models (computed on a thread after start).
import hashlib
want_sha = hashlib.sha256(open(MODEL, "rb").read()).hexdigest()
got_sha = None
for _ in range(100):
    got_sha = s.json("/v1/models")[1]["data"][0].get("model_sha256")
    if got_sha:
        break
    time.sleep(0.05)
check("/v1/models: model_sha256 is sha256sum's of the file", got_sha == want_sha)

# Chat streamed with thinking: the reasoning (before </think>) as
# delta.reasoning_content, the answer as delta.content, joined equal to the
# whole answer's.  Seed 8 at temperature 3 writes </think> within 300 tokens.
think = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 300, "thinking": True,
         "temperature": 3, "seed": 8, "ignore_eos": True}
st, wc = s.json("/v1/chat/completions", think)
msg = wc["choices"][0]["message"]
check("(the seed writes </think>: reasoning and an answer)",
      st == 200 and msg["reasoning_content"] and msg["content"])
st, chunks, _ = stream_chunks("/v1/chat/completions", dict(think, stream=True))
check("chat stream with thinking: reasoning_content and content joined = the whole answer's",
      "".join(c["choices"][0]["delta"].get("reasoning_content", "") for c in chunks) ==
      msg["reasoning_content"] and
      "".join(c["choices"][0]["delta"].get("content", "") for c in chunks) == msg["content"])
# ... and with a stop string in the answer: the two parts as the whole answer cuts them.
cut = dict(think, stop=[msg["content"][3:6]])
st, wc = s.json("/v1/chat/completions", cut)
st2, chunks, _ = stream_chunks("/v1/chat/completions", dict(cut, stream=True))
msg = wc["choices"][0]["message"]
check("... with a stop string in the answer, the same parts as the whole answer's",
      st == st2 == 200 and wc["choices"][0]["finish_reason"] == "stop" and
      "".join(c["choices"][0]["delta"].get("reasoning_content", "") for c in chunks) ==
      msg["reasoning_content"] and
      "".join(c["choices"][0]["delta"].get("content", "") for c in chunks) == msg["content"])

# Chat: ds4ref -p's template (its default system prompt, thinking).
want_c = golden(["-p", "Hello there", "-n", "6", "--ignore-eos"])
st, r = s.json("/v1/chat/completions", {
    "messages": [{"role": "system", "content": "You are a helpful assistant"},
                 {"role": "user", "content": "Hello there"}],
    "max_tokens": 6, "ignore_eos": True, "logprobs": True, "chat_template_kwargs": {"thinking": True}})
content = r["choices"][0]["logprobs"]["content"]
check("chat completions (thinking) = ds4ref -p's golden: bytes and logprobs",
      st == 200 and [(bytes(c["bytes"]).hex(), logprob_text(c["logprob"])) for c in content] ==
      [(g["bytes"], logprob_text(g["logprob"])) for g in want_c])

# Reasoning effort: the official "max" is ds4ref -p --think-max's prompt.
want_m = golden(["-p", "Hello there", "-n", "6", "--ignore-eos", "--think-max"])
st, r = s.json("/v1/chat/completions", {
    "messages": [{"role": "system", "content": "You are a helpful assistant"},
                 {"role": "user", "content": "Hello there"}],
    "max_tokens": 6, "ignore_eos": True, "logprobs": True, "reasoning_effort": "max",
    "chat_template_kwargs": {"thinking": True}})
content = r["choices"][0]["logprobs"]["content"]
check("chat with reasoning_effort max = ds4ref -p --think-max's golden",
      st == 200 and [(bytes(c["bytes"]).hex(), logprob_text(c["logprob"])) for c in content] ==
      [(g["bytes"], logprob_text(g["logprob"])) for g in want_m])

# --chat-release 0731: its "high" is the first release's "max" text, and it
# knows "low".
s731 = Server("--chat-release", "0731")
body = {"messages": [{"role": "system", "content": "You are a helpful assistant"},
                     {"role": "user", "content": "Hello there"}],
        "max_tokens": 6, "ignore_eos": True, "logprobs": True, "reasoning_effort": "high",
        "chat_template_kwargs": {"thinking": True}}
st, r = s731.json("/v1/chat/completions", body)
content = r["choices"][0]["logprobs"]["content"]
check("--chat-release 0731: reasoning_effort high = ds4ref -p --think-max's golden",
      st == 200 and [(bytes(c["bytes"]).hex(), logprob_text(c["logprob"])) for c in content] ==
      [(g["bytes"], logprob_text(g["logprob"])) for g in want_m])
st, _ = s731.json("/v1/chat/completions", dict(body, reasoning_effort="low"))
check("... and reasoning_effort low is its default's prompt", st == 200)
check("... stops cleanly", s731.stop()[0] == 0)

# Stop strings end the text where they begin.
full = whole["choices"][0]["text"]
stop = full[3:5]
st, r = s.json("/v1/completions", {"prompt": "Hello there", "max_tokens": 12, "ignore_eos": True,
                                   "stop": stop})
check("a stop string ends the text before it, finish_reason stop",
      st == 200 and r["choices"][0]["finish_reason"] == "stop" and
      r["choices"][0]["text"] == full[:full.find(stop)])

# Bad requests: a 4xx with an OpenAI error, and the server goes on.
bad = [
    ("malformed JSON", "/v1/completions", None, b"{bad", 400, None),
    ("a field of the wrong type", "/v1/completions", {"prompt": "x", "max_tokens": "5"}, None, 400, "max_tokens"),
    ("n > 1", "/v1/completions", {"prompt": "x", "n": 2}, None, 400, "n"),
    ("max_tokens 0", "/v1/completions", {"prompt": "x", "max_tokens": 0}, None, 400, "max_tokens"),
    ("a token outside the vocabulary", "/v1/completions", {"prompt": [1, 10 ** 9]}, None, 400, "prompt"),
    ("a duplicate key", "/v1/completions", None, b'{"prompt": "x", "prompt": "y"}', 400, None),
    ("top_p other than 1", "/v1/completions", {"prompt": "x", "top_p": 0.5}, None, 400, "top_p"),
    ("no messages", "/v1/chat/completions", {"messages": []}, None, 400, "messages"),
    ("an unknown role", "/v1/chat/completions", {"messages": [{"role": "robot", "content": "x"}]}, None, 400, "messages"),
    ("a reasoning_effort the model has not", "/v1/chat/completions",
     {"messages": [{"role": "user", "content": "x"}], "reasoning_effort": "medium"}, None, 400, "reasoning_effort"),
    ("reasoning_effort low, which only 0731's encoder knows", "/v1/chat/completions",
     {"messages": [{"role": "user", "content": "x"}], "reasoning_effort": "low"}, None, 400, "messages"),
    # What the server does not implement is refused by name, never ignored.
    ("best_of", "/v1/completions", {"prompt": "x", "best_of": 2}, None, 400, "best_of"),
    ("suffix", "/v1/completions", {"prompt": "x", "suffix": "y"}, None, 400, "suffix"),
    ("prompt_logprobs in a stream (as vLLM)", "/v1/completions",
     {"prompt": "x", "prompt_logprobs": 1, "stream": True}, None, 400, "prompt_logprobs"),
    ("stream_options without a stream (as OpenAI)", "/v1/completions",
     {"prompt": "x", "stream_options": {"include_usage": True}}, None, 400, "stream_options"),
    ("vLLM's continuous_usage_stats", "/v1/completions",
     {"prompt": "x", "stream": True, "stream_options": {"continuous_usage_stats": True}}, None,
     400, "stream_options"),
    ("max_tokens 0 in chat", "/v1/chat/completions",
     {"messages": [{"role": "user", "content": "x"}], "max_tokens": 0}, None, 400, "max_tokens"),
    ("a model name with a NUL", "/v1/completions", {"prompt": "x", "model": "tiny.gguf\u0000x"},
     None, 400, "model"),
    ("a role with a NUL", "/v1/chat/completions",
     {"messages": [{"role": "user\u0000x", "content": "x"}]}, None, 400, "messages"),
    ("add_special_tokens with messages", "/tokenize",
     {"messages": [{"role": "user", "content": "x"}], "add_special_tokens": True}, None, 400,
     "add_special_tokens"),
    ("tools", "/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}],
                                       "tools": []}, None, 400, "tools"),
    ("response_format", "/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}],
                                                 "response_format": {"type": "json_object"}},
     None, 400, "response_format"),
    ("another model", "/v1/completions", {"prompt": "x", "model": "gpt-4"}, None, 404, "model"),
    ("another model, tokenizing", "/tokenize", {"prompt": "x", "model": "gpt-4"}, None, 404, "model"),
    ("an unknown endpoint", "/v1/nothing", {}, None, 404, None),
    ("GET on a POST endpoint", "/v1/completions", None, None, 405, None),
]
for what, path, body, raw, status, param in bad:
    st, text = s.call(path, body, raw=raw)
    try:
        err = json.loads(text)["error"]
    except Exception:
        err = None
    check(f"{what} -> {status} with an error object" + (f" naming {param}" if param else ""),
          st == status and err is not None and err["message"] and (param is None or err["param"] == param))
st, r = s.json("/v1/completions", {"prompt": "x", "max_tokens": 2, "model": "tiny.gguf", "user": "u"})
check("the server's own model, and OpenAI's user field: 200", st == 200)
st, r = s.json("/v1/completions", {"prompt": "Hello there", "max_tokens": 12, "ignore_eos": True})
check("... and the server still answers as before", st == 200 and r["choices"] == whole["choices"])

# A client that half-closes (shuts its sending side after the request) and
# reads on gets its answer, whole or streamed; it used to be taken for gone.
def half_closed(body):
    raw = json.dumps(body).encode()
    host, port = s.url[len("http://"):].split(":")
    sk = socket.create_connection((host, int(port)), timeout=60)
    sk.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(raw) + raw)
    sk.shutdown(socket.SHUT_WR)
    data = b""
    while True:
        x = sk.recv(65536)
        if not x:
            break
        data += x
    sk.close()
    return data


got = half_closed({"prompt": "Hello", "max_tokens": 200, "ignore_eos": True})
check("a half-closed client gets its whole answer (after an interim 100 Continue)",
      b"HTTP/1.1 200 OK" in got and b'"completion_tokens":200' in got)
got = half_closed({"prompt": "Hello", "max_tokens": 200, "ignore_eos": True, "stream": True})
check("... and its stream to [DONE]", b"HTTP/1.1 200 OK" in got and b"data: [DONE]" in got)

# One that half-closes, reads the first probe and leaves later is seen gone
# too: the probe goes again every 2 s (a single one left its row running to
# the end of its 4000 tokens).
host, port = s.url[len("http://"):].split(":")
sk = socket.create_connection((host, int(port)), timeout=30)
raw = json.dumps({"prompt": "Hello", "max_tokens": 4000, "ignore_eos": True}).encode()
sk.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(raw) + raw)
sk.shutdown(socket.SHUT_WR)
first = sk.recv(64)
sk.close()
t0 = time.time()
freed = False
while time.time() - t0 < 3.0:
    if s.json("/health")[1]["rows"] == 0:
        freed = True
        break
    time.sleep(0.05)
check(f"... one that half-closed, read the probe and left frees its row ({time.time() - t0:.1f} s)",
      first.startswith(b"HTTP/1.1 100 Continue") and freed)

# /metrics in Prometheus' text format: every sample of a declared family,
# histograms cumulative with _count equal to the +Inf bucket, and the
# counters move by what a request did.
def metrics():
    st, text = s.call("/metrics")
    types, samples = {}, {}
    for line in text.decode().splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            types[name] = kind
        elif line and not line.startswith("#"):
            key, value = line.rsplit(" ", 1)
            samples[key] = float(value)
    return st, types, samples


def family(key, types):
    name = key.split("{")[0]
    for suffix in ("_bucket", "_sum", "_count"):
        if name.endswith(suffix) and types.get(name[:-len(suffix)]) == "histogram":
            return name[:-len(suffix)]
    return name


st, types, before = metrics()
s.json("/v1/completions", {"prompt": "Hello", "max_tokens": 7, "ignore_eos": True})
st2, _, after = metrics()
ok = st == 200 and st2 == 200 and all(family(k, types) in types for k in after)
for h in ("ds4ref_e2e_request_latency_seconds", "ds4ref_time_to_first_token_seconds"):
    buckets = [v for k, v in after.items() if k.startswith(h + "_bucket")]
    ok &= buckets == sorted(buckets) and buckets[-1] == after[h + "_count"] > 0
    ok &= after[h + "_count"] == before[h + "_count"] + 1
key = 'ds4ref_requests_total{endpoint="/v1/completions",code="200"}'
ok &= after[key] == before[key] + 1
ok &= after["ds4ref_generation_tokens_total"] == before["ds4ref_generation_tokens_total"] + 7
ok &= after["ds4ref_prompt_tokens_total"] > before["ds4ref_prompt_tokens_total"]
check("/metrics: Prometheus text; a completion moves the counters and histograms by one", ok)

# A client that leaves mid-generation frees its row.
try:
    s.call("/v1/completions", {"prompt": "Hello there", "max_tokens": 4000, "ignore_eos": True}, timeout=0.5)
except Exception:
    pass
freed = False
for _ in range(100):
    if s.json("/health")[1]["rows"] == 0:
        freed = True
        break
    time.sleep(0.1)
check("a client gone mid-generation frees its row", freed)

# SIGTERM with a request in flight: it is cancelled, the server exits 0.
res = {}
th = threading.Thread(target=lambda: res.update(r=s.call("/v1/completions", {
    "prompt": "Hello there", "max_tokens": 4000, "ignore_eos": True})))
th.start()
time.sleep(0.5)
rc, err_text = s.stop()
th.join(timeout=30)
check("SIGTERM with a request in flight: exit 0", rc == 0 and "stopped" in err_text)
check("... the request answered 503", res.get("r", (0,))[0] == 503)

# Queued requests go on when every row ends in the same pass: with one row,
# two overlapping completions both answer; the default server answers a
# request of 17 prompts, one more than its rows (both waited forever when
# the rows that ended were still counted as the queue was looked at).
s = Server("--parallel", "1")
res = {}
body = {"prompt": "Hello", "max_tokens": 3, "ignore_eos": True}
ths = [threading.Thread(target=lambda k=k: res.update({k: s.call("/v1/completions", body, timeout=30)}))
       for k in range(2)]
for th in ths:
    th.start()
for th in ths:
    th.join(timeout=40)
check("--parallel 1: two overlapping completions both answer",
      all(res.get(k, (0,))[0] == 200 for k in range(2)))
s.stop()
s = Server()
st, out = s.call("/v1/completions", {"prompt": ["Hi"] * 17, "max_tokens": 2, "ignore_eos": True},
                 timeout=30)
check(f"a request of 17 prompts on 16 rows answers ({st})",
      st == 200 and len(json.loads(out)["choices"]) == 17)
s.stop()

# Idle and slow clients: connections that send nothing, or a header a byte at
# a time, do not lock others out.  Past --max-connections a request gets a
# 503 at once (never silence); idle ones are closed after --timeout, and a
# client still sending slowly holds its connection, not the server.
s = Server("--timeout", "1", "--max-connections", "40")
host, port = s.url[len("http://"):].split(":")
idle = [socket.create_connection((host, int(port))) for _ in range(48)]
t0 = time.time()
st, _ = s.call("/health", timeout=10)
check(f"48 idle connections over --max-connections 40: /health answers 503 at once ({st})",
      st == 503 and time.time() - t0 < 3)
time.sleep(2.5)
st, _ = s.call("/health", timeout=10)
check(f"... after --timeout they are closed, and /health answers 200 ({st})", st == 200)
closed = 0
for sk in idle:
    sk.settimeout(1)
    try:
        closed += sk.recv(1) == b""
    except OSError:
        closed += 1
    sk.close()
check(f"... the idle connections were closed by the server ({closed}/48)", closed == 48)
s.stop()
# 100 slow-header clients on the default server (they used to take all of its
# 96 connections, and /health timed out for as long as they stayed).
s = Server()
host, port = s.url[len("http://"):].split(":")
slow = [socket.create_connection((host, int(port))) for _ in range(100)]
for sk in slow:
    sk.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
ok = True
for k in range(6):   # 3 s, each slow client sending a header line every half second
    for sk in slow:
        try:
            sk.sendall(b"X-Slow: %d\r\n" % k)
        except OSError:
            pass
    time.sleep(0.5)
    st, _ = s.call("/health", timeout=5)
    ok &= st == 200
st, out = s.call("/v1/completions", {"prompt": "Hello", "max_tokens": 2}, timeout=30)
check(f"100 slow-header clients for 3 s: /health and a completion answer ({ok}, {st})",
      ok and st == 200)
for sk in slow:
    sk.close()
s.stop()

# --timeout is for idle clients, not slow tokens: a stream queued behind a
# long request for longer than the timeout still streams to its end.
s = Server("--timeout", "1", "--parallel", "1")
hold = threading.Thread(target=lambda: s.call("/v1/completions", {
    "prompt": "Hello", "max_tokens": 3000, "ignore_eos": True}, timeout=120))
hold.start()
for _ in range(50):
    if s.json("/health")[1]["rows"] == 1:
        break
    time.sleep(0.05)
t0 = time.time()
st, out = s.call("/v1/completions", {"prompt": "Hi", "max_tokens": 4, "stream": True}, timeout=120)
waited = time.time() - t0
hold.join()
check(f"a stream queued {waited:.1f} s behind a long request, with --timeout 1, streams to its end",
      st == 200 and out.rstrip().endswith(b"data: [DONE]") and waited > 1.5)
s.stop()

# A port in use: one line, the server's, and a non-zero status
# (libmicrohttpd's own bind message used to be printed beside it).
taken = socket.socket()
taken.bind(("127.0.0.1", 0))
taken.listen(1)
r = subprocess.run([os.path.join(BIN, "ds4ref-server"), "-m", MODEL, "--port",
                    str(taken.getsockname()[1])], capture_output=True, text=True, timeout=60)
taken.close()
check(f"a port in use: one line saying so, status {r.returncode}",
      r.returncode != 0 and r.stderr.count("\n") == 1 and "Address already in use" in r.stderr)

# At a full context usage's total is the context: a prompt and its output
# fit it (max_tokens cut to the room left, as vLLM); a prompt of the whole
# context is refused unless it is only scored.
s = Server("-c", "64")
long_prompt = list(range(300, 360))
st, r = s.json("/v1/completions", {"prompt": long_prompt, "max_tokens": 100, "ignore_eos": True})
check(f"-c 64, a prompt of 60: 4 tokens, total_tokens 64 ({r.get('usage')})",
      st == 200 and r["usage"]["completion_tokens"] == 4 and r["usage"]["total_tokens"] == 64)
st, _ = s.json("/v1/completions", {"prompt": list(range(300, 364)), "max_tokens": 1})
st2, r = s.json("/v1/completions", {"prompt": list(range(300, 364)), "max_tokens": 0,
                                    "echo": True, "logprobs": 0})
check(f"... a prompt of 64: refused ({st}), scored with max_tokens 0 ({st2})",
      st == 400 and st2 == 200 and r["usage"]["total_tokens"] == 64)
s.stop()

# Limits: the body, the queue.
s = Server("--max-body", "2048", "--parallel", "1", "--queue", "0")
st, text = s.call("/v1/completions", raw=json.dumps({"prompt": "x" * 4000}).encode())
check("a body over --max-body -> 413", st == 413 and json.loads(text)["error"]["message"])
th = threading.Thread(target=lambda: s.call("/v1/completions", {"prompt": "Hello", "max_tokens": 400,
                                                                "ignore_eos": True}))
th.start()
busy = False
for _ in range(50):
    if s.json("/health")[1]["rows"] == 1:
        busy = True
        break
    time.sleep(0.05)
st, text = s.call("/v1/completions", {"prompt": "x", "max_tokens": 2})
check(f"a request beyond --parallel and --queue -> 429 ({busy}, {st})", busy and st == 429)
s.stop()
# A queued request whose client leaves frees its place in the queue at once.
s = Server("--parallel", "1", "--queue", "1")
th = threading.Thread(target=lambda: s.call("/v1/completions", {"prompt": "Hello", "max_tokens": 2000,
                                                                "ignore_eos": True}))
th.start()
for _ in range(50):
    if s.json("/health")[1]["rows"] == 1:
        break
    time.sleep(0.05)
try:
    s.call("/v1/completions", {"prompt": "x", "max_tokens": 2}, timeout=0.5)
except Exception:
    pass
time.sleep(0.5)
h = s.json("/health")[1]
check(f"a queued request whose client left frees the queue ({h['queued']} queued, {h['rows']} row)",
      h["queued"] == 0 and h["rows"] == 1)
th.join()
rc, _ = s.stop(signal.SIGINT)
check("SIGINT: exit 0", rc == 0)

finished = True
print("server: all passed" if fails == 0 else f"server: {fails} failed")
sys.exit(1 if fails else 0)
