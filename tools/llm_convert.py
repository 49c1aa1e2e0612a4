#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Convert and generate llama-family checkpoints (numpy only).

usage: llm_convert.py llama2c-to-hf CHECKPOINT.bin TOKENIZER.bin OUTDIR [options]
       llm_convert.py hf-to-gguf HFDIR OUT.gguf [--type F32|F16|BF16|Q8_0]
       llm_convert.py gen OUTDIR --arch llama|mistral|qwen2|qwen3|phi3 [shape options]

Each subcommand has --help. Outputs are written under a temporary name and
renamed into place only when complete, so a failed run leaves nothing.

llama2c-to-hf
    A llama2.c checkpoint and its tokenizer become an HF Llama directory:
    config.json, model.safetensors (or --shards N files with
    model.safetensors.index.json), tokenizer.json, tokenizer_config.json,
    generation_config.json. The Q and K rows are permuted from Meta's
    interleaved RoPE pairs to HF's rotate-half layout, per head (Q with the
    head count, K with the KV head count).
hf-to-gguf
    An HF LlamaForCausalLM / MistralForCausalLM (architecture "llama") or
    Qwen2ForCausalLM ("qwen2") directory becomes a GGUF v3 file as
    llama.cpp's convert_hf_to_gguf.py lays it out. For "llama" the Q/K
    permutation is undone (llama.cpp rotates adjacent pairs); "qwen2" rows
    are kept (llama.cpp rotates halves there). 1-D tensors stay F32; a
    matrix whose rows are not a multiple of 32 long falls back from Q8_0
    to F16, as llama.cpp does. Mistral's sliding_window has no GGUF key in
    the llama architecture and is dropped (with a note), as llama.cpp does.
gen
    A random-weight HF checkpoint, written one tensor at a time (see
    `gen_weights` for the scales), with a synthetic SentencePiece-style
    tokenizer or a copy of a real tokenizer.json (--tokenizer).
