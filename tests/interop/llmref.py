# SPDX-License-Identifier: MIT
"""An independent numpy reference of HF transformers' llama-family decoders
(LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM), computing in
float64 from an HF directory. muster's C decoder is tested against it.

    ref = llmref.Model("path/to/hf-dir")
    logits = ref.logits([1, 306, 4966])      # [3, vocab] float64
    ids = ref.generate([1], 200)            # greedy continuation

It reads config.json and the safetensors (one file, or the shards named
by model.safetensors.index.json; F32, F16 or BF16) with mumodel's reader,
which shares no code with tools/llm_io.py, the converter's writer. It is
written from the semantics of transformers' modeling_llama /
modeling_mistral / modeling_qwen2, kept short so it can be read against
them:

* RMSNorm: x / sqrt(mean(x^2) + rms_norm_eps) * weight.
* RoPE in HF's layout: the two halves of each head are the pairs
  (rotate_half); inverse frequencies theta^(-2j/head_dim) with
  rope_theta, rescaled for rope_scaling "linear" (divided by factor) and
  "llama3" (wavelength by wavelength, as transformers'
  _compute_llama3_parameters). Rotation happens after the q/k biases.
* Attention: q/k/v projections (with biases for Qwen2), GQA through
  repeat_kv (query head h reads KV head h // (heads / kv_heads)), causal
  softmax of q.k / sqrt(head_dim), and Mistral's sliding window (a query
  sees its last `sliding_window` positions; 4096 when config.json omits
  the key, null for none).
* MLP: down(silu(gate(x)) * up(x)); residual adds around both blocks.
* Head: final norm, then lm_head, or the embedding when
  tie_word_embeddings (false unless config.json says so, as in the
  Llama/Mistral/Qwen2 config classes).

Unsupported settings (another hidden_act, attention or MLP biases on
Llama, Qwen2's use_sliding_window, other rope_scaling types) raise
ValueError naming the field. Weights are kept as float32 (the stored
values exactly) and widened to float64 per use, so a model too big to hold
in float64 still runs.
"""

import json
import math
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import mumodel  # noqa: E402

F64 = np.float64


class Weights:
    """Tensors of an HF directory by name, as float32 arrays."""

    def __init__(self, path):
        index = os.path.join(path, "model.safetensors.index.json")
        if os.path.exists(index):
            with open(index, encoding="utf-8") as f:
                weight_map = json.load(f)["weight_map"]
        else:
            st = mumodel.SafetensorsFile(os.path.join(path, "model.safetensors"))
            weight_map = {name: "model.safetensors" for name in st}
        files = {fname: mumodel.SafetensorsFile(os.path.join(path, fname))
                 for fname in set(weight_map.values())}
        self.files = {name: files[fname] for name, fname in weight_map.items()}

    def __contains__(self, name):
        return name in self.files

    def get(self, name, shape):
        if name not in self.files:
            raise ValueError(f"tensor {name} is missing")
        t = self.files[name][name]
        if tuple(t.shape) != tuple(shape):
            raise ValueError(f"tensor {name} has shape {list(t.shape)}, expected {list(shape)}")
        return np.asarray(t, dtype=np.float32)


def rope_inv_freq(cfg, head_dim):
    """Inverse frequencies of the head_dim/2 rotation pairs (float64)."""
    theta = float(cfg.get("rope_theta", 10000.0))
    inv = 1.0 / theta ** (np.arange(0, head_dim, 2, dtype=F64) / head_dim)
    rs = cfg.get("rope_scaling")
    if not rs:
        return inv
    kind = rs.get("rope_type", rs.get("type"))
    if kind == "default":
        return inv
    if kind == "linear":
        return inv / rs["factor"]
    if kind != "llama3":
        raise ValueError(f"config.json rope_scaling type {kind!r} is unsupported")
    factor = rs["factor"]
    low, high = rs["low_freq_factor"], rs["high_freq_factor"]
    old_ctx = rs["original_max_position_embeddings"]
    wavelen = 2 * math.pi / inv
    # long wavelengths are slowed by `factor`, short ones kept, and the
    # band between blends the two
    scaled = np.where(wavelen > old_ctx / low, inv / factor, inv)
    smooth = (old_ctx / wavelen - low) / (high - low)
    blended = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelen >= old_ctx / high) & (wavelen <= old_ctx / low)
    return np.where(medium, blended, scaled)


