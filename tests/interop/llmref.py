# SPDX-License-Identifier: MIT
"""An independent numpy reference of HF transformers' llama-family decoders
(LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM,
Phi3ForCausalLM), computing in
float64 from an HF directory. muster's C decoder is tested against it.

    ref = llmref.Model("path/to/hf-dir")
    logits = ref.logits([1, 306, 4966])      # [3, vocab] float64
    ids = ref.generate([1], 200)            # greedy continuation

It reads config.json and the safetensors (one file, or the shards named
by model.safetensors.index.json; F32, F16 or BF16) with mumodel's reader,
which shares no code with tools/llm_io.py, the converter's writer. It is
written from the semantics of transformers' modeling_llama /
modeling_mistral / modeling_qwen2 / modeling_qwen3 / modeling_phi3, kept short so it can be read against
them:

* RMSNorm: x / sqrt(mean(x^2) + rms_norm_eps) * weight.
* RoPE in HF's layout: the two halves of each head are the pairs
  (rotate_half); inverse frequencies theta^(-2j/head_dim) with
  rope_theta, rescaled for rope_scaling "linear" (divided by factor) and
  "llama3" (wavelength by wavelength, as transformers'
  _compute_llama3_parameters). Rotation happens after the q/k biases,
  and after Qwen3's q_norm/k_norm (an RMSNorm of each head, weight
  [head_dim], rms_norm_eps).
* Attention: q/k/v projections (with biases for Qwen2), GQA through
  repeat_kv (query head h reads KV head h // (heads / kv_heads)), causal
  softmax of q.k / sqrt(head_dim), and Mistral's sliding window (a query
  sees its last `sliding_window` positions; 4096 when config.json omits
  the key, null for none).
* MLP: down(silu(gate(x)) * up(x)); residual adds around both blocks.
* Phi-3 keeps q, k and v in one qkv_proj (rows: q, then k, then v) and
  gate and up in one gate_up_proj (gate's rows first); its sliding_window
  applies when config.json gives one (Phi3Config's default is none).
* Head: final norm, then lm_head, or the embedding when
  tie_word_embeddings (false unless config.json says so, as in the
  Llama/Mistral/Qwen2 config classes).

`from_gguf(path)` and `from_llama2c(path)` build the same Model from a
GGUF "llama"/"qwen2" file (dequantized; "llama" rotating adjacent pairs,
as llama.cpp does) or a llama2.c checkpoint, read with tools/llm_io.py;
`python3 llmref.py MODEL --ids 1,2 -n 20` prints greedy tokens (-n 0:
logits).

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


def apply_rope_pairs(x, positions, inv_freq):
    """x [T, heads, head_dim] rotated for its positions, in Meta's layout
    (llama2.c, GGUF "llama"): pair j is (x[2j], x[2j+1])."""
    angles = np.outer(positions, inv_freq)[:, None, :]     # [T, 1, head_dim/2]
    cos, sin = np.cos(angles), np.sin(angles)
    even, odd = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = even * cos - odd * sin
    out[..., 1::2] = even * sin + odd * cos
    return out


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

    ARCHS = ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM",
             "Phi3ForCausalLM")

    def __init__(self, path):
        self.path = str(path)
        with open(os.path.join(self.path, "config.json"), encoding="utf-8") as f:
            cfg = json.load(f)
        self._configure(cfg)
        self._load(Weights(self.path).get, cfg.get("tie_word_embeddings", False))

    def _configure(self, cfg):
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
        self.dim = cfg_int(cfg, "hidden_size")
        self.n_layers = cfg_int(cfg, "num_hidden_layers")
        self.heads = cfg_int(cfg, "num_attention_heads")
        self.kv_heads = cfg.get("num_key_value_heads") or self.heads
        self.head_dim = cfg.get("head_dim") or self.dim // self.heads
        self.vocab = cfg_int(cfg, "vocab_size")
        self.eps = cfg.get("rms_norm_eps", 1e-6)
        # MistralConfig defaults sliding_window to 4096 when config.json omits it
        self.window = cfg.get("sliding_window", 4096) if arch == "MistralForCausalLM" else None
        if arch == "Phi3ForCausalLM":
            self.window = cfg.get("sliding_window")
        self.fused = arch == "Phi3ForCausalLM"
        self.qkv_bias = arch == "Qwen2ForCausalLM"
        self.qk_norm = arch == "Qwen3ForCausalLM"
        self.inv_freq = rope_inv_freq(cfg, self.head_dim)
        # HF rotates halves; from_gguf / from_llama2c may switch to pairs
        self.rope = apply_rope

    def _load(self, get, tied):
        """Weights by HF name: get(name, shape) -> float32 array."""
        d, hd, hid = self.dim, self.head_dim, cfg_int(self.cfg, "intermediate_size")
        q_out, kv_out = self.heads * hd, self.kv_heads * hd
        self.embed = get("model.embed_tokens.weight", (self.vocab, d))
        self.layers = []
        for i in range(self.n_layers):
            p = f"model.layers.{i}."
            if self.fused:
                self.layers.append(self._fused_layer(get, p, d, hid, q_out, kv_out))
                continue
            layer = {
                "attn_norm": get(p + "input_layernorm.weight", (d,)),
                "q": get(p + "self_attn.q_proj.weight", (q_out, d)),
                "k": get(p + "self_attn.k_proj.weight", (kv_out, d)),
                "v": get(p + "self_attn.v_proj.weight", (kv_out, d)),
                "o": get(p + "self_attn.o_proj.weight", (d, q_out)),
                "mlp_norm": get(p + "post_attention_layernorm.weight", (d,)),
                "gate": get(p + "mlp.gate_proj.weight", (hid, d)),
                "up": get(p + "mlp.up_proj.weight", (hid, d)),
                "down": get(p + "mlp.down_proj.weight", (d, hid)),
            }
            if self.qkv_bias:
                layer["q_bias"] = get(p + "self_attn.q_proj.bias", (q_out,))
                layer["k_bias"] = get(p + "self_attn.k_proj.bias", (kv_out,))
                layer["v_bias"] = get(p + "self_attn.v_proj.bias", (kv_out,))
            if self.qk_norm:
                layer["q_norm"] = get(p + "self_attn.q_norm.weight", (hd,))
                layer["k_norm"] = get(p + "self_attn.k_norm.weight", (hd,))
            self.layers.append(layer)
        self.norm = get("model.norm.weight", (d,))
        self.head = self.embed if tied else get("lm_head.weight", (self.vocab, d))

    @staticmethod
    def _fused_layer(get, p, d, hid, q_out, kv_out):
        """Phi-3's layer: its fused matrices cut into the usual parts."""
        qkv = get(p + "self_attn.qkv_proj.weight", (q_out + 2 * kv_out, d))
        gate_up = get(p + "mlp.gate_up_proj.weight", (2 * hid, d))
        return {"attn_norm": get(p + "input_layernorm.weight", (d,)),
                "q": qkv[:q_out], "k": qkv[q_out:q_out + kv_out], "v": qkv[q_out + kv_out:],
                "o": get(p + "self_attn.o_proj.weight", (d, q_out)),
                "mlp_norm": get(p + "post_attention_layernorm.weight", (d,)),
                "gate": gate_up[:hid], "up": gate_up[hid:],
                "down": get(p + "mlp.down_proj.weight", (d, hid))}

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
        if self.qk_norm:        # Qwen3: over each head's last axis
            q = rms_norm(q, layer["q_norm"], self.eps)
            k = rms_norm(k, layer["k_norm"], self.eps)
        q = self.rope(q, positions, self.inv_freq)
        k = self.rope(k, positions, self.inv_freq)
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


