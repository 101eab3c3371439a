"""lm-evaluation-harness (PyPI) against ds4ref-server: a loglikelihood task
(multiple choice, three items, from a local file) through `lm_eval --model
local-completions`, and every loglikelihood it reports recomputed from
ds4ref's own logits (`ds4ref --tokens-file --logits-out`, log-softmax in
Python) for the same tokens.

    python3 scripts/peers_lmeval.py BIN_DIR MODEL WORK_DIR

MODEL is models/tiny.gguf; its vocabulary goes to lm-eval as a Hugging Face
tokenizer (the tokenizer.json `ds4ref-mkmodel --format hf` writes for the
same synthetic model), checked first to split text as ds4ref does.  lm-eval
sends token ids (tokenized_requests), reads the echoed prompt's logprobs,
and sums the continuation's.  The task runs twice: with that tokenizer, and
with lm-eval's remote tokenizer (tokenizer_backend=remote: the server's
/tokenizer_info, /tokenize and /detokenize).  Exit status 0 when all hold."""
import glob
import json
import math
import os
import re
import struct
import subprocess
import sys

bin_dir, model, work = sys.argv[1], sys.argv[2], sys.argv[3]
tool = lambda name: os.path.join(bin_dir, name)  # noqa: E731
fails = 0


def check(what, ok):
    global fails
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    fails += not ok


os.makedirs(work, exist_ok=True)
subprocess.run([tool("ds4ref-mkmodel"), "--config", "tiny", "--format", "hf", "--no-mtp", "-o",
                os.path.join(work, "ck")], check=True, capture_output=True)
tok_dir = os.path.join(work, "tok")
os.makedirs(tok_dir, exist_ok=True)
os.replace(os.path.join(work, "ck", "tokenizer.json"), os.path.join(tok_dir, "tokenizer.json"))
with open(os.path.join(tok_dir, "tokenizer_config.json"), "w") as f:
    json.dump({"tokenizer_class": "PreTrainedTokenizerFast"}, f)

from transformers import AutoTokenizer  # noqa: E402

tok = AutoTokenizer.from_pretrained(tok_dir)
text = "The capital of Italy is Rome.\n\n  x 123456 \u65e5\u672c\u8a9e"
with open(os.path.join(work, "t.txt"), "w") as f:
    f.write(text)
ours = subprocess.run([tool("ds4ref"), "-m", model, "--tokenize-file", os.path.join(work, "t.txt")],
                      check=True, capture_output=True, text=True).stdout.split()
check("tokenizers loads the tokenizer.json ds4ref-mkmodel writes, and splits as ds4ref does",
      [str(i) for i in tok.encode(text, add_special_tokens=False)] == ours)

items = [("The capital of Italy is", [" Rome", " Paris", " Berlin"]),
         ("Two plus two is", [" four", " five"]), ("The sky is", [" blue", " green", " loud"])]
with open(os.path.join(work, "items.jsonl"), "w") as f:
    for q, c in items:
        f.write(json.dumps({"question": q, "choices": c, "answer": 0}) + "\n")
os.makedirs(os.path.join(work, "tasks"), exist_ok=True)
with open(os.path.join(work, "tasks", "ds4ref_tiny.yaml"), "w") as f:
    f.write(f"""task: ds4ref_tiny
dataset_path: json
dataset_kwargs:
  data_files:
    test: {work}/items.jsonl
test_split: test
output_type: multiple_choice
doc_to_text: "{{{{question}}}}"
doc_to_choice: "{{{{choices}}}}"
doc_to_target: "{{{{answer}}}}"
metric_list:
  - metric: acc
""")

srv = subprocess.Popen([tool("ds4ref-server"), "-m", model, "--port", "0"], stderr=subprocess.PIPE,
                       text=True)
backends = {"out": f"tokenizer_backend=huggingface,tokenizer={tok_dir}",
            "out-remote": "tokenizer_backend=remote"}
try:
    url = re.search(r"http://[0-9.]+:[0-9]+", srv.stderr.readline()).group(0)
    env = dict(os.environ, HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1")
    for out_dir, backend in backends.items():
        run = subprocess.run([sys.executable, "-m", "lm_eval", "--model", "local-completions",
                              "--model_args", f"model=tiny.gguf,base_url={url}/v1/completions,"
                              f"{backend},tokenized_requests=True",
                              "--tasks", "ds4ref_tiny", "--include_path",
                              os.path.join(work, "tasks"), "--output_path",
                              os.path.join(work, out_dir), "--log_samples"],
                             capture_output=True, text=True, env=env, cwd=work)
        check(f"lm_eval --model local-completions ({backend.split(',')[0]}) runs a "
              "loglikelihood task against ds4ref-server",
              run.returncode == 0 and "ds4ref_tiny" in run.stdout)
        if run.returncode:
            print(run.stderr[-2000:])
finally:
    srv.terminate()
    srv.wait(timeout=60)

V = 512


def loglik(context, continuation):
    """As lm-eval's _encode_pair splits it, from ds4ref's logits."""
    n_space = len(context) - len(context.rstrip())
    if n_space:
        continuation = context[-n_space:] + continuation
        context = context[:-n_space]
    whole = tok.encode(context + continuation, add_special_tokens=False)
    n_ctx = len(tok.encode(context, add_special_tokens=False))
    ids = os.path.join(work, "ids.txt")
    with open(ids, "w") as f:
        f.write(" ".join(map(str, whole)))
    out = os.path.join(work, "logits.f32")
    subprocess.run([tool("ds4ref"), "-m", model, "--tokens-file", ids, "-n", "0", "--logits-out", out],
                   check=True, capture_output=True)
    with open(out, "rb") as f:
        raw = f.read()
    total = 0.0
    for i in range(n_ctx, len(whole)):
        row = struct.unpack_from(f"<{V}f", raw, 4 * V * (i - 1))
        m = max(row)
        lse = m + math.log(sum(math.exp(x - m) for x in row))
        total += row[whole[i]] - lse
    return total


for out_dir in backends:
    samples = [json.loads(line)
               for p in glob.glob(os.path.join(work, out_dir, "*", "samples_*.jsonl"))
               for line in open(p)]
    worst = 0.0
    for s in samples:
        for k, (resp,) in zip(sorted(s["arguments"]), s["resps"]):
            a = s["arguments"][k]
            worst = max(worst, abs(float(resp[0]) - loglik(a["arg_0"], a["arg_1"])))
    n = sum(len(s["resps"]) for s in samples)
    check(f"{out_dir}: its {n} loglikelihoods are ds4ref's own for the same tokens "
          f"(max |diff| {worst:.1e} <= 1e-9)", n == 8 and worst <= 1e-9)
sys.exit(1 if fails else 0)