def rotate_half(x):
    half = x.shape[-1] // 2
    return np.concatenate([-x[..., half:], x[..., :half]], axis=-1)


def apply_rope(x, positions, inv_freq):
    """x [T, heads, head_dim] rotated for its positions, HF layout."""
    angles = np.outer(positions, inv_freq)                   # [T, head_dim/2]
    emb = np.concatenate([angles, angles], axis=-1)[:, None, :]
    return x * np.cos(emb) + rotate_half(x) * np.sin(emb)


def rms_norm(x, weight, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * weight


def silu(x):
    return x / (1.0 + np.exp(-x))


def softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


class Model:
    """An HF llama-family model. `logits(ids)` runs a whole sequence;
    `start()` / `step(ids)` run it in pieces with a KV cache (the same
    arithmetic); `generate(prompt, n)` is greedy decoding."""

    ARCHS = ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM")

    def __init__(self, path):
        self.path = str(path)
        with open(os.path.join(self.path, "config.json"), encoding="utf-8") as f:
            cfg = json.load(f)
        self.cfg = cfg
        arch = (cfg.get("architectures") or [None])[0]
        if arch not in self.ARCHS:
            raise ValueError(f"config.json architectures {cfg.get('architectures')} "
                             "is unsupported")
        if cfg.get("hidden_act", "silu") != "silu":
            raise ValueError(f"config.json hidden_act {cfg['hidden_act']!r} is unsupported")
        for key in ("attention_bias", "mlp_bias", "use_sliding_window"):
            if cfg.get(key):
                raise ValueError(f"config.json {key}: true is unsupported")
        self.dim = cfg["hidden_size"]
        self.n_layers = cfg["num_hidden_layers"]
        self.heads = cfg["num_attention_heads"]
        self.kv_heads = cfg.get("num_key_value_heads") or self.heads
        self.head_dim = cfg.get("head_dim") or self.dim // self.heads
        self.vocab = cfg["vocab_size"]
        self.eps = cfg.get("rms_norm_eps", 1e-6)
        # MistralConfig defaults sliding_window to 4096 when config.json omits it
        self.window = cfg.get("sliding_window", 4096) if arch == "MistralForCausalLM" else None
        self.qkv_bias = arch == "Qwen2ForCausalLM"
        self.inv_freq = rope_inv_freq(cfg, self.head_dim)
        self._load(Weights(self.path), cfg.get("tie_word_embeddings", False))

    def _load(self, w, tied):
        d, hd, hid = self.dim, self.head_dim, cfg_int(self.cfg, "intermediate_size")
        q_out, kv_out = self.heads * hd, self.kv_heads * hd
        self.embed = w.get("model.embed_tokens.weight", (self.vocab, d))
        self.layers = []
        for i in range(self.n_layers):
            p = f"model.layers.{i}."
            layer = {
                "attn_norm": w.get(p + "input_layernorm.weight", (d,)),
                "q": w.get(p + "self_attn.q_proj.weight", (q_out, d)),
                "k": w.get(p + "self_attn.k_proj.weight", (kv_out, d)),
                "v": w.get(p + "self_attn.v_proj.weight", (kv_out, d)),
                "o": w.get(p + "self_attn.o_proj.weight", (d, q_out)),
                "mlp_norm": w.get(p + "post_attention_layernorm.weight", (d,)),
                "gate": w.get(p + "mlp.gate_proj.weight", (hid, d)),
                "up": w.get(p + "mlp.up_proj.weight", (hid, d)),
                "down": w.get(p + "mlp.down_proj.weight", (d, hid)),
            }
            if self.qkv_bias:
                layer["q_bias"] = w.get(p + "self_attn.q_proj.bias", (q_out,))
                layer["k_bias"] = w.get(p + "self_attn.k_proj.bias", (kv_out,))
                layer["v_bias"] = w.get(p + "self_attn.v_proj.bias", (kv_out,))
            self.layers.append(layer)
        self.norm = w.get("model.norm.weight", (d,))
        self.head = self.embed if tied else w.get("lm_head.weight", (self.vocab, d))

    # -- the forward pass -------------------------------------------------

    def start(self):
        """Empty the KV cache: the next `step` starts at position 0."""
        self.cache = [{"k": np.zeros((0, self.kv_heads, self.head_dim)),
                       "v": np.zeros((0, self.kv_heads, self.head_dim))}
                      for _ in range(self.n_layers)]
        self.pos = 0

    def step(self, ids):
        """Logits [len(ids), vocab] (float64) of the next positions."""
        ids = np.asarray(ids, dtype=np.int64)
        if ids.ndim != 1 or ids.size == 0 or ids.min() < 0 or ids.max() >= self.vocab:
            raise ValueError(f"token ids must be a non-empty list in [0, {self.vocab})")
        positions = np.arange(self.pos, self.pos + ids.size)
        x = self.embed[ids].astype(F64)
        for layer, cache in zip(self.layers, self.cache):
            x = x + self._attention(layer, cache, rms_norm(x, layer["attn_norm"], self.eps),
                                    positions)
            h = rms_norm(x, layer["mlp_norm"], self.eps)
            x = x + linear(silu(linear(h, layer["gate"])) * linear(h, layer["up"]),
                           layer["down"])
        self.pos += ids.size
        return linear(rms_norm(x, self.norm, self.eps), self.head)

    def _attention(self, layer, cache, x, positions):
        t, hd = x.shape[0], self.head_dim
        q = linear(x, layer["q"], layer.get("q_bias")).reshape(t, self.heads, hd)
        k = linear(x, layer["k"], layer.get("k_bias")).reshape(t, self.kv_heads, hd)
        v = linear(x, layer["v"], layer.get("v_bias")).reshape(t, self.kv_heads, hd)
        q = apply_rope(q, positions, self.inv_freq)
        k = apply_rope(k, positions, self.inv_freq)
        cache["k"] = np.concatenate([cache["k"], k])
        cache["v"] = np.concatenate([cache["v"], v])
        # repeat_kv: query head h uses KV head h // group
        group = self.heads // self.kv_heads
        keys = np.repeat(cache["k"], group, axis=1)              # [S, heads, hd]
        values = np.repeat(cache["v"], group, axis=1)
        scores = np.einsum("thd,shd->hts", q, keys) / math.sqrt(hd)
        key_pos = np.arange(keys.shape[0])
        visible = key_pos[None, :] <= positions[:, None]
        if self.window:
            visible &= key_pos[None, :] > positions[:, None] - self.window
        scores = np.where(visible[None], scores, -np.inf)
        out = np.einsum("hts,shd->thd", softmax(scores), values).reshape(t, self.heads * hd)
        return linear(out, layer["o"])

    # -- conveniences ------------------------------------------------------

    def logits(self, ids):
        """Logits [len(ids), vocab] of a whole sequence from position 0."""
        self.start()
        return self.step(ids)

    def generate(self, prompt, n, stop=()):
        """Greedy: `n` tokens after `prompt` (argmax, the first maximum on
        ties), ending early after a token in `stop`."""
        self.start()
        logits = self.step(prompt)[-1]
        out = []
        for _ in range(n):
            nxt = int(np.argmax(logits))
            out.append(nxt)
            if nxt in stop or len(out) == n:
                break
            logits = self.step([nxt])[-1]
        return out


def cfg_int(cfg, key):
    v = cfg.get(key)
    if not isinstance(v, int) or v <= 0:
        raise ValueError(f"config.json {key}: missing or not a positive integer")
    return v


def linear(x, w, b=None):
    """x @ w.T (+ b) in float64, w stored [out, in] as HF's Linear."""
    y = x @ w.astype(F64).T
    return y if b is None else y + b.astype(F64)
