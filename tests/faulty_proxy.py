"""A faulty engine for ds4ref-conform's server tests: an HTTP proxy in front
of a real server that breaks its answers under one condition only.

    python3 tests/faulty_proxy.py --mode batch|cache --port PORT -- SERVER_COMMAND...

It starts SERVER_COMMAND (which must print "listening on http://HOST:PORT"
on stderr, as ds4ref-server does with --port 0), listens on PORT of the
loopback and forwards every request to it.  --mode batch: a completion
answered while another completion was in flight at any moment of its life
gets its third token's logprob, and that token's entry among the
alternatives, raised by 0.25 (a chat completion, which ds4's dialect reads
as text alone, gets a "Q" put into its text after the third character):
exactly the cells with several rows must fail.  --mode cache: the same to a completion whose prompt it has seen
before (a prefix cache that changes logits): exactly the warm cells must
fail.  It stops its server when it gets SIGTERM."""
import argparse
import http.server
import json
import re
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request

ap = argparse.ArgumentParser()
ap.add_argument("--mode", choices=["batch", "cache"], required=True)
ap.add_argument("--port", type=int, required=True)
ap.add_argument("cmd", nargs="+")
args = ap.parse_args()

upstream = subprocess.Popen(args.cmd, stderr=subprocess.PIPE, text=True)
line = upstream.stderr.readline()
m = re.search(r"http://[0-9.]+:[0-9]+", line)
if not m:
    sys.exit(f"faulty_proxy: the server did not start: {line!r}")
base = m.group(0)

lock = threading.Lock()
in_flight = 0
generation = 0   # bumped whenever a completion starts while another runs
seen = set()     # the prompts of the completions so far (--mode cache)


def perturb(body):
    r = json.loads(body)
    if "message" in r["choices"][0]:
        msg = r["choices"][0]["message"]
        msg["content"] = msg["content"][:3] + "Q" + msg["content"][3:]
        return json.dumps(r).encode()
    lp = r["choices"][0]["logprobs"]
    if len(lp["tokens"]) > 2:
        tok = lp["tokens"][2]
        lp["token_logprobs"][2] += 0.25
        if tok in lp["top_logprobs"][2]:
            lp["top_logprobs"][2][tok] += 0.25
    return json.dumps(r).encode()


class Proxy(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def forward(self, data):
        global in_flight, generation
        completion = self.path.endswith("/completions")
        asked = json.loads(data) if completion and data else {}
        prompt = json.dumps(asked.get("prompt", asked.get("messages"))) if completion and data else None
        with lock:
            repeated = prompt in seen
            if prompt is not None:
                seen.add(prompt)
            if completion:
                in_flight += 1
                if in_flight > 1:
                    generation += 1
            start = generation
            crowded = completion and in_flight > 1
        try:
            req = urllib.request.Request(base + self.path, data=data,
                                         headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(req) as r:
                    status, body = r.status, r.read()
            except urllib.error.HTTPError as e:
                status, body = e.code, e.read()
        finally:
            with lock:
                if completion:
                    in_flight -= 1
                crowded = crowded or generation != start or in_flight > 0
        if completion and status == 200 and (crowded if args.mode == "batch" else repeated):
            body = perturb(body)
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        self.forward(None)

    def do_POST(self):
        self.forward(self.rfile.read(int(self.headers.get("Content-Length", 0))))


srv = http.server.ThreadingHTTPServer(("127.0.0.1", args.port), Proxy)


def stop(*_):
    threading.Thread(target=srv.shutdown).start()


signal.signal(signal.SIGTERM, stop)
try:
    srv.serve_forever()
finally:
    upstream.terminate()
    upstream.wait(timeout=30)
