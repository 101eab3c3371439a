"""The official DeepSeek V4 inference code in float64 on a checkpoint in the
release's layout: the reference logits of vectors/official-ckpt
(its README says how they were made and what the tests do with them).

The official files (model.py, kernel.py, fast_hadamard_transform.py and the
package's __init__.py, as AI-Hypercomputer/maxtext vendors them at commit
8ddb0a60 under tests/utils/deepseek4_reference/) are imported unmodified
from REF/tests/utils/deepseek4_reference, and their sha256 goes into the
manifest.  The checkpoint is read the way the release's inference/ reads
it: safetensors files, then convert.py's steps for one rank (the MTP
layer's copies of embed/head dropped, wo_a dequantized to BF16, the FP4
experts' int8 bytes viewed as float4_e2m1fn_x2), then load_state_dict
into model.py's Transformer.  Nothing of ds4ref reads or computes anything
here.

What this script supplies:
  * ModelArgs from config.json (the release ships inference/config.json in
    model.py's names; this maps the HF names to them);
  * fp8_gemm and fp4_gemm, which the vendored kernel.py leaves
    unimplemented: the exact product of the dequantized activation (when
    act_quant quantized it) and the dequantized weight, summed in float64;
    in QAT mode the result is rounded to BF16, the dtype the release's
    kernels write (their C tensor is the default dtype, BF16);
  * float64: parameters that are not FP8/FP4/E8M0 are made float64 after
    loading, and the package's fp64_promotion() keeps model.py's .float()
    upcasts float64 (the RoPE tables and the QAT scales stay float32, as
    in the official code);
  * the head returns every position's logits (get_logits takes x[:, -1]);
  * the hash gate's tid2eid as int64 (the same ids; gather's index type);
  * model.default_dtype set to float64 once the model is built (it then
    only feeds rotate_activation's dtype check, see build()).

Usage (torch >= 2.7 for the float8_e8m0fnu and float4 dtypes; safetensors):
  python3 official_ckpt.py --ref REF --ckpt DIR --tokens FILE --out OUTDIR
Writes OUTDIR/logits_prefill.qat_{off,on}.f64 [n][vocab],
OUTDIR/mtp_logits.qat_{off,on}.f64 [n-1][vocab] (row i = MTP(h[i], ids[i+1]),
the pairing of vectors/official) and OUTDIR/manifest.json."""
import argparse
import glob
import hashlib
import json
import os
import sys


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        h.update(f.read())
    return h.hexdigest()


def model_args(model, cfg, n_pos):
    """model.py's ModelArgs from the HF config.json of the checkpoint."""
    rs = cfg.get("rope_scaling") or {}
    q = cfg.get("quantization_config")
    return model.ModelArgs(
        max_batch_size=1,
        max_seq_len=(n_pos + 127) // 128 * 128,
        dtype="fp8" if q else "fp32",
        scale_fmt="ue8m0",
        expert_dtype=cfg.get("expert_dtype") if q else None,
        scale_dtype="fp8",
        vocab_size=cfg["vocab_size"],
        dim=cfg["hidden_size"],
        moe_inter_dim=cfg["moe_intermediate_size"],
        n_layers=cfg["num_hidden_layers"],
        n_hash_layers=cfg["num_hash_layers"],
        n_mtp_layers=cfg["num_nextn_predict_layers"],
        n_heads=cfg["num_attention_heads"],
        n_routed_experts=cfg["n_routed_experts"],
        n_shared_experts=cfg["n_shared_experts"],
        n_activated_experts=cfg["num_experts_per_tok"],
        score_func=cfg["scoring_func"],
        route_scale=cfg["routed_scaling_factor"],
        swiglu_limit=cfg["swiglu_limit"],
        q_lora_rank=cfg["q_lora_rank"],
        head_dim=cfg["head_dim"],
        rope_head_dim=cfg["qk_rope_head_dim"],
        norm_eps=cfg["rms_norm_eps"],
        o_groups=cfg["o_groups"],
        o_lora_rank=cfg["o_lora_rank"],
        window_size=cfg["sliding_window"],
        compress_ratios=tuple(cfg["compress_ratios"]),
        compress_rope_theta=cfg["compress_rope_theta"],
        original_seq_len=rs.get("original_max_position_embeddings", 0),
        rope_theta=cfg["rope_theta"],
        rope_factor=rs.get("factor", 1),
        beta_fast=rs.get("beta_fast", 32),
        beta_slow=rs.get("beta_slow", 1),
        index_n_heads=cfg["index_n_heads"],
        index_head_dim=cfg["index_head_dim"],
        index_topk=cfg["index_topk"],
        hc_mult=cfg["hc_mult"],
        hc_sinkhorn_iters=cfg["hc_sinkhorn_iters"],
        hc_eps=cfg["hc_eps"],
    )


