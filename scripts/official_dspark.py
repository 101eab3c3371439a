"""The DSpark drafter of DeepSeek-V4-Flash-0731 in float64, on the official
code: the reference of vectors/official/dspark (vectors/official/README.md,
"dspark/", says how it was made and what the tests do with it).

The trunk is the official model.py as official_ckpt.py runs it (maxtext
8ddb0a60's vendored files, imported unmodified; the checkpoint read through
convert.py's steps; fp8_gemm/fp4_gemm exact in float64), on the tiny-dspark
checkpoint (`ds4ref-mkmodel --config tiny-dspark --types f32 --no-mtp
--format hf`).  That model.py is the first release's and has no DSpark, so
the 0731 release's DSpark classes are written here as its inference/model.py
reads (docs/SPECULATIVE.md section 8), on top of the official ones:

  * DSparkAttention: an official Attention (window-only, RoPE without YaRN)
    whose start_pos == 0 call only writes main_x's KV rows into its window
    cache, and whose later call writes the row of start_pos and attends the
    block's queries over get_dspark_topk_idxs: the window's slots
    [0, min(window, start_pos + 1)) and every row of the block;
  * DSparkBlock: the official Block around it (stage 0 adds main_proj and
    main_norm; the last stage norm, hc_head_*, the Markov head markov_w1 /
    markov_w2 and the confidence head's proj);
  * forward_embed, the stages and forward_head: main_x = main_norm(main_proj(
    cat of the target layers' h.mean(dim=2))), [anchor, noise...] embedded
    into every HC copy, the stages, then hc_head, norm, the trunk's head,
    and logits[i] += markov_w2 . markov_w1[prev] token by token (argmax),
    confidence = proj(cat(hc_head output, markov_w1[prev])).
Everything those call (RMSNorm, Linear with FP8/FP4 weights and act_quant,
sparse_attn, apply_rotary_emb, hc_pre/hc_post and Sinkhorn, MoE, hc_head,
the trunk's embedding and head) is the official code's.

For each anchor P of --anchors, the drafts after the committed tokens
ids[0..P) and x = ids[P]: the stages' windows hold the context rows of
positions [0, P) (a prefill of P - 1 rows, then the block call at
start_pos = P - 1), the block sits at positions P..P+B-1.

Usage (torch with float4_e2m1fn_x2, which 2.7.1 lacks: 2.11.0 made the vectors; safetensors):
  python3 official_dspark.py --ref REF --ckpt DIR --tokens FILE --anchors 2,9,... --out OUTDIR
Writes OUTDIR/base_logits.qat_{off,on}.f64 [anchors][block][vocab] (before
the Markov term), OUTDIR/confidence.qat_{off,on}.f64 [anchors][block],
OUTDIR/drafts.qat_{off,on}.txt (a line of block draft ids per anchor) and
OUTDIR/manifest.json."""
import argparse
import dataclasses
import glob
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import official_ckpt as oc  # noqa: E402


