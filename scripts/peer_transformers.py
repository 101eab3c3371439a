"""Hugging Face transformers' DeepseekV4 as a peer: its logits, in float64,
on a checkpoint folder that ds4ref-mkmodel wrote.

    ./ds4ref-mkmodel --config tiny-ckpt --format hf --types f32 -o /tmp/tck-f32
    python3 scripts/peer_transformers.py --ckpt /tmp/tck-f32 --tokens ids.txt --out /tmp/tf

writes /tmp/tf.logits.f64 (raw little-endian float64, [n_tokens][vocab]) and
/tmp/tf.manifest.json, and prints one summary line.  Written against
transformers 5.17.0, torch 2.11 (CPU) and safetensors 0.8.

The model is loaded through transformers' own public path,
AutoModelForCausalLM.from_pretrained(DIR, dtype=torch.float64,
attn_implementation="eager", experts_implementation="eager"): its config
class reads config.json (legacy keys compress_ratios, num_hash_layers,
qk_rope_head_dim and rope_scaling included) and its deepseek_v4 conversion
mapping renames the release's tensor names (embed, layers.N.attn.wq_a,
layers.N.ffn.experts.E.w1, hc_attn_fn, ...) onto its modules.  For the
release layout (FP8 weights with .scale, FP4 experts in I8) transformers'
FP8 quantizer dequantizes on load (CPU: it switches to dequantize=True by
itself; it needs accelerate).  Nothing here renames a tensor or builds a
weight by hand.  Instead, before the forward pass, the script checks:

  * config: every key of config.json against what DeepseekV4Config made of
    it (layer_types from compress_ratios, hash layers, rotary width, both
    RoPE tables' theta and YaRN parameters, ...), keys transformers ignores,
    and keys it needs but the file lacks (it then uses its V4-Flash default);
  * weights: every tensor of every shard (mtp.* aside) against the
    parameter transformers loaded it into, value by value (FP8/FP4 tensors
    dequantized here from the formats' definitions), and every parameter of
    the model that no tensor filled (it would hold a random init);
  * RoPE: the inverse frequencies of both rotary tables against the official
    precompute_freqs_cis (YaRN on the compressed layers only, no mscale).
A mismatch is reported by name and is fatal (exit 3 config, 4 weights)
unless --force, which still writes the logits but keeps the exit status.

Precision: transformers upcasts to float32 in places (DeepseekV4RMSNorm's
.to(torch.float32), .float() in the hyper-connections, the HC head, the
RoPE rotation and the indexer scores, softmax(dtype=torch.float32) in the
compressors).  By default those casts are kept float64 for float64 tensors
(a torch function mode, the same idea as the official package's
fp64_promotion()); --as-written runs them as transformers writes them.  The
RoPE tables stay float32-computed either way (inv_freq and the angles are
float32 in transformers, as in the official code).

MTP: transformers' DeepseekV4 has no MTP layer (it drops mtp.* on load,
_keys_to_ignore_on_load_unexpected); --mtp says so and writes nothing more.

Exit status: 0 ok; 1 usage; 2 environment (torch/transformers/safetensors
missing, transformers too old or without DeepseekV4); 3 config or RoPE mismatch;
4 weight or loading mismatch; 5 transformers could not load or run the checkpoint."""
import argparse
import array
import contextlib
import hashlib
import json
import math
import os
import re
import sys

PROG = "peer_transformers"
WRITTEN_AGAINST = "5.17.0"
FIRST_WITH_V4 = (5, 8)          # DeepSeek V4 arrived in transformers 5.8.0
EXIT_USAGE, EXIT_ENV, EXIT_CONFIG, EXIT_WEIGHTS, EXIT_LOAD = 1, 2, 3, 4, 5

RATIO_TO_TYPE = {0: "sliding_attention", 4: "compressed_sparse_attention",
                 128: "heavily_compressed_attention"}
# config.json keys DeepseekV4Config folds into other fields in __post_init__.
LEGACY_KEYS = {"compress_ratios", "compress_rate_csa", "compress_rate_hca", "num_hash_layers",
               "qk_rope_head_dim", "rope_scaling"}