def converted_state(torch, ckpt, expert_dtype):
    """convert.py's state dict for one rank (mp = 1)."""
    from safetensors.torch import load_file
    index = json.load(open(os.path.join(ckpt, "model.safetensors.index.json")))
    files = sorted(set(index["weight_map"].values()))
    state = {}
    for f in files:
        for name, t in load_file(os.path.join(ckpt, f)).items():
            if name.startswith("model."):
                name = name[len("model."):]
            # the MTP layer ties its embedding and head to the trunk's
            if name.startswith("mtp.") and name.split(".", 2)[-1] in ("embed.weight", "head.weight"):
                continue
            state[name] = t
    missing = set(index["weight_map"]) - set(state) - {n for n in index["weight_map"]
                                                       if n.startswith("mtp.") and n.endswith(("embed.weight", "head.weight"))}
    if missing:
        sys.exit("official_ckpt: tensors of the index that no shard has: %s" % sorted(missing)[:5])
    for name in list(state):
        if name.endswith("wo_a.weight") and (name[:-len("weight")] + "scale") in state:
            w = state[name]
            s = state.pop(name[:-len("weight")] + "scale")
            bo, bi = w.size(0) // s.size(0), w.size(1) // s.size(1)
            w = w.unflatten(0, (-1, bo)).unflatten(-1, (-1, bi)).float() * s[:, None, :, None].float()
            state[name] = w.flatten(2, 3).flatten(0, 1).bfloat16()
        elif "experts" in name and state[name].dtype == torch.int8 and expert_dtype == "fp4":
            state[name] = state[name].view(torch.float4_e2m1fn_x2)
    return state


def e8m0_to_double(torch, s):
    """A UE8M0 scale's value, 2^(byte - 127), from its definition."""
    return torch.pow(2.0, s.view(torch.uint8).double() - 127)


def make_gemms(torch, kernel):
    """fp8_gemm and fp4_gemm in float64 (module docstring)."""
    fp4_values = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
                               -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0], dtype=torch.float64)

    def activation(x, s, block):
        if s is None:           # train mode: act_quant returned x as it is
            return x.double()
        return x.double() * e8m0_to_double(torch, s).repeat_interleave(block, -1)

    def finish(y, s):
        return y.to(torch.bfloat16).double() if kernel.MODE == "qat" else y

    def fp8_gemm(x, s, w, ws, scale_dtype):
        n, k = w.shape
        scale = e8m0_to_double(torch, ws).repeat_interleave(128, 0)[:n].repeat_interleave(128, 1)[:, :k]
        return finish(activation(x, s, 128) @ (w.double() * scale).T, s)

    def fp4_gemm(x, s, w, ws, scale_dtype):
        b = w.view(torch.uint8).long()
        vals = torch.stack([fp4_values[b & 15], fp4_values[b >> 4]], dim=-1).flatten(-2)
        scale = e8m0_to_double(torch, ws).repeat_interleave(32, 1)
        return finish(activation(x, s, 128) @ (vals * scale).T, s)

    return fp8_gemm, fp4_gemm


