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
    ("prompt_logprobs", "/v1/completions", {"prompt": "x", "prompt_logprobs": 1}, None, 400,
     "prompt_logprobs"),
    ("stream_options", "/v1/completions", {"prompt": "x", "stream": True,
                                           "stream_options": {"include_usage": True}}, None, 400,
     "stream_options"),
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
th.join()
rc, _ = s.stop(signal.SIGINT)
check("SIGINT: exit 0", rc == 0)

finished = True
print("server: all passed" if fails == 0 else f"server: {fails} failed")
sys.exit(1 if fails else 0)