# Declared by DeepseekV4Config but never read by modeling_deepseek_v4.py.
UNUSED_BY_MODELING = {"norm_topk_prob", "num_nextn_predict_layers"}
# (config.json key, DeepseekV4Config attribute): compared value for value.
SCALARS = [
    ("vocab_size", "vocab_size"), ("hidden_size", "hidden_size"),
    ("num_hidden_layers", "num_hidden_layers"), ("num_attention_heads", "num_attention_heads"),
    ("num_key_value_heads", "num_key_value_heads"), ("head_dim", "head_dim"),
    ("q_lora_rank", "q_lora_rank"), ("o_lora_rank", "o_lora_rank"), ("o_groups", "o_groups"),
    ("n_routed_experts", "n_routed_experts"), ("num_experts_per_tok", "num_experts_per_tok"),
    ("moe_intermediate_size", "moe_intermediate_size"), ("sliding_window", "sliding_window"),
    ("index_n_heads", "index_n_heads"), ("index_head_dim", "index_head_dim"),
    ("index_topk", "index_topk"), ("hc_mult", "hc_mult"),
    ("hc_sinkhorn_iters", "hc_sinkhorn_iters"), ("hc_eps", "hc_eps"),
    ("rms_norm_eps", "rms_norm_eps"), ("routed_scaling_factor", "routed_scaling_factor"),
    ("swiglu_limit", "swiglu_limit"), ("scoring_func", "scoring_func"),
    ("hidden_act", "hidden_act"), ("tie_word_embeddings", "tie_word_embeddings"),
]
# Fields modeling_deepseek_v4.py reads that config.json might not carry (the
# legacy key that stands in for each, if any).
USED_FIELDS = {"compress_rates": ("compress_rate_csa", "compress_rate_hca"),
               "layer_types": ("compress_ratios",), "mlp_layer_types": ("num_hash_layers",),
               "partial_rotary_factor": ("qk_rope_head_dim",), "rope_parameters": ("rope_scaling",),
               "rope_theta": (), "compress_rope_theta": (), "mlp_bias": (), "attention_dropout": (),
               "pad_token_id": ()}
LAYER_ABBREV = {"sliding_attention": "SWA", "compressed_sparse_attention": "CSA",
                "heavily_compressed_attention": "HCA"}
FP4_E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
            -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]


def say(msg):
    print("%s: %s" % (PROG, msg), flush=True)


def die(code, msg):
    print("%s: error: %s" % (PROG, msg), file=sys.stderr, flush=True)
    sys.exit(code)


class Report:
    """Findings by section; `fatal` ones decide the exit status."""

    def __init__(self):
        self.items = []

    def add(self, section, level, msg):
        self.items.append({"section": section, "level": level, "msg": msg})
        say("%s: %s%s" % (section, "" if level == "ok" else level.upper() + ": ", msg))

    def fatal(self, section):
        return [i for i in self.items if i["section"] == section and i["level"] == "mismatch"]


# ---------------------------------------------------------------- environment

def import_stack():
    try:
        import torch
    except ImportError as e:
        die(EXIT_ENV, "torch is not importable (%s); this peer needs torch (2.11 when written) "
            "and transformers %s" % (e, WRITTEN_AGAINST))
    try:
        import transformers
    except ImportError as e:
        die(EXIT_ENV, "transformers is not installed (%s): pip install transformers==%s"
            % (e, WRITTEN_AGAINST))
    ver = getattr(transformers, "__version__", "0")
    m = re.match(r"(\d+)\.(\d+)", ver)
    if not m or (int(m.group(1)), int(m.group(2))) < FIRST_WITH_V4:
        die(EXIT_ENV, "transformers %s is too old: DeepseekV4 arrived in %d.%d.0 "
            "(this script was written against %s)" % ((ver,) + FIRST_WITH_V4 + (WRITTEN_AGAINST,)))
    try:
        from transformers import DeepseekV4Config, DeepseekV4ForCausalLM  # noqa: F401
        from transformers.models.deepseek_v4 import modeling_deepseek_v4
    except Exception as e:  # ImportError, or AttributeError from the lazy module
        die(EXIT_ENV, "transformers %s has no DeepseekV4 (%s: %s)" % (ver, type(e).__name__, e))
    try:
        import safetensors  # noqa: F401
    except ImportError as e:
        die(EXIT_ENV, "safetensors is not installed (%s)" % e)
    if ver != WRITTEN_AGAINST:
        say("note: transformers %s (this script was written against %s)" % (ver, WRITTEN_AGAINST))
    return torch, transformers, modeling_deepseek_v4


def ensure_sqrtsoftplus(torch, report):
    """The router's score function; some early V4 releases lacked it in ACT2FN."""
    from transformers.activations import ACT2FN
    if "sqrtsoftplus" in ACT2FN:
        return

    class SqrtSoftplus(torch.nn.Module):
        def forward(self, x):
            return torch.nn.functional.softplus(x).sqrt()

    ACT2FN["sqrtsoftplus"] = SqrtSoftplus
    report.add("env", "warning", "transformers' ACT2FN has no 'sqrtsoftplus': added "
               "sqrt(softplus(x)), the official Gate's score function")


# --------------------------------------------------------------------- config