def build(torch, pkg, args, state):
    model = pkg.model
    torch.set_default_dtype(torch.float64)
    m = model.Transformer(args)
    result = m.load_state_dict(state, strict=False)
    buffers = {n for n, _ in m.named_buffers()}
    # The MTP blocks hold the trunk's embed and head (Transformer.__init__):
    # the same parameters under a second name, loaded under the first.
    tied = {n for n in result.missing_keys
            if n.startswith("mtp.") and n.split(".", 2)[-1] in ("embed.weight", "head.weight")}
    missing = [n for n in result.missing_keys if n not in buffers and n not in tied]
    if missing or result.unexpected_keys:
        sys.exit("official_ckpt: missing %s, unexpected %s" % (missing[:8], result.unexpected_keys[:8]))
    quantized = (torch.float8_e4m3fn, torch.float4_e2m1fn_x2, torch.float8_e8m0fnu)
    for p in m.parameters():
        if p.is_floating_point() and p.dtype not in quantized:
            p.data = p.data.double()
    for b in m.buffers():
        if b.is_floating_point():
            b.data = b.data.double()
    # The hash gate gathers with tid2eid's int32 rows; int64 holds the same ids.
    for mod in m.modules():
        if isinstance(mod, model.Gate) and mod.hash:
            mod.tid2eid.data = mod.tid2eid.data.long()
    # Built, the Linears keep their FP8/FP4 weights; model.default_dtype is
    # now read only by rotate_activation's dtype check, which the vendored
    # [CHANGE] line means to pass for the compute dtype (float64 here; the
    # release computes in BF16 and builds with FP8 Linears).
    model.default_dtype = torch.float64
    m.eval()
    return m


def run(torch, pkg, args, state, ids, qat):
    model, kernel = pkg.model, pkg.kernel
    kernel.set_mode("qat" if qat else "train")
    m = build(torch, pkg, args, state)
    seen = []
    trunk_head = m.head.forward

    def head(x, *a):
        seen.append(x.clone())
        return trunk_head(x, *a)

    m.head.forward = head
    with pkg.fp64_promotion(), torch.inference_mode():
        logits = m(ids)
        h = seen[0]
        mtp = m.mtp[0](h[:, :-1], 0, ids[:, 1:])
    return logits[0].double(), mtp[0].double()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ref", required=True)
    ap.add_argument("--ckpt", required=True)
    ap.add_argument("--tokens", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    try:
        import torch
        import safetensors  # noqa: F401
    except ImportError as e:
        sys.exit("official_ckpt: %s (torch >= 2.7 and safetensors are needed)" % e)
    for dt in ("float8_e4m3fn", "float8_e8m0fnu", "float4_e2m1fn_x2"):
        if not hasattr(torch, dt):
            sys.exit("official_ckpt: torch %s has no %s (2.7 or later is needed)" % (torch.__version__, dt))
    sys.path.insert(0, os.path.abspath(a.ref))
    import tests.utils.deepseek4_reference as pkg
    from torch.nn import functional as F
    pkg.model.ParallelHead.get_logits = lambda self, x: F.linear(x.float(), self.weight)
    fp8_gemm, fp4_gemm = make_gemms(torch, pkg.kernel)
    pkg.model.fp8_gemm, pkg.model.fp4_gemm = fp8_gemm, fp4_gemm

    cfg = json.load(open(os.path.join(a.ckpt, "config.json")))
    ids = [int(t) for t in open(a.tokens).read().split()]
    args = model_args(pkg.model, cfg, len(ids))
    state = converted_state(torch, a.ckpt, args.expert_dtype)
    tid = torch.tensor([ids], dtype=torch.long)
    os.makedirs(a.out, exist_ok=True)
    for qat in (False, True):
        logits, mtp = run(torch, pkg, args, state, tid, qat)
        tag = "qat_on" if qat else "qat_off"
        logits.numpy().astype("<f8").tofile(os.path.join(a.out, "logits_prefill.%s.f64" % tag))
        mtp.numpy().astype("<f8").tofile(os.path.join(a.out, "mtp_logits.%s.f64" % tag))
        top = logits.argmax(-1)
        print("official_ckpt: %s: %d positions, logits %s, rms %.4f, argmax of the last %d" %
              (tag, len(ids), tuple(logits.shape), float(logits.pow(2).mean().sqrt()), int(top[-1])))
    here = os.path.join(os.path.abspath(a.ref), "tests/utils/deepseek4_reference")
    manifest = {
        "torch": torch.__version__,
        "python": sys.version.split()[0],
        "model_args": {k: getattr(args, k) for k in args.__dataclass_fields__},
        "official_files_sha256": {os.path.basename(p): sha256(p)
                                  for p in sorted(glob.glob(os.path.join(here, "*.py")))},
        "checkpoint_sha256": {os.path.basename(p): sha256(p)
                              for p in sorted(glob.glob(os.path.join(a.ckpt, "*")))},
        "tokens": len(ids),
    }
    with open(os.path.join(a.out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