# ---------------------------------------------------------------------------
# the same computation from a GGUF file or a llama2.c checkpoint
# ---------------------------------------------------------------------------

# HF name (within a layer) -> GGUF name, as llama.cpp's converter maps them
GGUF_LAYER_NAMES = {
    "input_layernorm.weight": "attn_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight", "self_attn.q_proj.bias": "attn_q.bias",
    "self_attn.k_proj.weight": "attn_k.weight", "self_attn.k_proj.bias": "attn_k.bias",
    "self_attn.v_proj.weight": "attn_v.weight", "self_attn.v_proj.bias": "attn_v.bias",
    "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.q_norm.weight": "attn_q_norm.weight", "self_attn.k_norm.weight": "attn_k_norm.weight",
    "self_attn.qkv_proj.weight": "attn_qkv.weight", "mlp.gate_up_proj.weight": "ffn_up.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight"}
GGUF_NAMES = {"model.embed_tokens.weight": "token_embd.weight",
              "model.norm.weight": "output_norm.weight", "lm_head.weight": "output.weight"}


def gguf_name(hf_name):
    if hf_name.startswith("model.layers."):
        _, _, layer, rest = hf_name.split(".", 3)
        return f"blk.{layer}.{GGUF_LAYER_NAMES[rest]}"
    return GGUF_NAMES[hf_name]


def _checked(name, t, shape):
    if tuple(t.shape) != tuple(shape):
        raise ValueError(f"tensor {name} has shape {list(t.shape)}, expected {list(shape)}")
    return np.asarray(t, dtype=np.float32)


