"""A soak of ds4ref-server (make peers; docs/SERVER.md): for SECONDS (default
180) clients of four kinds run together against one server, and every answer
that completes must be the CLI's, token for token and logprob for logprob:

  - whole completions (token-id prompts, logprobs 5), compared with
    `ds4ref --tokens-file --golden-out` for the same prompt and length;
  - streamed ones, their chunks joined, compared with the same goldens;
  - clients that leave mid-answer (closing the socket, whole or streamed);
  - slow clients that send their request a few bytes at a time.

At the end nothing is in flight (/health: no row, nothing queued), the
server still answers, its memory did not grow past twice its size after
warming up, and it exits 0 on SIGTERM.  Only the standard library.

    python3 scripts/peers_soak.py BIN_DIR MODEL [SECONDS]
"""
import json
import os
import random
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

bin_dir, model = sys.argv[1], sys.argv[2]
seconds = float(sys.argv[3]) if len(sys.argv) > 3 else 180
fails = 0


def check(what, ok):
    global fails
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    fails += not ok


def golden(ids, n):
    """The steps of ds4ref --golden-out: (token, logprob as %.17g)."""
    with tempfile.TemporaryDirectory() as d:
        tokens = os.path.join(d, "t.txt")
        with open(tokens, "w") as f:
            f.write(" ".join(map(str, ids)))
        out = os.path.join(d, "g.jsonl")
        subprocess.run([os.path.join(bin_dir, "ds4ref"), "-m", model, "--tokens-file", tokens,
                        "-n", str(n), "--ignore-eos", "--golden-out", out],
                       check=True, capture_output=True)
        with open(out) as f:
            return [(r["token"], "%.17g" % r["logprob"]) for r in map(json.loads, f) if "step" in r]


srv = subprocess.Popen([os.path.join(bin_dir, "ds4ref-server"), "-m", model, "--port", "0",
                        "--timeout", "5"], stderr=subprocess.PIPE, text=True)
url = re.search(r"http://([0-9.]+):([0-9]+)", srv.stderr.readline())
host, port = url.group(1), int(url.group(2))
base = url.group(0)

random.seed(7)
prompts = [[random.randrange(256, 500) for _ in range(random.randrange(3, 40))] for _ in range(6)]
lengths = [8, 13, 21]
want = {(i, n): golden(p, n) for i, p in enumerate(prompts) for n in lengths}


def body(i, n, stream):
    return json.dumps({"prompt": prompts[i], "max_tokens": n, "ignore_eos": True, "logprobs": 5,
                       "return_tokens_as_token_ids": True, "stream": stream}).encode()


def steps(lp):
    return [(int(t.split(":")[1]), "%.17g" % p) for t, p in zip(lp["tokens"], lp["token_logprobs"])]


stats = {"whole": 0, "stream": 0, "left": 0, "slow": 0, "wrong": 0, "errors": 0}
lock = threading.Lock()
stop_at = time.time() + seconds


def count(key, what=None):
    with lock:
        stats[key] += 1
        if what and stats["wrong"] + stats["errors"] <= 5:
            print(f"     {what}", flush=True)


def whole():
    while time.time() < stop_at:
        i, n = random.randrange(len(prompts)), random.choice(lengths)
        try:
            req = urllib.request.Request(base + "/v1/completions", data=body(i, n, False))
            r = json.load(urllib.request.urlopen(req, timeout=300))
            got = steps(r["choices"][0]["logprobs"])
            count("whole") if got == want[(i, n)] else count("wrong", f"whole {i} {n}: {got[:2]}")
        except Exception as e:  # noqa: BLE001
            count("errors", f"whole: {e!r}")


def streamed():
    while time.time() < stop_at:
        i, n = random.randrange(len(prompts)), random.choice(lengths)
        try:
            req = urllib.request.Request(base + "/v1/completions", data=body(i, n, True))
            raw = urllib.request.urlopen(req, timeout=300).read().decode()
            chunks = [json.loads(line[6:]) for line in raw.split("\n")
                      if line.startswith("data: ") and line != "data: [DONE]"]
            got = sum((steps(c["choices"][0]["logprobs"]) for c in chunks if c["choices"]), [])
            ok = got == want[(i, n)] and raw.rstrip().endswith("data: [DONE]")
            count("stream") if ok else count("wrong", f"stream {i} {n}: {got[:2]}")
        except Exception as e:  # noqa: BLE001
            count("errors", f"stream: {e!r}")


def leaving():
    while time.time() < stop_at:
        i = random.randrange(len(prompts))
        raw = json.dumps({"prompt": prompts[i], "max_tokens": 2000, "ignore_eos": True,
                          "stream": random.random() < 0.5}).encode()
        try:
            sk = socket.create_connection((host, port), timeout=30)
            sk.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n"
                       % len(raw) + raw)
            time.sleep(random.uniform(0.05, 0.5))
            sk.close()
            count("left")
        except OSError as e:
            count("errors", f"leaving: {e!r}")
        time.sleep(0.2)


def slow():
    while time.time() < stop_at:
        i, n = random.randrange(len(prompts)), random.choice(lengths)
        raw = body(i, n, False)
        msg = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
               b"Content-Length: %d\r\n\r\n" % len(raw) + raw)
        try:
            sk = socket.create_connection((host, port), timeout=300)
            for k in range(0, len(msg), 40):
                sk.sendall(msg[k:k + 40])
                time.sleep(0.05)
            data = b""
            while True:
                x = sk.recv(65536)
                if not x:
                    break
                data += x
            sk.close()
            r = json.loads(data.split(b"\r\n\r\n", 1)[1])
            got = steps(r["choices"][0]["logprobs"])
            count("slow") if got == want[(i, n)] else count("wrong", f"slow {i} {n}")
        except Exception as e:  # noqa: BLE001
            count("errors", f"slow: {e!r}")


def rss_kb():
    with open(f"/proc/{srv.pid}/status") as f:
        return int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1))


threads = [threading.Thread(target=f) for f in (whole, whole, streamed, streamed, leaving, slow)]
for t in threads:
    t.start()
time.sleep(min(20, seconds / 4))
warm = rss_kb()
for t in threads:
    t.join()
for _ in range(600):
    h = json.load(urllib.request.urlopen(base + "/health", timeout=30))
    if h["rows"] == 0 and h["queued"] == 0:
        break
    time.sleep(0.1)
late = rss_kb()
print(f"soak: {seconds:.0f} s: {stats['whole']} whole, {stats['stream']} streamed, "
      f"{stats['slow']} slow answers; {stats['left']} clients left; RSS {warm} -> {late} kB",
      flush=True)
check("every answer is the CLI's, token for token and logprob for logprob",
      stats["wrong"] == 0 and stats["whole"] > 0 and stats["stream"] > 0 and stats["slow"] > 0)
check(f"no client failed ({stats['errors']} errors)", stats["errors"] == 0)
check("nothing is left in flight afterwards", h["rows"] == 0 and h["queued"] == 0)
check("memory did not grow past twice its size after warming up", late < 2 * warm)
srv.terminate()
check("the server exits 0 on SIGTERM", srv.wait(timeout=60) == 0)
sys.exit(1 if fails else 0)
