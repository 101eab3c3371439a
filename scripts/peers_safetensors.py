"""The safetensors library (huggingface/safetensors, from PyPI) writes a
checkpoint in the published layout; ckpt-dump prints what ds4ref reads of
it. They must agree on every tensor's name, dtype, shape and byte count,
and on every FP8 and FP4 weight dequantized, which this script computes
itself from the formats' definitions (numpy, in double).

Usage: peers_safetensors.py CKPT_DUMP WORKDIR   (safetensors importable)
Exit status 0 when everything agrees, 1 otherwise."""
import json
import os
import subprocess
import sys

import numpy as np
from safetensors import TensorSpec, serialize_file

E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


def e4m3(b):
    s, e, m = b >> 7, (b >> 3) & 15, b & 7
    v = 2.0 ** (e - 7) * (1 + m / 8) if e else 2.0 ** -6 * (m / 8)
    return -v if s else v


def fp8_weight(rng, out, inp):
    w = rng.integers(0, 256, size=(out, inp), dtype=np.uint8)
    w[(w & 0x7F) == 0x7F] = 0x38
    s = rng.integers(110, 141, size=(-(-out // 128), -(-inp // 128)), dtype=np.uint8)
    want = [e4m3(int(w[r, k])) * 2.0 ** (int(s[r // 128, k // 128]) - 127)
            for r in range(out) for k in range(inp)]
    return w, s, want


def fp4_weight(rng, out, inp):
    w = rng.integers(0, 256, size=(out, inp // 2), dtype=np.uint8)
    s = rng.integers(110, 141, size=(out, inp // 32), dtype=np.uint8)
    want = []
    for r in range(out):
        for k in range(inp):
            byte = int(w[r, k // 2])
            code = byte & 15 if k % 2 == 0 else byte >> 4
            v = E2M1[code & 7] * 2.0 ** (int(s[r, k // 32]) - 127)
            want.append(-v if code & 8 else v)
    return w, s, want


def spec(dtype, arr):
    return TensorSpec(dtype=dtype, shape=list(arr.shape), data_ptr=arr.ctypes.data,
                      data_len=arr.nbytes)


def main():
    dump, work = sys.argv[1], sys.argv[2]
    rng = np.random.default_rng(7)
    wq, wq_s, wq_want = fp8_weight(rng, 130, 260)
    ex, ex_s, ex_want = fp4_weight(rng, 3, 64)
    embed = rng.integers(0, 65536, size=(5, 4), dtype=np.uint16)
    tid = rng.integers(0, 256, size=(4, 6), dtype=np.int64)
    hc = rng.standard_normal((4, 16)).astype(np.float32)
    ex_i8 = ex.view(np.int8)
    shards = {
        "model-00001-of-00002.safetensors": {
            "layers.0.attn.wq_a.weight": spec("float8_e4m3fn", wq),
            "layers.0.attn.wq_a.scale": spec("float8_e8m0fnu", wq_s),
            "embed.weight": spec("bfloat16", embed),
        },
        "model-00002-of-00002.safetensors": {
            "layers.0.ffn.experts.0.w1.weight": spec("int8", ex_i8),
            "layers.0.ffn.experts.0.w1.scale": spec("float8_e8m0fnu", ex_s),
            "layers.0.ffn.gate.tid2eid": spec("int64", tid),
            "hc_head_fn": spec("float32", hc),
        },
    }
    want_types = {
        "layers.0.attn.wq_a.weight": "F8_E4M3", "layers.0.attn.wq_a.scale": "F8_E8M0",
        "embed.weight": "BF16", "layers.0.ffn.experts.0.w1.weight": "I8",
        "layers.0.ffn.experts.0.w1.scale": "F8_E8M0", "layers.0.ffn.gate.tid2eid": "I64",
        "hc_head_fn": "F32",
    }
    weight_map, total, shapes = {}, 0, {}
    for shard, tensors in shards.items():
        serialize_file(tensors, os.path.join(work, shard), metadata={"format": "pt"})
        for name, t in tensors.items():
            weight_map[name] = shard
            total += t.data_len
            shapes[name] = (list(t.shape), t.data_len)
    with open(os.path.join(work, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
    with open(os.path.join(work, "config.json"), "w") as f:
        json.dump({"hidden_size": 4096}, f)

    out = subprocess.run([dump, work], capture_output=True, text=True)
    bad = 0
    if out.returncode:
        print("FAIL ckpt-dump:", out.stderr.strip())
        return 1
    seen, values = {}, {}
    for line in out.stdout.splitlines():
        f = line.split()
        if f[0] == "tensor":
            seen[f[1]] = (f[2], [int(x) for x in f[3].split(",")], int(f[4]))
        elif f[0] == "values":
            values[f[1]] = np.array([float(x) for x in f[2:]], dtype=np.float64)
    for name, dtype in want_types.items():
        got = seen.get(name)
        exp = (dtype, shapes[name][0], shapes[name][1])
        if got != exp:
            print(f"FAIL {name}: ds4ref read {got}, the library wrote {exp}")
            bad = 1
    if set(seen) != set(want_types):
        print(f"FAIL tensors: ds4ref read {sorted(seen)}")
        bad = 1
    for name, want in (("layers.0.attn.wq_a.weight", wq_want),
                       ("layers.0.ffn.experts.0.w1.weight", ex_want)):
        got = values.get(name)
        want = np.array(want, dtype=np.float64)
        if got is None or got.shape != want.shape or not np.array_equal(got, want):
            print(f"FAIL {name}: dequantized values differ from the definition")
            bad = 1
        else:
            print(f"ok   {name}: {want.size} values dequantized exactly")
    if not bad:
        print(f"ok   {len(seen)} tensors in 2 shards: names, dtypes, shapes, bytes as written")
    return bad


if __name__ == "__main__":
    sys.exit(main())