def from_gguf(path):
    """A Model of a GGUF "llama", "qwen2", "qwen3" or "phi3" file, as llama.cpp runs it:
    weights dequantized (F32/F16/BF16/Q8_0/Q4_0), "llama" rotating adjacent
    pairs of its interleaved Q/K rows and "qwen2" rotating halves, each
    frequency divided by rope_freqs.weight when the file has one. The
    file is read with tools/llm_io.py's GGUF reader."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
    import llm_io
    g = llm_io.GgufReader(path)
    md = g.metadata
    arch = md.get("general.architecture")
    if arch not in ("llama", "qwen2", "qwen3", "phi3"):
        raise ValueError(f"general.architecture {arch!r} is unsupported")

    def key(name, default=None):
        return md.get(f"{arch}.{name}", default)
    heads = key("attention.head_count")
    dim = key("embedding_length")
    head_dim = key("attention.key_length") or dim // heads
    if key("rope.dimension_count", head_dim) != head_dim:
        raise ValueError(f"{arch}.rope.dimension_count: partial rotation is unsupported")
    classes = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM",
               "qwen3": "Qwen3ForCausalLM", "phi3": "Phi3ForCausalLM"}
    cfg = {"architectures": [classes[arch]],
           "hidden_size": dim, "intermediate_size": key("feed_forward_length"),
           "num_hidden_layers": key("block_count"), "num_attention_heads": heads,
           "num_key_value_heads": key("attention.head_count_kv", heads), "head_dim": head_dim,
           "rms_norm_eps": key("attention.layer_norm_rms_epsilon"),
           "rope_theta": key("rope.freq_base", 10000.0),
           "vocab_size": g.tensors["token_embd.weight"][0][0]}
    if key("rope.scaling.type") == "linear":
        cfg["rope_scaling"] = {"rope_type": "linear", "factor": key("rope.scaling.factor")}
    m = Model.__new__(Model)
    m.path = str(path)
    m._configure(cfg)
    if "rope_freqs.weight" in g.tensors:
        m.inv_freq = m.inv_freq / g.tensor("rope_freqs.weight").astype(F64)
    if arch == "llama":
        m.rope = apply_rope_pairs

    def get(name, shape):
        gname = gguf_name(name)
        if gname not in g.tensors:
            raise ValueError(f"tensor {gname} is missing")
        return _checked(gname, g.tensor(gname), shape)
    m._load(get, "output.weight" not in g.tensors)
    return m


def from_llama2c(path):
    """A Model of a llama2.c checkpoint as run.c runs it: adjacent-pair
    RoPE, eps 1e-5, theta 10000, read with tools/llm_io.py."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
    import llm_io
    c, w = llm_io.read_llama2c(path)
    cfg = {"architectures": ["LlamaForCausalLM"], "hidden_size": c["dim"],
           "intermediate_size": c["hidden_dim"], "num_hidden_layers": c["n_layers"],
           "num_attention_heads": c["n_heads"], "num_key_value_heads": c["n_kv_heads"],
           "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "vocab_size": c["vocab_size"]}
    fields = {"input_layernorm.weight": "rms_att", "post_attention_layernorm.weight": "rms_ffn",
              "self_attn.q_proj.weight": "wq", "self_attn.k_proj.weight": "wk",
              "self_attn.v_proj.weight": "wv", "self_attn.o_proj.weight": "wo",
              "mlp.gate_proj.weight": "w1", "mlp.up_proj.weight": "w3",
              "mlp.down_proj.weight": "w2"}
    m = Model.__new__(Model)
    m.path = str(path)
    m._configure(cfg)
    m.rope = apply_rope_pairs

    def get(name, shape):
        if name.startswith("model.layers."):
            _, _, layer, rest = name.split(".", 3)
            return _checked(name, w[fields[rest]][int(layer)], shape)
        field = {"model.embed_tokens.weight": "token_embedding",
                 "model.norm.weight": "rms_final", "lm_head.weight": "wcls"}[name]
        return _checked(name, w[field], shape)
    m._load(get, c["shared_classifier"])
    return m


def main(argv=None):
    import argparse
    p = argparse.ArgumentParser(description="Greedy tokens or logits from the numpy "
                                "reference (an HF directory, a .gguf or a llama2.c .bin).")
    p.add_argument("model")
    p.add_argument("--ids", default="1", help="prompt token ids, comma-separated")
    p.add_argument("-n", type=int, default=20, help="tokens to generate (0: print logits)")
    args = p.parse_args(argv)
    if os.path.isdir(args.model):
        m = Model(args.model)
    elif args.model.endswith(".gguf"):
        m = from_gguf(args.model)
    else:
        m = from_llama2c(args.model)
    ids = [int(t) for t in args.ids.split(",")]
    if args.n:
        print(" ".join(map(str, m.generate(ids, args.n))))
    else:
        np.savetxt(sys.stdout, m.logits(ids), fmt="%.9g")


if __name__ == "__main__":
    main()
