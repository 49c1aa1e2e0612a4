# SPDX-License-Identifier: MIT
"""HF checkpoint directories for tools/llm_convert.py: the tensor names and
shapes a llama-family config implies, config.json, generation_config.json,
safetensors written one tensor (or block of rows) at a time and split into
shards, outputs that appear only when complete, and the RoPE row layouts
(Meta/GGUF-llama interleaved pairs vs HF halves)."""

import os
import shutil
import tempfile

import numpy as np

import llm_io
import llm_tok

TORCH_DTYPES = {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}
ARCHS = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM",
         "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM", "phi3": "Phi3ForCausalLM"}


class ConvertError(Exception):
    """A bad input or option; the message names it."""


# ---------------------------------------------------------------------------
# RoPE row layouts
# ---------------------------------------------------------------------------

def to_halves(w, n_heads):
    """Meta/GGUF-llama rows (per head, pairs (2j, 2j+1) interleaved) ->
    HF rows (per head, evens then odds). Works on weights and biases."""
    w = np.asarray(w)
    rows = w.shape[0]
    return w.reshape(n_heads, rows // n_heads // 2, 2, *w.shape[1:]) \
        .swapaxes(1, 2).reshape(w.shape)


def to_interleaved(w, n_heads):
    """The inverse of `to_halves`."""
    w = np.asarray(w)
    rows = w.shape[0]
    return w.reshape(n_heads, 2, rows // n_heads // 2, *w.shape[1:]) \
        .swapaxes(1, 2).reshape(w.shape)


def row_blocks(shape, limit=1 << 22):
    """(start, stop) ranges of the outermost dim, about `limit` elements
    each, that cover a tensor of `shape`."""
    rows = shape[0] if shape else 1
    per_row = int(np.prod(shape[1:], dtype=np.int64)) if len(shape) > 1 else 1
    step = max(1, limit // max(per_row, 1))
    return [(r, min(rows, r + step)) for r in range(0, rows, step)]


# ---------------------------------------------------------------------------
# HF directories
# ---------------------------------------------------------------------------

def layer_names(i, qkv_bias=False, qk_norm=False, fused=False):
    p = f"model.layers.{i}."
    if fused:       # Phi-3: q, k, v in one matrix, gate and up in another
        return [p + n for n in ("input_layernorm.weight", "self_attn.qkv_proj.weight",
                                "self_attn.o_proj.weight", "post_attention_layernorm.weight",
                                "mlp.gate_up_proj.weight", "mlp.down_proj.weight")]
    names = [p + "input_layernorm.weight"]
    for x in "qkv":
        names.append(p + f"self_attn.{x}_proj.weight")
        if qkv_bias:
            names.append(p + f"self_attn.{x}_proj.bias")
    names.append(p + "self_attn.o_proj.weight")
    if qk_norm:     # Qwen3: an RMSNorm of each head of q and of k
        names += [p + "self_attn.q_norm.weight", p + "self_attn.k_norm.weight"]
    names += [p + "post_attention_layernorm.weight",
              p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight", p + "mlp.down_proj.weight"]
    return names


def hf_shapes(cfg):
    """[(name, shape)] of every tensor of an HF llama-family config, in the
    order HF saves them."""
    dim, hid, vocab = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    heads = cfg["num_attention_heads"]
    kv = cfg.get("num_key_value_heads") or heads
    hd = cfg.get("head_dim") or dim // heads
    qkv_bias = cfg["architectures"][0] == "Qwen2ForCausalLM"
    qk_norm = cfg["architectures"][0] == "Qwen3ForCausalLM"
    fused = cfg["architectures"][0] == "Phi3ForCausalLM"
    shapes = {"self_attn.q_norm.weight": (hd,), "self_attn.k_norm.weight": (hd,),
              "self_attn.qkv_proj.weight": ((heads + 2 * kv) * hd, dim),
              "mlp.gate_up_proj.weight": (2 * hid, dim),"input_layernorm.weight": (dim,), "post_attention_layernorm.weight": (dim,),
              "self_attn.q_proj.weight": (heads * hd, dim), "self_attn.q_proj.bias": (heads * hd,),
              "self_attn.k_proj.weight": (kv * hd, dim), "self_attn.k_proj.bias": (kv * hd,),
              "self_attn.v_proj.weight": (kv * hd, dim), "self_attn.v_proj.bias": (kv * hd,),
              "self_attn.o_proj.weight": (dim, heads * hd),
              "mlp.gate_proj.weight": (hid, dim), "mlp.up_proj.weight": (hid, dim),
              "mlp.down_proj.weight": (dim, hid)}
    out = [("model.embed_tokens.weight", (vocab, dim))]
    for i in range(cfg["num_hidden_layers"]):
        out += [(n, shapes[n.split(".", 3)[3]])
                for n in layer_names(i, qkv_bias, qk_norm, fused)]
    out.append(("model.norm.weight", (dim,)))
    if not cfg.get("tie_word_embeddings", False):
        out.append(("lm_head.weight", (vocab, dim)))
    return out


def _split_shards(specs, dtype, shards):
    """Consecutive groups of `specs` with about equal byte counts."""
    size = np.dtype(llm_io.ST_DTYPES[dtype]).itemsize
    nbytes = [int(np.prod(s)) * size for _, s in specs]
    if not 1 <= shards <= len(specs):
        raise ConvertError(f"--shards {shards}: must be 1..{len(specs)}")
    total, groups, cur, acc = sum(nbytes), [], [], 0
    for k, (spec, nb) in enumerate(zip(specs, nbytes)):
        cur.append(spec)
        acc += nb
        specs_left, groups_left = len(specs) - k - 1, shards - len(groups) - 1
        # close a file at its share of the bytes, or when each file still
        # to come needs one of the tensors left
        if groups_left and (acc >= total * (len(groups) + 1) / shards
                            or specs_left == groups_left):
            groups.append(cur)
            cur = []
    groups.append(cur)
    assert len(groups) == shards
    return groups, total


def write_safetensors_dir(outdir, specs, dtype, shards, produce):
    """model.safetensors, or `shards` files and the index, for tensors
    `specs` [(name, shape)]; `produce(name)` returns each tensor (float32)
    when its turn comes, or an iterable of consecutive blocks of its rows,
    so only one tensor (or block) is in memory at a time."""
    groups, total = _split_shards(specs, dtype, shards)
    meta = {"format": "pt"}
    weight_map = {}
    for k, group in enumerate(groups):
        fname = ("model.safetensors" if shards == 1
                 else f"model-{k + 1:05d}-of-{shards:05d}.safetensors")
        with llm_io.SafetensorsWriter(os.path.join(outdir, fname),
                                      [(n, dtype, s) for n, s in group], meta) as w:
            for name, shape in group:
                data = produce(name, shape)
                for block in ([data] if isinstance(data, np.ndarray) else data):
                    w.write(name, block)
                weight_map[name] = fname
    if shards > 1:
        llm_tok.write_json(os.path.join(outdir, "model.safetensors.index.json"),
                           {"metadata": {"total_size": total}, "weight_map": weight_map})


class Output:
    """A file or directory written under a temporary name and moved into
    place by `commit`; removed if the work fails."""

    def __init__(self, final, is_dir):
        self.final = os.path.abspath(final)
        parent = os.path.dirname(self.final)
        if os.path.exists(self.final) and not (
                is_dir and os.path.isdir(self.final) and not os.listdir(self.final)):
            raise ConvertError(f"{final}: already exists")
        os.makedirs(parent, exist_ok=True)
        prefix = "." + os.path.basename(self.final) + ".tmp"
        if is_dir:
            self.path = tempfile.mkdtemp(prefix=prefix, dir=parent)
        else:
            fd, self.path = tempfile.mkstemp(prefix=prefix, dir=parent)
            os.close(fd)
        self.is_dir = is_dir

    def commit(self):
        if self.is_dir and os.path.isdir(self.final):
            os.rmdir(self.final)
        if self.is_dir:
            os.chmod(self.path, 0o755)
        else:
            os.chmod(self.path, 0o644)
        os.replace(self.path, self.final)

    def discard(self):
        if os.path.isdir(self.path):
            shutil.rmtree(self.path, ignore_errors=True)
        elif os.path.exists(self.path):
            os.unlink(self.path)


def write_outputs(final, is_dir, work):
    out = Output(final, is_dir)
    try:
        work(out.path)
        out.commit()
    except BaseException:
        out.discard()
        raise


def base_config(arch, dim, hidden, layers, heads, kv_heads, head_dim, vocab, tie,
                dtype, max_pos, eps=1e-5, theta=10000.0, bos=1, eos=2):
    cfg = {"architectures": [ARCHS[arch]], "model_type": arch,
           "hidden_size": dim, "intermediate_size": hidden, "num_hidden_layers": layers,
           "num_attention_heads": heads, "num_key_value_heads": kv_heads,
           "head_dim": head_dim, "hidden_act": "silu",
           "max_position_embeddings": max_pos, "rms_norm_eps": eps,
           "rope_theta": theta, "rope_scaling": None, "tie_word_embeddings": tie,
           "vocab_size": vocab, "bos_token_id": bos, "eos_token_id": eos,
           "attention_dropout": 0.0, "initializer_range": 0.02,
           "torch_dtype": TORCH_DTYPES[dtype], "use_cache": True}
    if arch == "llama":
        cfg.update(attention_bias=False, mlp_bias=False, pretraining_tp=1)
    elif arch == "mistral":
        cfg.update(sliding_window=None)
    elif arch == "phi3":
        cfg.update(attention_bias=False, sliding_window=None,
                   original_max_position_embeddings=max_pos)
    elif arch == "qwen3":
        cfg.update(attention_bias=False, use_sliding_window=False, sliding_window=None,
                   max_window_layers=layers)
    else:
        cfg.update(use_sliding_window=False, sliding_window=None, max_window_layers=layers)
    return cfg


def write_generation_config(outdir, bos, eos):
    gen = {"_from_model_config": True}
    if bos is not None:
        gen["bos_token_id"] = bos
    if eos is not None:
        gen["eos_token_id"] = eos
    llm_tok.write_json(os.path.join(outdir, "generation_config.json"), gen)