def same(a, b):
    if isinstance(a, float) or isinstance(b, float):
        try:
            return a == b or abs(float(a) - float(b)) <= 1e-12 * max(abs(float(a)), abs(float(b)))
        except (TypeError, ValueError):
            return False
    return a == b


def check_config(cfg, hf, report):
    sec = "config"
    for key, attr in SCALARS:
        got = getattr(hf, attr, "<absent>")
        if key not in cfg:
            report.add(sec, "warning", "%s missing from config.json: transformers uses its default %r"
                       % (key, got))
        elif not same(cfg[key], got):
            report.add(sec, "mismatch", "%s: config.json %r, transformers %r" % (key, cfg[key], got))
    if cfg.get("n_shared_experts", 1) != 1:
        report.add(sec, "mismatch", "n_shared_experts %r: transformers builds exactly one shared "
                   "expert" % cfg["n_shared_experts"])

    n = cfg.get("num_hidden_layers", hf.num_hidden_layers)
    ratios = cfg.get("compress_ratios")
    if ratios is None:
        report.add(sec, "mismatch", "compress_ratios missing: transformers falls back to its V4-Pro "
                   "schedule %r" % (hf.layer_types,))
    else:
        bad = sorted({r for r in ratios if r not in RATIO_TO_TYPE})
        if bad:
            report.add(sec, "mismatch", "compress_ratios has %r: transformers knows only 0, 4, 128" % bad)
        want = [RATIO_TO_TYPE.get(r, "?") for r in ratios[:n]]
        if list(hf.layer_types) != want:
            report.add(sec, "mismatch", "layer_types: from compress_ratios %r, transformers %r"
                       % (want, list(hf.layer_types)))
        for r in sorted({r for r in ratios[:n] if r}):
            t = RATIO_TO_TYPE.get(r)
            if t and hf.compress_rates.get(t) != r:
                report.add(sec, "mismatch", "compression ratio %d: transformers' compress_rates[%s] is %r"
                           % (r, t, hf.compress_rates.get(t)))
        if len(ratios) != n + cfg.get("num_nextn_predict_layers", 0):
            report.add(sec, "warning", "compress_ratios has %d entries for %d layers + %d MTP"
                       % (len(ratios), n, cfg.get("num_nextn_predict_layers", 0)))
    nh = cfg.get("num_hash_layers")
    if nh is None:
        report.add(sec, "warning", "num_hash_layers missing: transformers makes the first 3 layers hash-routed")
    else:
        want = ["hash_moe"] * min(n, nh) + ["moe"] * max(0, n - nh)
        if list(hf.mlp_layer_types) != want:
            report.add(sec, "mismatch", "mlp_layer_types: from num_hash_layers %r, transformers %r"
                       % (want, list(hf.mlp_layer_types)))
    rd = int(hf.head_dim * hf.partial_rotary_factor)
    if "qk_rope_head_dim" in cfg and rd != cfg["qk_rope_head_dim"]:
        report.add(sec, "mismatch", "rotary width: qk_rope_head_dim %r, transformers head_dim*"
                   "partial_rotary_factor = %r" % (cfg["qk_rope_head_dim"], rd))

    rp = getattr(hf, "rope_parameters", None) or {}
    main, comp = rp.get("main"), rp.get("compress")
    if not isinstance(main, dict) or not isinstance(comp, dict):
        report.add(sec, "mismatch", "rope_parameters has no main/compress tables: %r" % (rp,))
    else:
        if main.get("rope_type") != "default" or not same(main.get("rope_theta"), cfg.get("rope_theta")):
            report.add(sec, "mismatch", "main RoPE (sliding layers): transformers %r, want default "
                       "with theta %r" % (main, cfg.get("rope_theta")))
        if not same(comp.get("rope_theta"), cfg.get("compress_rope_theta")):
            report.add(sec, "mismatch", "compress RoPE theta: transformers %r, compress_rope_theta %r"
                       % (comp.get("rope_theta"), cfg.get("compress_rope_theta")))
        rs = cfg.get("rope_scaling") or {}
        yarn = rs.get("original_max_position_embeddings", 0) > 0
        if yarn:
            want = {"rope_type": "yarn", "factor": rs.get("factor"),
                    "original_max_position_embeddings": rs.get("original_max_position_embeddings"),
                    "beta_fast": rs.get("beta_fast", 32), "beta_slow": rs.get("beta_slow", 1),
                    "attention_factor": 1.0}
            for k, v in want.items():
                if not same(comp.get(k), v):
                    report.add(sec, "mismatch", "compress RoPE %s: transformers %r, want %r (official "
                               "YaRN, no mscale)" % (k, comp.get(k), v))
            if rs.get("type", rs.get("rope_type")) != "yarn":
                report.add(sec, "warning", "rope_scaling names no type 'yarn'; the official code applies "
                           "YaRN whenever original_max_position_embeddings > 0")
            implicit = cfg.get("max_position_embeddings", 0) / rs["original_max_position_embeddings"]
            if not same(implicit, rs.get("factor")):
                report.add(sec, "warning", "max_position_embeddings / original_max_position_embeddings "
                           "= %g, not factor %r: transformers warns, and versions that derive the YaRN "
                           "factor from that ratio would differ (the RoPE check below says what this one "
                           "computed)" % (implicit, rs.get("factor")))
        elif comp.get("rope_type") != "default":
            report.add(sec, "mismatch", "compress RoPE is %r but config.json asks for no YaRN"
                       % comp.get("rope_type"))

    try:
        fresh = type(hf)()
    except Exception:
        fresh = None
    unknown = sorted(k for k in cfg if k not in LEGACY_KEYS and k != "quantization_config"
                     and fresh is not None and not hasattr(fresh, k))
    if unknown:
        report.add(sec, "info", "keys DeepseekV4Config does not declare (kept as plain attributes, "
                   "unused): %s" % ", ".join(unknown))
    unused = sorted(k for k in cfg if k in UNUSED_BY_MODELING)
    if unused:
        report.add(sec, "info", "keys declared but not read by the modeling code: %s" % ", ".join(unused))
    legacy = sorted(k for k in cfg if k in LEGACY_KEYS)
    if legacy:
        report.add(sec, "info", "legacy keys folded by DeepseekV4Config.__post_init__: %s" % ", ".join(legacy))
    missing = []
    for field, stand_ins in USED_FIELDS.items():
        if field not in cfg and not any(s in cfg for s in stand_ins):
            missing.append("%s=%r" % (field, getattr(hf, field, None)))
    if missing:
        report.add(sec, "info", "fields the modeling code reads that config.json lacks (defaults used): %s"
                   % ", ".join(missing))