def dspark_classes(torch, model):
    nn, F = torch.nn, torch.nn.functional

    class DSparkAttention(model.Attention):
        def forward(self, x, start_pos, main_x):
            assert self.compress_ratio == 0
            bsz, seqlen, _ = main_x.size()
            win, rd = self.window_size, self.rope_head_dim
            main_kv = self.kv_norm(self.wkv(main_x))
            model.apply_rotary_emb(main_kv[..., -rd:], self.freqs_cis[start_pos:start_pos + seqlen])
            model.act_quant(main_kv[..., :-rd], 64, model.scale_fmt, model.scale_dtype, True)
            if start_pos == 0:
                if seqlen <= win:
                    self.kv_cache[:bsz, :seqlen] = main_kv
                else:
                    cutoff = seqlen % win
                    self.kv_cache[:bsz, cutoff:win], self.kv_cache[:bsz, :cutoff] = \
                        main_kv[:, -win:].split([win - cutoff, cutoff], dim=1)
                return x
            bsz, block, _ = x.size()
            freqs = self.freqs_cis[start_pos + seqlen:start_pos + seqlen + block]
            q = self.wq_b(self.q_norm(self.wq_a(x))).unflatten(-1, (self.n_local_heads, self.head_dim))
            q = q * torch.rsqrt(q.square().mean(-1, keepdim=True) + self.eps)
            model.apply_rotary_emb(q[..., -rd:], freqs)
            kv = self.kv_norm(self.wkv(x))
            model.apply_rotary_emb(kv[..., -rd:], freqs)
            model.act_quant(kv[..., :-rd], 64, model.scale_fmt, model.scale_dtype, True)
            idx = torch.cat([torch.arange(min(win, start_pos + 1)), win + torch.arange(block)])
            idx = idx.int().view(1, 1, -1).expand(bsz, block, -1).contiguous()
            self.kv_cache[:bsz, start_pos % win] = main_kv.squeeze(1)
            kv = torch.cat([self.kv_cache[:bsz], kv], dim=1)
            o = model.sparse_attn(q, kv, self.attn_sink, idx, self.softmax_scale)
            model.apply_rotary_emb(o[..., -rd:], freqs, True)
            o = o.view(bsz, block, self.n_local_groups, -1)
            wo_a = self.wo_a.weight.view(self.n_local_groups, self.o_lora_rank, -1)
            o = torch.einsum("bsgd,grd->bsgr", o, wo_a)
            return self.wo_b(o.flatten(2))

    class MarkovHead(nn.Module):
        def __init__(self, vocab, rank):
            super().__init__()
            self.markov_w1 = model.ParallelEmbedding(vocab, rank)
            self.markov_w2 = model.ParallelHead(vocab, rank)

        def forward(self, ids):
            emb = self.markov_w1(ids)
            return F.linear(emb.float(), self.markov_w2.weight), emb

    class ConfidenceHead(nn.Module):
        def __init__(self, width):
            super().__init__()
            self.proj = model.Linear(width, 1, dtype=torch.float32)

        def forward(self, hidden, emb):
            return self.proj(torch.cat([hidden, emb], dim=-1).float()).squeeze(-1)

    class DSparkBlock(model.Block):
        def __init__(self, layer_id, args, stage, n_stages, n_target, rank):
            super().__init__(layer_id, args)
            self.attn = DSparkAttention(layer_id, args)
            if stage == 0:
                self.main_proj = model.Linear(args.dim * n_target, args.dim)
                self.main_norm = model.RMSNorm(args.dim, args.norm_eps)
            if stage == n_stages - 1:
                self.norm = model.RMSNorm(args.dim, args.norm_eps)
                hc_dim = args.hc_mult * args.dim
                with model.set_dtype(torch.float32):
                    self.hc_head_fn = nn.Parameter(torch.empty(args.hc_mult, hc_dim))
                    self.hc_head_base = nn.Parameter(torch.empty(args.hc_mult))
                    self.hc_head_scale = nn.Parameter(torch.empty(1))
                self.markov_head = MarkovHead(args.vocab_size, rank)
                self.confidence_head = ConfidenceHead(args.dim + rank)

        def forward(self, x, start_pos, main_x, ids):
            if start_pos == 0:
                return self.attn(x, 0, main_x)
            residual = x
            x, post, comb = self.hc_pre(x, self.hc_attn_fn, self.hc_attn_scale, self.hc_attn_base)
            x = self.attn(self.attn_norm(x), start_pos, main_x)
            x = self.hc_post(x, residual, post, comb)
            residual = x
            x, post, comb = self.hc_pre(x, self.hc_ffn_fn, self.hc_ffn_scale, self.hc_ffn_base)
            x = self.ffn(self.ffn_norm(x), ids)
            return self.hc_post(x, residual, post, comb)

    return DSparkBlock


def build_stages(torch, pkg, args, cfg, state):
    """The stages, built with the release's Linear dtypes, loaded strictly,
    then made float64 as official_ckpt.build does for the trunk."""
    model = pkg.model
    DSparkBlock = dspark_classes(torch, model)
    saved = model.default_dtype
    model.default_dtype = torch.float8_e4m3fn
    n = 1 + max(int(k.split(".")[1]) for k in state)
    stages = torch.nn.ModuleList([
        DSparkBlock(args.n_layers + s, args, s, n, len(cfg["dspark_target_layer_ids"]),
                    cfg["dspark_markov_rank"]) for s in range(n)])
    model.default_dtype = saved
    stages.load_state_dict({k[len("mtp."):]: v for k, v in state.items()}, strict=True)
    quantized = (torch.float8_e4m3fn, torch.float4_e2m1fn_x2, torch.float8_e8m0fnu)
    for p in stages.parameters():
        if p.is_floating_point() and p.dtype not in quantized:
            p.data = p.data.double()
    for b in stages.buffers():
        if b.is_floating_point():
            b.data = b.data.double()
    return stages.eval()