"""

import argparse
import json
import os
import shutil
import sys
import zlib

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llm_io  # noqa: E402
import llm_tok  # noqa: E402
from llm_hf import (ARCHS, TORCH_DTYPES, ConvertError, base_config, hf_shapes,  # noqa: E402
                    row_blocks, to_halves, to_interleaved, write_generation_config,
                    write_outputs, write_safetensors_dir)

F32 = np.float32


# ---------------------------------------------------------------------------
# llama2c-to-hf
# ---------------------------------------------------------------------------

def llama2c_to_hf(args):
    cfg2c, w = llm_io.read_llama2c(args.checkpoint)
    _, tokens = llm_io.read_llama2c_tokenizer(args.tokenizer, cfg2c["vocab_size"])
    pieces, scores = llm_tok.llama2c_pieces(tokens)
    dim, heads, kv = cfg2c["dim"], cfg2c["n_heads"], cfg2c["n_kv_heads"]
    cfg = base_config("llama", dim, cfg2c["hidden_dim"], cfg2c["n_layers"], heads, kv,
                      dim // heads, cfg2c["vocab_size"], cfg2c["shared_classifier"],
                      args.dtype, cfg2c["seq_len"])
    # --buggy-k-permute reproduces llama2.c export.py's mistake, for tests
    k_heads = heads if args.buggy_k_permute else kv
    per_layer = {"input_layernorm.weight": ("rms_att", None),
                 "self_attn.q_proj.weight": ("wq", heads),
                 "self_attn.k_proj.weight": ("wk", k_heads),
                 "self_attn.v_proj.weight": ("wv", None),
                 "self_attn.o_proj.weight": ("wo", None),
                 "post_attention_layernorm.weight": ("rms_ffn", None),
                 "mlp.gate_proj.weight": ("w1", None),
                 "mlp.up_proj.weight": ("w3", None),
                 "mlp.down_proj.weight": ("w2", None)}

    def produce(name, shape):
        if name == "model.embed_tokens.weight":
            return w["token_embedding"]
        if name == "model.norm.weight":
            return w["rms_final"]
        if name == "lm_head.weight":
            return w["wcls"]
        _, _, layer, rest = name.split(".", 3)
        field, n = per_layer[rest]
        t = w[field][int(layer)]
        return to_halves(t, n) if n else t

    def work(out):
        write_safetensors_dir(out, hf_shapes(cfg), args.dtype, args.shards, produce)
        llm_tok.write_json(os.path.join(out, "config.json"), cfg)
        llm_tok.write_spm_files(out, pieces, scores, cfg2c["seq_len"])
        write_generation_config(out, 1, 2)

    write_outputs(args.outdir, True, work)


# ---------------------------------------------------------------------------
# hf-to-gguf
# ---------------------------------------------------------------------------

FILE_TYPES = {"F32": 0, "F16": 1, "Q8_0": 7, "BF16": 32}     # llama.cpp's LlamaFileType


def check_hf_config(cfg):
    """(gguf arch, dims dict) for an HF config, or ConvertError naming the
    field that is missing or unsupported."""
    archs = cfg.get("architectures") or [None]
    arch = {"LlamaForCausalLM": "llama", "MistralForCausalLM": "llama",
            "Qwen2ForCausalLM": "qwen2", "Qwen3ForCausalLM": "qwen3",
            "Phi3ForCausalLM": "phi3"}.get(archs[0])
    if arch is None:
        raise ConvertError(f"config.json architectures {archs}: unsupported")
    for key in ("hidden_size", "intermediate_size", "num_hidden_layers",
                "num_attention_heads", "vocab_size"):
        if not isinstance(cfg.get(key), int) or cfg[key] <= 0:
            raise ConvertError(f"config.json {key}: missing or not a positive integer")
    if cfg.get("hidden_act", "silu") != "silu":
        raise ConvertError(f"config.json hidden_act {cfg['hidden_act']!r}: only silu")
    for key in ("attention_bias", "mlp_bias", "use_sliding_window"):
        if cfg.get(key):
            raise ConvertError(f"config.json {key}: true is unsupported")
    scaling = cfg.get("rope_scaling")
    if scaling:
        kind = scaling.get("rope_type", scaling.get("type"))
        if kind not in ("llama3", "linear", "default"):
            raise ConvertError(f"config.json rope_scaling type {kind!r}: unsupported")
    heads = cfg["num_attention_heads"]
    kv = cfg.get("num_key_value_heads") or heads
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // heads
    if not isinstance(kv, int) or kv <= 0 or heads % kv:
        raise ConvertError(f"config.json num_key_value_heads {kv!r}: must divide "
                           f"num_attention_heads {heads}")
    if not isinstance(head_dim, int) or head_dim <= 0 or head_dim % 2:
        raise ConvertError(f"config.json head_dim {head_dim!r}: must be a positive even number")
    return arch, {"heads": heads, "kv": kv, "head_dim": head_dim}


def llama3_rope_factors(cfg, head_dim):
    """The rope_freqs.weight factors llama.cpp divides each frequency by,
    from HF's llama3 rope_scaling. (llama.cpp's converter reads
    original_max_position_embeddings from the top level of config.json,
    where HF configs do not have it, so it always uses 8192; we read it
    from rope_scaling, which is what HF computes with.)"""
    rs = cfg["rope_scaling"]
    theta = float(cfg.get("rope_theta", 10000.0))
    factor, lo, hi = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
    old = rs["original_max_position_embeddings"]
    freqs = 1.0 / theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    out = []
    for f in freqs:
        wavelen = 2 * np.pi / f
        if wavelen < old / hi:
            out.append(1.0)
        elif wavelen > old / lo:
            out.append(factor)
        else:
            smooth = (old / wavelen - lo) / (hi - lo)
            out.append(1.0 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=F32)


def gguf_metadata(gw, cfg, arch, dims, name, ftype):
    U32, F32T, STR = llm_io.U32, llm_io.F32T, llm_io.STRING
    gw.add("general.architecture", STR, arch)
    gw.add("general.name", STR, name)
    gw.add("general.alignment", U32, llm_io.GGUF_ALIGNMENT)
    gw.add("general.file_type", U32, FILE_TYPES[ftype])
    gw.add("general.quantization_version", U32, 2)
    gw.add(f"{arch}.vocab_size", U32, cfg["vocab_size"])
    gw.add(f"{arch}.context_length", U32, cfg.get("max_position_embeddings", 2048))
    gw.add(f"{arch}.embedding_length", U32, cfg["hidden_size"])
    gw.add(f"{arch}.block_count", U32, cfg["num_hidden_layers"])
    gw.add(f"{arch}.feed_forward_length", U32, cfg["intermediate_size"])
    gw.add(f"{arch}.rope.dimension_count", U32, dims["head_dim"])
    gw.add(f"{arch}.attention.head_count", U32, dims["heads"])
    gw.add(f"{arch}.attention.head_count_kv", U32, dims["kv"])
    if dims["head_dim"] != cfg["hidden_size"] // dims["heads"]:
        gw.add(f"{arch}.attention.key_length", U32, dims["head_dim"])
        gw.add(f"{arch}.attention.value_length", U32, dims["head_dim"])
    gw.add(f"{arch}.attention.layer_norm_rms_epsilon", F32T, cfg.get("rms_norm_eps", 1e-6))
    gw.add(f"{arch}.rope.freq_base", F32T, cfg.get("rope_theta", 10000.0))
    rs = cfg.get("rope_scaling") or {}
    if rs.get("rope_type", rs.get("type")) == "linear":
        gw.add(f"{arch}.rope.scaling.type", STR, "linear")
        gw.add(f"{arch}.rope.scaling.factor", F32T, rs["factor"])


def gguf_tokenizer_metadata(gw, hfdir, cfg):
    U32, STR = llm_io.U32, llm_io.STRING
    path = os.path.join(hfdir, "tokenizer.json")
    if not os.path.exists(path):
        raise ConvertError(f"{hfdir}: no tokenizer.json")
    with open(path, encoding="utf-8") as f:
        tok = json.load(f)
    tcfg = {}
    if os.path.exists(os.path.join(hfdir, "tokenizer_config.json")):
        with open(os.path.join(hfdir, "tokenizer_config.json"), encoding="utf-8") as f:
            tcfg = json.load(f)
    try:
        t = llm_tok.gguf_tokenizer(tok, tcfg, cfg["vocab_size"])
    except ValueError as exc:
        raise ConvertError(f"{path}: {exc}") from None
    gw.add("tokenizer.ggml.model", STR, t["model"])
    gw.add("tokenizer.ggml.pre", STR, t["pre"])
    gw.add_array("tokenizer.ggml.tokens", STR, t["tokens"])
    if "scores" in t:
        gw.add_array("tokenizer.ggml.scores", llm_io.F32T, t["scores"])
    gw.add_array("tokenizer.ggml.token_type", llm_io.I32, t["token_type"])
    if "merges" in t:
        gw.add_array("tokenizer.ggml.merges", STR, t["merges"])
    # config.json's ids win over the tokenizer's names, as in llama.cpp
    for key, cfg_key in (("bos", "bos_token_id"), ("eos", "eos_token_id")):
        value = cfg.get(cfg_key)
        if isinstance(value, list):
            value = value[0] if value else None
        if value is None:
            value = t.get(f"{key}_id")
        if value is not None:
            gw.add(f"tokenizer.ggml.{key}_token_id", U32, value)
    for key in ("unk", "pad"):
        if f"{key}_id" in t:
            name = "unknown" if key == "unk" else "padding"
            gw.add(f"tokenizer.ggml.{name}_token_id", U32, t[f"{key}_id"])
    for key in ("add_bos_token", "add_eos_token"):
        if key in t:
            gw.add(f"tokenizer.ggml.{key}", llm_io.BOOL, t[key])


def gguf_tensor_plan(ck, cfg, arch, dims, ftype):
    """[(gguf name, hf name, numpy shape, ggml type, undo_heads)] in the
    order llama.cpp writes them; undo_heads is the head count whose Q/K
    permutation is undone (llama only), else None. Shapes are checked
    against what config.json implies."""
    tied = cfg.get("tie_word_embeddings", False)
    plan = []

    def add(gname, hname, undo_heads=None):
        if hname not in ck:
            raise ConvertError(f"{ck.path}: tensor {hname} is missing")
        shape = ck.shape(hname)
        if len(shape) == 1 or not hname.endswith(".weight"):
            gtype = "F32"
        else:
            gtype = ftype
            if shape[-1] % llm_io.GGML_TYPES[gtype][1]:
                gtype = "F16"
        plan.append((gname, hname, shape, gtype, undo_heads))

    add("token_embd.weight", "model.embed_tokens.weight")
    qkv = ["q", "k", "v"]
    for i in range(cfg["num_hidden_layers"]):
        p, b = f"model.layers.{i}.", f"blk.{i}."
        if arch == "phi3":  # fused, as llama.cpp's Phi3MiniModel keeps them
            add(b + "attn_norm.weight", p + "input_layernorm.weight")
            add(b + "attn_qkv.weight", p + "self_attn.qkv_proj.weight")
            add(b + "attn_output.weight", p + "self_attn.o_proj.weight")
            add(b + "ffn_norm.weight", p + "post_attention_layernorm.weight")
            add(b + "ffn_up.weight", p + "mlp.gate_up_proj.weight")
            add(b + "ffn_down.weight", p + "mlp.down_proj.weight")
            continue
        add(b + "attn_norm.weight", p + "input_layernorm.weight")
        for x in qkv:
            undo = {"q": dims["heads"], "k": dims["kv"]}.get(x) if arch == "llama" else None
            add(b + f"attn_{x}.weight", p + f"self_attn.{x}_proj.weight", undo)
            if arch == "qwen2":
                add(b + f"attn_{x}.bias", p + f"self_attn.{x}_proj.bias")
        add(b + "attn_output.weight", p + "self_attn.o_proj.weight")
        if arch == "qwen3":
            add(b + "attn_q_norm.weight", p + "self_attn.q_norm.weight")
            add(b + "attn_k_norm.weight", p + "self_attn.k_norm.weight")
        add(b + "ffn_norm.weight", p + "post_attention_layernorm.weight")
        add(b + "ffn_gate.weight", p + "mlp.gate_proj.weight")
        add(b + "ffn_up.weight", p + "mlp.up_proj.weight")
        add(b + "ffn_down.weight", p + "mlp.down_proj.weight")
    add("output_norm.weight", "model.norm.weight")
    if not tied:
        add("output.weight", "lm_head.weight")
    expect = dict(hf_shapes(dict(cfg, architectures=cfg["architectures"],
                                 num_key_value_heads=dims["kv"], head_dim=dims["head_dim"])))
    for _, hname, shape, _, _ in plan:
        if tuple(expect.get(hname, ())) != tuple(shape):
            raise ConvertError(f"{ck.path}: tensor {hname} has shape {list(shape)}, "
                               f"config.json implies {list(expect.get(hname, ()))}")
    return plan


def encode_ggml(x, gtype):
    if gtype == "Q8_0":
        return llm_io.quantize_q8_0(x)
    if gtype == "F16":
        return np.ascontiguousarray(x, dtype="<f2")
    if gtype == "BF16":
        return llm_io.bf16_bits(x)
    return np.ascontiguousarray(x, dtype="<f4")


def hf_to_gguf(args):
    try:
        ck = llm_io.HfCheckpoint(args.hfdir)
    except (OSError, ValueError, KeyError) as exc:
        raise ConvertError(f"{args.hfdir}: {exc}") from None
    cfg = ck.config
    arch, dims = check_hf_config(cfg)
    plan = gguf_tensor_plan(ck, cfg, arch, dims, args.type)
    rs = cfg.get("rope_scaling") or {}
    extra = []
    if rs.get("rope_type", rs.get("type")) == "llama3":
        extra.append(("rope_freqs.weight", llama3_rope_factors(cfg, dims["head_dim"])))
    name = args.name or os.path.basename(os.path.abspath(args.hfdir))
    window = cfg.get("sliding_window") if cfg["architectures"][0] == "MistralForCausalLM" else None
    if window and window < cfg.get("max_position_embeddings", 0):
        print(f"llm_convert: note: sliding_window {window} is not carried into GGUF "
              "(llama.cpp's llama architecture attends to the whole context)", file=sys.stderr)

    def work(out):
        gw = llm_io.GgufWriter(out)
        gguf_metadata(gw, cfg, arch, dims, name, args.type)
        gguf_tokenizer_metadata(gw, args.hfdir, cfg)
        for gname, data in extra:
            gw.add_tensor(gname, data.shape, "F32")
        for gname, _, shape, gtype, _ in plan:
            gw.add_tensor(gname, shape, gtype)
        gw.begin_data()
        try:
            for gname, data in extra:
                gw.write_tensor(gname, data)
            for gname, hname, shape, gtype, undo_heads in plan:
                if undo_heads:      # whole heads at once: Q and K are small
                    x = to_interleaved(ck.tensor(hname), undo_heads)
                    gw.write_tensor(gname, encode_ggml(x, gtype))
                else:
                    raw = ck.raw(hname)
                    for a, b in row_blocks(shape):
                        x = llm_io.decode(raw[a:b], ck.dtype(hname))
                        gw.write_tensor(gname, encode_ggml(x, gtype))
                ck.release(hname)
        except BaseException:
            gw.abort()
            raise
        gw.close()

    write_outputs(args.out, False, work)


# ---------------------------------------------------------------------------
# gen
# ---------------------------------------------------------------------------

def gen_weights(seed, name, shape):
    """One random tensor, drawn from a generator seeded by (seed, name) so
    it does not depend on the order or sharding of the others.

    Scales keep activations of order 1 through any depth: matrices are
    N(0, 1/fan_in) (0.022 at dim 2048, the usual 0.02), so each sublayer
    adds a contribution of about unit size to a residual stream that the
    norms rescale; norm gains are U(0.8, 1.2) and biases N(0, 0.2), so that
    skipping either changes the output. The token embedding is N(0, 0.02):
    small beside the layers' contributions, so that a tied head (whose
    logits then have a spread of 0.02 sqrt(dim)) does not favour the input
    token and the model does not just repeat it. Random models still fall
    into loops of a few tokens, but different prompts lead to different
    continuations."""
    rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
    std = 0.02 if name == "model.embed_tokens.weight" else 1.0 / np.sqrt(shape[-1])
    for a, b in row_blocks(shape):          # the same values as in one draw
        part = (b - a,) + tuple(shape[1:])
        if name.endswith("norm.weight"):
            yield rng.uniform(0.8, 1.2, size=part).astype(F32)
        elif name.endswith(".bias"):
            yield rng.standard_normal(part, dtype=F32) * F32(0.2)
        else:
            yield rng.standard_normal(part, dtype=F32) * F32(std)


def load_tokenizer_source(path):
    """(tokenizer.json dict, tokenizer_config dict or None, file paths to
    copy) from a tokenizer.json file or a directory holding one."""
    if os.path.isdir(path):
        path = os.path.join(path, "tokenizer.json")
    with open(path, encoding="utf-8") as f:
        tok = json.load(f)
    files, tcfg = [path], None
    side = os.path.join(os.path.dirname(path), "tokenizer_config.json")
    if os.path.exists(side):
        with open(side, encoding="utf-8") as f:
            tcfg = json.load(f)
        files.append(side)
    return tok, tcfg, files


def tokenizer_ids(tok, tcfg):
    """(number of ids, bos id, eos id) of a tokenizer.json (+ config)."""
    ids = dict(tok["model"]["vocab"])
    for a in tok.get("added_tokens", []):
        ids[a["content"]] = a["id"]
    out = []
    for key in ("bos_token", "eos_token"):
        v = (tcfg or {}).get(key)
        if isinstance(v, dict):
            v = v.get("content")
        out.append(ids.get(v) if v is not None else None)
    return max(ids.values()) + 1, out[0], out[1]


def rope_scaling_of(args):
    if args.rope_scaling is None:
        return None
    if args.rope_scaling == "linear":
        return {"rope_type": "linear", "factor": args.rope_factor}
    return {"rope_type": "llama3", "factor": args.rope_factor,
            "low_freq_factor": args.low_freq_factor,
            "high_freq_factor": args.high_freq_factor,
            "original_max_position_embeddings": args.original_max_pos}


def gen(args):
    heads = args.heads
    kv = args.kv_heads or heads
    head_dim = args.head_dim or args.dim // heads
    if heads % kv:
        raise ConvertError(f"--heads {heads} is not a multiple of --kv-heads {kv}")
    if head_dim % 2 or (args.head_dim is None and args.dim % heads):
        raise ConvertError("head dim must be even (and --dim a multiple of --heads "
                           "unless --head-dim is given)")
    if args.tokenizer:
        tok, tcfg, files = load_tokenizer_source(args.tokenizer)
        n_ids, bos, eos = tokenizer_ids(tok, tcfg)
        vocab = args.vocab or n_ids
        if vocab < n_ids:
            raise ConvertError(f"--vocab {vocab} is smaller than the tokenizer's {n_ids} ids")
    else:
        vocab = args.vocab or 512
        try:
            pieces, scores = llm_tok.synthetic_spm(vocab, args.seed)
        except ValueError as exc:
            raise ConvertError(str(exc)) from None
        bos, eos = 1, 2
    tie = args.tie
    cfg = base_config(args.arch, args.dim, args.hidden, args.layers, heads, kv, head_dim,
                      vocab, tie, args.dtype, args.max_pos, args.rms_eps, args.rope_theta,
                      bos, eos)
    cfg["rope_scaling"] = rope_scaling_of(args)

    def work(out):
        write_safetensors_dir(out, hf_shapes(cfg), args.dtype, args.shards,
                              lambda name, shape: gen_weights(args.seed, name, shape))
        llm_tok.write_json(os.path.join(out, "config.json"), cfg)
        if args.tokenizer:
            for f in files:
                shutil.copyfile(f, os.path.join(out, os.path.basename(f)))
        else:
            llm_tok.write_spm_files(out, pieces, scores, args.max_pos)
        write_generation_config(out, bos, eos)

    write_outputs(args.outdir, True, work)


# ---------------------------------------------------------------------------
# command line
# ---------------------------------------------------------------------------

def positive(text):
    v = int(text)
    if v <= 0:
        raise argparse.ArgumentTypeError(f"{text} is not a positive integer")
    return v


def parser():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)

    a = sub.add_parser("llama2c-to-hf", help="llama2.c checkpoint -> HF Llama directory",
                       description="Convert a llama2.c checkpoint and tokenizer to an HF "
                       "Llama directory (Q/K rows permuted to HF's rotate-half layout).")
    a.add_argument("checkpoint", help="llama2.c model .bin")
    a.add_argument("tokenizer", help="llama2.c tokenizer .bin")
    a.add_argument("outdir", help="output directory (must not exist, or be empty)")
    a.add_argument("--dtype", choices=TORCH_DTYPES, default="F32")
    a.add_argument("--shards", type=positive, default=1,
                   help="write N safetensors files and an index")
    a.add_argument("--buggy-k-permute", action="store_true",
                   help="TESTS ONLY: permute K with the head count instead of the KV "
                   "head count, as llama2.c's export.py does (wrong for GQA)")
    a.set_defaults(func=llama2c_to_hf)

    h = sub.add_parser("hf-to-gguf", help="HF llama/mistral/qwen2 directory -> GGUF v3",
                       description="Convert an HF directory to GGUF v3 as llama.cpp lays "
                       "it out (architecture llama, qwen2, qwen3 or phi3).")
    h.add_argument("hfdir")
    h.add_argument("out", help="output .gguf (must not exist)")
    h.add_argument("--type", choices=FILE_TYPES, default="F32",
                   help="type of the matrices (1-D tensors stay F32); default F32")
    h.add_argument("--name", help="general.name (default: the directory's name)")
    h.set_defaults(func=hf_to_gguf)

    g = sub.add_parser("gen", help="random-weight HF checkpoint",
                       description="Write a random-weight HF checkpoint for tests and "
                       "benchmarks. TinyLlama-1.1B's shape: --dim 2048 --layers 22 "
                       "--hidden 5632 --heads 32 --kv-heads 4 --vocab 32000.")
    g.add_argument("outdir")
    g.add_argument("--arch", choices=ARCHS, default="llama")
    g.add_argument("--dim", type=positive, default=64)
    g.add_argument("--layers", type=positive, default=2)
    g.add_argument("--heads", type=positive, default=4)
    g.add_argument("--kv-heads", type=positive, help="default: --heads")
    g.add_argument("--head-dim", type=positive, help="default: dim / heads")
    g.add_argument("--hidden", type=positive, default=172)
    g.add_argument("--vocab", type=positive,
                   help="default: the tokenizer's size, or 512 for the synthetic one")
    tie = g.add_mutually_exclusive_group()
    tie.add_argument("--tie", dest="tie", action="store_true", default=False,
                     help="tie the output head to the embedding")
    tie.add_argument("--no-tie", dest="tie", action="store_false", help="(default)")
    g.add_argument("--rope-theta", type=float, default=10000.0)
    g.add_argument("--rope-scaling", choices=("llama3", "linear"))
    g.add_argument("--rope-factor", type=float, default=8.0)
    g.add_argument("--low-freq-factor", type=float, default=1.0)
    g.add_argument("--high-freq-factor", type=float, default=4.0)
    g.add_argument("--original-max-pos", type=positive, default=8192)
    g.add_argument("--max-pos", type=positive, default=2048,
                   help="max_position_embeddings")
    g.add_argument("--rms-eps", type=float, default=1e-5)
    g.add_argument("--dtype", choices=TORCH_DTYPES, default="F32")
    g.add_argument("--shards", type=positive, default=1)
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--tokenizer", help="copy this tokenizer.json (or the one in this "
                   "directory, with its tokenizer_config.json); default: a synthetic "
                   "SentencePiece-style tokenizer of --vocab pieces")
    g.set_defaults(func=gen)
    return p


def main(argv=None):
    args = parser().parse_args(argv)
    try:
        args.func(args)
    except (ConvertError, OSError, ValueError, KeyError) as exc:
        # FormatError is a ValueError; a bad JSON file raises one too
        print(f"llm_convert: {type(exc).__name__}: {exc}" if not isinstance(exc, ConvertError)
              else f"llm_convert: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