# ----------------------------------------------------------------------- RoPE

def official_inv_freq(torch, dim, base, original_seq_len, factor, beta_fast, beta_slow):
    """inference/model.py precompute_freqs_cis's frequencies (float32)."""
    freqs = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    if original_seq_len > 0:
        def corr(rot):
            return dim * math.log(original_seq_len / (rot * 2 * math.pi)) / (2 * math.log(base))
        low, high = max(math.floor(corr(beta_fast)), 0), min(math.ceil(corr(beta_slow)), dim - 1)
        if low == high:
            high += 0.001
        ramp = torch.clamp((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low), 0, 1)
        smooth = 1 - ramp
        freqs = freqs / factor * (1 - smooth) + freqs * smooth
    return freqs


def check_rope(torch, model, cfg, report):
    sec = "rope"
    rs = cfg.get("rope_scaling") or {}
    rd = cfg.get("qk_rope_head_dim", 64)
    want = {"main": official_inv_freq(torch, rd, cfg.get("rope_theta", 10000.0), 0, 1, 32, 1),
            "compress": official_inv_freq(torch, rd, cfg.get("compress_rope_theta", 160000.0),
                                          rs.get("original_max_position_embeddings", 0),
                                          rs.get("factor", 1), rs.get("beta_fast", 32),
                                          rs.get("beta_slow", 1))}
    mods = [(n, m) for n, m in model.named_modules() if type(m).__name__ == "DeepseekV4RotaryEmbedding"]
    if not mods:
        report.add(sec, "warning", "no DeepseekV4RotaryEmbedding module found to inspect")
        return
    seen = {}
    for name, m in mods:
        for table, ref in want.items():
            inv = getattr(m, "%s_inv_freq" % table, None)
            scale = getattr(m, "%s_attention_scaling" % table, None)
            if inv is None:
                report.add(sec, "warning", "%s has no %s_inv_freq to inspect" % (name or "rotary_emb", table))
                continue
            if inv.shape != ref.shape:
                report.add(sec, "mismatch", "%s %s: %d frequencies, official %d"
                           % (name, table, inv.numel(), ref.numel()))
                continue
            rel = ((inv.double() - ref.double()).abs() / ref.double().abs()).max().item()
            seen.setdefault(table, []).append((rel, str(inv.dtype), scale))
            if rel > 1e-6:
                report.add(sec, "mismatch", "%s %s inv_freq differs from the official "
                           "precompute_freqs_cis by up to %.3g relative" % (name or "model", table, rel))
            if scale is not None and float(scale) != 1.0:
                report.add(sec, "mismatch", "%s %s attention scaling %r (the official code multiplies "
                           "cos/sin by nothing)" % (name or "model", table, scale))
    for table, vals in seen.items():
        report.add(sec, "ok", "%s table (%d modules, %s): max relative difference from the official "
                   "frequencies %.3g, cos/sin scaling %s" % (table, len(vals), vals[0][1],
                                                              max(v[0] for v in vals), vals[0][2]))