def run(torch, pkg, args, cfg, trunk_state, dspark_state, ids, anchors, qat):
    F = torch.nn.functional
    pkg.kernel.set_mode("qat" if qat else "train")
    m = oc.build(torch, pkg, args, trunk_state)
    targets = cfg["dspark_target_layer_ids"]
    taps = {}
    for li in targets:
        m.layers[li].register_forward_hook(lambda mod, inp, out, li=li: taps.__setitem__(li, out.mean(dim=2)))
    block, noise = cfg["dspark_block_size"], cfg["dspark_noise_token_id"]
    base, conf, drafts = [], [], []
    stages = build_stages(torch, pkg, args, cfg, dspark_state)
    with pkg.fp64_promotion(), torch.inference_mode():
        m(ids)
        main_x = stages[0].main_norm(stages[0].main_proj(torch.cat([taps[li] for li in targets], dim=-1)))
        last = stages[-1]
        for P in anchors:
            for st in stages:
                st(None, 0, main_x[:, :P - 1], None)
            blk = torch.full((1, block), noise, dtype=torch.long)
            blk[0, 0] = ids[0, P]
            x = m.embed(blk).unsqueeze(2).repeat(1, 1, args.hc_mult, 1)
            for st in stages:
                x = st(x, P - 1, main_x[:, P - 1:P], blk)
            pre = m.head.hc_head(x, last.hc_head_fn, last.hc_head_scale, last.hc_head_base)
            logits = F.linear(last.norm(pre).float(), m.head.weight)[0].double()
            base.append(logits.clone())
            prev, out, c = blk[:, :1].clone(), [], []
            for i in range(block):
                bias, emb = last.markov_head(prev[:, 0])
                logits[i] += bias[0].double()
                c.append(float(last.confidence_head(pre[:, i], emb)[0]))
                prev[0, 0] = int(logits[i].argmax())
                out.append(int(prev[0, 0]))
            conf.append(c)
            drafts.append(out)
    return torch.stack(base), conf, drafts


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ref", required=True)
    ap.add_argument("--ckpt", required=True)
    ap.add_argument("--tokens", required=True)
    ap.add_argument("--anchors", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    try:
        import torch
        import safetensors  # noqa: F401
    except ImportError as e:
        sys.exit("official_dspark: %s (torch >= 2.7 and safetensors are needed)" % e)
    sys.path.insert(0, os.path.abspath(a.ref))
    import tests.utils.deepseek4_reference as pkg
    from torch.nn import functional as F
    pkg.model.ParallelHead.get_logits = lambda self, x: F.linear(x.float(), self.weight)
    pkg.model.fp8_gemm, pkg.model.fp4_gemm = oc.make_gemms(torch, pkg.kernel)

    cfg = json.load(open(os.path.join(a.ckpt, "config.json")))
    ids = [int(t) for t in open(a.tokens).read().split()]
    anchors = [int(x) for x in a.anchors.split(",")]
    if any(p < 2 or p >= len(ids) for p in anchors):
        sys.exit("official_dspark: every anchor must be in [2, %d)" % len(ids))
    args = dataclasses.replace(oc.model_args(pkg.model, cfg, len(ids) + cfg["dspark_block_size"]),
                               n_mtp_layers=0)
    state = oc.converted_state(torch, a.ckpt, args.expert_dtype)
    trunk = {k: v for k, v in state.items() if not k.startswith("mtp.")}
    dspark = {k: v for k, v in state.items() if k.startswith("mtp.")}
    tid = torch.tensor([ids], dtype=torch.long)
    os.makedirs(a.out, exist_ok=True)
    for qat in (False, True):
        tag = "qat_on" if qat else "qat_off"
        base, conf, drafts = run(torch, pkg, args, cfg, trunk, dspark, tid, anchors, qat)
        base.numpy().astype("<f8").tofile(os.path.join(a.out, "base_logits.%s.f64" % tag))
        torch.tensor(conf, dtype=torch.float64).numpy().astype("<f8").tofile(
            os.path.join(a.out, "confidence.%s.f64" % tag))
        with open(os.path.join(a.out, "drafts.%s.txt" % tag), "w") as f:
            for d in drafts:
                f.write(" ".join(str(t) for t in d) + "\n")
        print("official_dspark: %s: %d anchors, base logits %s, drafts %s" %
              (tag, len(anchors), tuple(base.shape), drafts))
    here = os.path.join(os.path.abspath(a.ref), "tests/utils/deepseek4_reference")
    manifest = {
        "torch": torch.__version__,
        "python": sys.version.split()[0],
        "model_args": {k: getattr(args, k) for k in args.__dataclass_fields__},
        "dspark": {k: cfg[k] for k in cfg if k.startswith("dspark_")},
        "anchors": anchors,
        "official_files_sha256": {os.path.basename(p): oc.sha256(p)
                                  for p in sorted(glob.glob(os.path.join(here, "*.py")))},
        "checkpoint_sha256": {os.path.basename(p): oc.sha256(p)
                              for p in sorted(glob.glob(os.path.join(a.ckpt, "*")))},
        "tokens": len(ids),
    }
    with open(os.path.join(a.out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