# -------------------------------------------------------------------- weights

TOP_NAMES = {"embed.weight": "model.embed_tokens.weight", "head.weight": "lm_head.weight",
             "norm.weight": "model.norm.weight", "hc_head_fn": "model.hc_head.hc_fn",
             "hc_head_base": "model.hc_head.hc_base", "hc_head_scale": "model.hc_head.hc_scale"}
LAYER_NAMES = {
    "attn_norm.weight": "input_layernorm.weight", "ffn_norm.weight": "post_attention_layernorm.weight",
    "hc_attn_fn": "attn_hc.fn", "hc_attn_base": "attn_hc.base", "hc_attn_scale": "attn_hc.scale",
    "hc_ffn_fn": "ffn_hc.fn", "hc_ffn_base": "ffn_hc.base", "hc_ffn_scale": "ffn_hc.scale",
    "attn.attn_sink": "self_attn.sinks",
    "attn.indexer.wq_b.weight": "self_attn.compressor.indexer.q_b_proj.weight",
    "attn.indexer.weights_proj.weight": ("self_attn.compressor.indexer.scorer.weights_proj.weight",
                                         "self_attn.compressor.indexer.weights_proj.weight"),
    "ffn.gate.weight": "mlp.gate.weight", "ffn.gate.bias": "mlp.gate.e_score_correction_bias",
    "ffn.gate.tid2eid": "mlp.gate.tid2eid",
    "ffn.shared_experts.w1.weight": "mlp.shared_experts.gate_proj.weight",
    "ffn.shared_experts.w3.weight": "mlp.shared_experts.up_proj.weight",
    "ffn.shared_experts.w2.weight": "mlp.shared_experts.down_proj.weight",
}
ATTN_PREFIXES = [("attn.indexer.compressor.", "self_attn.compressor.indexer."),
                 ("attn.compressor.", "self_attn.compressor."), ("attn.", "self_attn.")]
LEAVES = {"wq_a": "q_a_proj", "wq_b": "q_b_proj", "wkv": "kv_proj", "wgate": "gate_proj",
          "wo_a": "o_a_proj", "wo_b": "o_b_proj", "q_norm": "q_a_norm", "kv_norm": "kv_norm",
          "norm": "kv_norm", "ape": "position_bias"}


def hf_target(name, sd, inter):
    """(transformers state_dict key, slicer or None) for a checkpoint tensor,
    following the renames of transformers' deepseek_v4 conversion mapping."""
    if name in TOP_NAMES:
        return TOP_NAMES[name], None
    m = re.match(r"layers\.(\d+)\.(.+)$", name)
    if not m:
        return None
    p, rest = "model.layers.%s." % m.group(1), m.group(2)
    e = re.match(r"ffn\.experts\.(\d+)\.(w[123])\.weight$", rest)
    if e:
        i, w = int(e.group(1)), e.group(2)
        if w == "w1":
            return p + "mlp.experts.gate_up_proj", lambda t: t[i, :inter]
        if w == "w3":
            return p + "mlp.experts.gate_up_proj", lambda t: t[i, inter:]
        return p + "mlp.experts.down_proj", lambda t: t[i]
    target = LAYER_NAMES.get(rest)
    if target is None:
        for src, dst in ATTN_PREFIXES:
            if rest.startswith(src):
                leaf = rest[len(src):].split(".", 1)
                if leaf[0] in LEAVES:
                    target = dst + ".".join([LEAVES[leaf[0]]] + leaf[1:])
                break
    if target is None:
        return None
    for cand in (target if isinstance(target, tuple) else (target,)):
        if p + cand in sd:
            return p + cand, None
    return p + (target[0] if isinstance(target, tuple) else target), None


def dequant(torch, w, s, block):
    """An FP8 (E4M3, block scales) or FP4 (E2M1 pairs in I8, 1x32 scales)
    weight's values in float64, from the formats' definitions."""
    scale = torch.pow(2.0, s.view(torch.uint8).double() - 127)
    if w.dtype in (torch.int8, torch.uint8):
        b = w.view(torch.uint8).long()
        lut = torch.tensor(FP4_E2M1, dtype=torch.float64)
        v = torch.stack([lut[b & 15], lut[b >> 4]], dim=-1).flatten(-2)
        return v * scale.repeat_interleave(v.shape[-1] // scale.shape[-1], -1)
    v = w.to(torch.float32).double()
    rows, cols = v.shape
    return v * scale.repeat_interleave(block[0], 0)[:rows].repeat_interleave(block[1], 1)[:, :cols]


def check_weights(torch, model, ckpt, cfg, report):
    from safetensors import safe_open
    sec = "weights"
    wm = json.load(open(os.path.join(ckpt, "model.safetensors.index.json")))["weight_map"]
    sd = model.state_dict()
    inter = cfg["moe_intermediate_size"]
    block = (cfg.get("quantization_config") or {}).get("weight_block_size") or [128, 128]
    covered, compared, mtp, bad = {}, 0, 0, 0
    with contextlib.ExitStack() as stack:
        files = {f: stack.enter_context(safe_open(os.path.join(ckpt, f), framework="pt"))
                 for f in sorted(set(wm.values()))}
        for name in sorted(wm):
            if name.startswith("mtp."):
                mtp += 1
                continue
            if name.endswith(".scale"):
                if name[:-len("scale")] + "weight" not in wm:
                    report.add(sec, "mismatch", "%s: a scale with no weight" % name)
                continue
            t = files[wm[name]].get_tensor(name)
            sname = name[:-len("weight")] + "scale" if name.endswith(".weight") else None
            if sname in wm:
                t = dequant(torch, t, files[wm[sname]].get_tensor(sname), block)
            tgt = hf_target(name, sd, inter)
            if tgt is None or tgt[0] not in sd:
                report.add(sec, "mismatch", "%s: transformers has no parameter for it%s"
                           % (name, "" if tgt is None else " (looked for %s)" % tgt[0]))
                bad += 1
                continue
            key, sl = tgt
            got = sd[key] if sl is None else sl(sd[key])
            covered[key] = covered.get(key, 0) + 1
            if tuple(got.shape) != tuple(t.shape):
                report.add(sec, "mismatch", "%s -> %s: shape %s in the file, %s in transformers"
                           % (name, key, tuple(t.shape), tuple(got.shape)))
                bad += 1
                continue
            compared += 1
            if got.is_floating_point() != t.is_floating_point():
                report.add(sec, "mismatch", "%s -> %s: dtype %s in the file, %s in transformers"
                           % (name, key, t.dtype, got.dtype))
                bad += 1
            elif not got.is_floating_point():
                if not torch.equal(got.long(), t.long()):
                    report.add(sec, "mismatch", "%s -> %s: integer values differ" % (name, key))
                    bad += 1
            elif not torch.equal(got.double(), t.double()):
                d = (got.double() - t.double()).abs().max().item()
                report.add(sec, "mismatch", "%s -> %s: values differ, max |diff| %.3e" % (name, key, d))
                bad += 1
    n_exp = cfg["n_routed_experts"]
    for key in sd:
        want = 2 * n_exp if key.endswith("experts.gate_up_proj") else \
            n_exp if key.endswith("experts.down_proj") else 1
        if covered.get(key, 0) != want and not key.endswith(("weight_scale_inv", "_scale_inv")):
            report.add(sec, "mismatch", "%s: filled by %d checkpoint tensors, needs %d (the rest is "
                       "transformers' random init)" % (key, covered.get(key, 0), want))
            bad += 1
    low = sorted({str(v.dtype) for v in sd.values() if v.is_floating_point() and v.dtype != torch.float64})
    if low:
        report.add(sec, "warning", "parameters not float64 after loading: %s" % ", ".join(low))
    report.add(sec, "ok" if not bad else "mismatch",
               "%d checkpoint tensors compared with transformers' parameters value by value, %d "
               "problems; %d mtp.* tensors not loaded by transformers" % (compared, bad, mtp))


# ------------------------------------------------------------------ modeling

def check_modeling(model, cfg, report):
    sec = "model"
    layers = model.model.layers
    shared = layers[0].mlp.shared_experts
    lim = getattr(shared, "limit", None)
    if lim is None:
        report.add(sec, "warning", "this transformers' shared expert (DeepseekV4MLP) has no SwiGLU clamp "
                   "(transformers issue #46018): logits differ from the official code wherever a shared "
                   "gate/up pre-activation passes +-%s" % cfg.get("swiglu_limit"))
    elif lim != cfg.get("swiglu_limit"):
        report.add(sec, "mismatch", "shared expert clamp %r, swiglu_limit %r" % (lim, cfg.get("swiglu_limit")))
    mtp = [n for n, _ in model.named_modules() if "mtp" in n.split(".")]
    report.add(sec, "info", "attention %s, experts %s, %d layers (%s), MTP modules: %s"
               % (getattr(model.config, "_attn_implementation", "?"),
                  getattr(model.config, "_experts_implementation", "?"), len(layers),
                  ",".join(LAYER_ABBREV.get(t, t) for t in model.config.layer_types), len(mtp) or "none"))
    return mtp


# -------------------------------------------------------------- float64 mode

def make_promotion(torch):
    from torch.overrides import TorchFunctionMode
    f32, f64 = torch.float32, torch.float64
    MATMULS = {"matmul", "__matmul__", "__rmatmul__", "mm", "bmm", "linear"}

    class Float64Promotion(TorchFunctionMode):
        """Keeps float64 tensors float64 where transformers casts to float32:
        t.float(), t.to(torch.float32), softmax(..., dtype=torch.float32).
        Other dtypes (the float32 RoPE inv_freq, integer positions) pass."""

        def __init__(self):
            super().__init__()
            self.kept = 0

        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            name = getattr(func, "__name__", "")
            if name in MATMULS:
                # Should a float32 operand meet a float64 one (the RoPE angles,
                # were inv_freq ever loaded float64), compute in float64.
                dts = {a.dtype for a in args if isinstance(a, torch.Tensor)}
                if f32 in dts and f64 in dts:
                    self.kept += 1
                    args = tuple(a.to(f64) if isinstance(a, torch.Tensor) and a.dtype == f32 else a
                                 for a in args)
            elif args and isinstance(args[0], torch.Tensor) and args[0].dtype == f64:
                if name == "float" and len(args) == 1 and not kwargs:
                    self.kept += 1
                    return args[0]
                if name == "to" and (any(a is f32 for a in args[1:]) or kwargs.get("dtype") is f32):
                    self.kept += 1
                    args = (args[0],) + tuple(f64 if a is f32 else a for a in args[1:])
                    if kwargs.get("dtype") is f32:
                        kwargs = dict(kwargs, dtype=f64)
                elif name in ("softmax", "log_softmax") and kwargs.get("dtype") is f32:
                    self.kept += 1
                    kwargs = dict(kwargs, dtype=f64)
            return func(*args, **kwargs)

    return Float64Promotion()


# ----------------------------------------------------------------------- main

def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def load_model(torch, ckpt, hfcfg):
    """from_pretrained in float64, eager attention and eager experts (the
    module's own loop, not a grouped-GEMM backend); older spellings retried."""
    from transformers import AutoModelForCausalLM
    kw = dict(config=hfcfg, attn_implementation="eager", experts_implementation="eager",
              local_files_only=True, output_loading_info=True, dtype=torch.float64)
    for _ in range(3):
        try:
            out = AutoModelForCausalLM.from_pretrained(ckpt, **kw)
            return out if isinstance(out, tuple) else (out, {})
        except TypeError as e:
            if "experts_implementation" in str(e) and "experts_implementation" in kw:
                del kw["experts_implementation"]
            elif "dtype" in str(e) and "dtype" in kw:
                kw["torch_dtype"] = kw.pop("dtype")
            else:
                raise
    out = AutoModelForCausalLM.from_pretrained(ckpt, **kw)
    return out if isinstance(out, tuple) else (out, {})


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ckpt", required=True, help="checkpoint folder (ds4ref-mkmodel --format hf)")
    ap.add_argument("--tokens", required=True, help="file of whitespace-separated token ids")
    ap.add_argument("--out", required=True, help="output prefix: PREFIX.logits.f64, PREFIX.manifest.json")
    ap.add_argument("--mtp", action="store_true", help="also MTP logits, where transformers has an MTP layer")
    ap.add_argument("--as-written", action="store_true",
                    help="run transformers' float32 upcasts as written (default: keep float64)")
    ap.add_argument("--force", action="store_true",
                    help="run and write the logits despite config/weight mismatches (exit status kept)")
    a = ap.parse_args()

    for f in ("config.json", "model.safetensors.index.json"):
        if not os.path.isfile(os.path.join(a.ckpt, f)):
            die(EXIT_USAGE, "%s has no %s" % (a.ckpt, f))
    try:
        ids = [int(t) for t in open(a.tokens).read().split()]
    except (OSError, ValueError) as e:
        die(EXIT_USAGE, "cannot read token ids from %s: %s" % (a.tokens, e))
    if not ids:
        die(EXIT_USAGE, "%s holds no token ids" % a.tokens)
    cfg = json.load(open(os.path.join(a.ckpt, "config.json")))
    vocab = cfg.get("vocab_size", 0)
    if any(t < 0 or t >= vocab for t in ids):
        die(EXIT_USAGE, "token ids outside [0, %d)" % vocab)

    torch, transformers, _ = import_stack()
    report = Report()
    ensure_sqrtsoftplus(torch, report)
    transformers.logging.set_verbosity_warning()

    from transformers import AutoConfig, DeepseekV4Config, DeepseekV4ForCausalLM
    try:
        hfcfg = AutoConfig.from_pretrained(a.ckpt, local_files_only=True)
    except Exception as e:
        die(EXIT_LOAD, "transformers could not read %s/config.json: %s: %s" % (a.ckpt, type(e).__name__, e))
    if not isinstance(hfcfg, DeepseekV4Config):
        die(EXIT_LOAD, "config.json gave a %s, not a DeepseekV4Config" % type(hfcfg).__name__)
    check_config(cfg, hfcfg, report)

    if cfg.get("quantization_config"):
        report.add("load", "info", "release layout (quantization_config %s): transformers' FP8 quantizer "
                   "dequantizes it on load" % cfg["quantization_config"].get("quant_method"))
    torch.manual_seed(0)
    try:
        model, info = load_model(torch, a.ckpt, hfcfg)
    except Exception as e:
        die(EXIT_LOAD, "transformers could not load %s: %s: %s" % (a.ckpt, type(e).__name__, e))
    if not isinstance(model, DeepseekV4ForCausalLM):
        die(EXIT_LOAD, "from_pretrained gave a %s, not a DeepseekV4ForCausalLM" % type(model).__name__)
    model.eval()
    for k in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs"):
        v = sorted(str(x) for x in (info.get(k) or []))
        if v:
            report.add("load", "mismatch" if k != "unexpected_keys" else "warning",
                       "%s (%d): %s%s" % (k, len(v), ", ".join(v[:12]), " ..." if len(v) > 12 else ""))

    mtp_modules = check_modeling(model, cfg, report)
    check_rope(torch, model, cfg, report)
    check_weights(torch, model, a.ckpt, cfg, report)

    status = 0
    if report.fatal("config") or report.fatal("rope"):
        status = EXIT_CONFIG
    elif report.fatal("weights") or report.fatal("load") or report.fatal("model"):
        status = EXIT_WEIGHTS
    manifest = {
        "transformers": transformers.__version__, "torch": torch.__version__,
        "python": sys.version.split()[0], "ckpt": os.path.abspath(a.ckpt),
        "checkpoint_sha256": {f: sha256(os.path.join(a.ckpt, f)) for f in sorted(os.listdir(a.ckpt))
                              if os.path.isfile(os.path.join(a.ckpt, f))},
        "tokens": len(ids), "precision": "as written" if a.as_written else "float64 kept",
        "findings": report.items,
    }

    def write_manifest():
        with open(a.out + ".manifest.json", "w") as f:
            json.dump(manifest, f, indent=1, sort_keys=True)
            f.write("\n")

    if status and not a.force:
        write_manifest()
        die(status, "%s mismatch (above); no logits written (--force runs anyway)"
            % ("config" if status == EXIT_CONFIG else "weight/model"))

    promo = None if a.as_written else make_promotion(torch)
    x = torch.tensor([ids], dtype=torch.long)
    try:
        with torch.inference_mode(), (promo if promo is not None else contextlib.nullcontext()):
            out = model(input_ids=x, use_cache=False)
    except Exception as e:
        write_manifest()
        die(EXIT_LOAD, "transformers' forward pass failed: %s: %s" % (type(e).__name__, e))
    logits = out.logits[0]
    if logits.dtype != torch.float64:
        report.add("run", "warning", "logits came back %s; written as float64" % logits.dtype)
    logits = logits.double().contiguous()
    buf = array.array("d", logits.flatten().tolist())
    if sys.byteorder != "little":
        buf.byteswap()
    with open(a.out + ".logits.f64", "wb") as f:
        buf.tofile(f)

    if a.mtp:
        if not mtp_modules:
            report.add("mtp", "info", "transformers %s's DeepseekV4 implements no MTP layer (mtp.* tensors "
                       "are dropped on load: _keys_to_ignore_on_load_unexpected); no MTP logits"
                       % transformers.__version__)
        else:
            report.add("mtp", "warning", "transformers has MTP modules (%s) this script does not know how "
                       "to drive; no MTP logits" % ", ".join(mtp_modules[:4]))

    rms = float(logits.pow(2).mean().sqrt())
    last = int(logits[-1].argmax())
    manifest.update({"logits_shape": list(logits.shape), "logits_rms": rms, "argmax_last": last,
                     "float32_casts_kept_float64": promo.kept if promo is not None else 0,
                     "findings": report.items})
    write_manifest()
    print("%s: transformers %s, torch %s: %d positions, logits %s float64 (%s), rms %.6f, argmax of the "
          "last %d -> %s.logits.f64%s" % (
              PROG, transformers.__version__, torch.__version__, len(ids), tuple(logits.shape),
              "as written" if promo is None else "%d float32 casts kept float64" % promo.kept,
              rms, last, a.out, "" if not status else " [FORCED past mismatches, exit %d]" % status),
          flush=True)
    sys.exit(status)


if __name__ == "__main__":
    main()
