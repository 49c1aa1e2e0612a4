# SPDX-License-Identifier: MIT
"""Models as people write them in torch, for the tests and the benchmark:
a GPT-2-style causal decoder, a BERT-style encoder with an attention mask,
and torchvision's resnet18, mobilenet_v2 and squeezenet1_1, each with
seeded random weights, exported by torch.onnx.export at opset 14 (Debian's
torch 1.13 and torchvision 0.14).

    spec = MODELS["gpt2"]
    model, feeds = spec.build(seed=0)           # a torch module in eval mode
    export(model, feeds, spec, path)            # model.onnx
    logits = reference(model, feeds)            # torch's own output (numpy)

`feeds` maps input names to numpy arrays (int64 ids and masks, float32
images). Only torch, torchvision and numpy are used.
"""

import math
import warnings
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

OPSET = 14


class CausalSelfAttention(torch.nn.Module):
    """GPT-2's attention: one fused qkv projection, heads by view and
    transpose, scores masked to the past with -inf and masked_fill (which
    exports as Where on the computed scores). The mask is torch.tril of
    ones made in forward (mask="tril", a Trilu) or a registered buffer
    sliced to the length (mask="buffer", as nanoGPT and HF's GPT-2 do)."""

    def __init__(self, d, heads, ctx, mask):
        super().__init__()
        self.heads, self.mask = heads, mask
        self.qkv, self.proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        if mask == "buffer":
            self.register_buffer("bias", torch.tril(torch.ones(ctx, ctx)).view(1, 1, ctx, ctx))

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        if self.mask == "tril":
            keep = torch.tril(torch.ones(T, T, dtype=torch.bool))
            att = att.masked_fill(~keep, float("-inf"))
        else:
            att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        y = F.softmax(att, dim=-1) @ v
        return self.proj(y.transpose(1, 2).contiguous().view(B, T, C))


def new_gelu(x):
    """GPT-2's tanh approximation, written out as its code does."""
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class GPTBlock(torch.nn.Module):
    def __init__(self, d, heads, ctx, mask):
        super().__init__()
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.attn = CausalSelfAttention(d, heads, ctx, mask)
        self.fc, self.out = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.out(new_gelu(self.fc(self.ln2(x))))


class GPT(torch.nn.Module):
    """Token and position embeddings, pre-norm blocks, a final LayerNorm and
    a head tied to the token embedding."""

    def __init__(self, vocab=96, ctx=32, d=64, heads=4, layers=2, mask="buffer"):
        super().__init__()
        self.wte, self.wpe = torch.nn.Embedding(vocab, d), torch.nn.Embedding(ctx, d)
        self.blocks = torch.nn.ModuleList(GPTBlock(d, heads, ctx, mask) for _ in range(layers))
        self.ln_f = torch.nn.LayerNorm(d)

    def forward(self, input_ids):
        T = input_ids.shape[1]
        pos = torch.arange(0, T, dtype=torch.long).unsqueeze(0)
        x = self.wte(input_ids) + self.wpe(pos)
        for block in self.blocks:
            x = block(x)
        return self.ln_f(x) @ self.wte.weight.t()


class BertLayer(torch.nn.Module):
    def __init__(self, d, heads, ff):
        super().__init__()
        self.heads = heads
        self.q, self.k, self.v = (torch.nn.Linear(d, d) for _ in range(3))
        self.o, self.ln1 = torch.nn.Linear(d, d), torch.nn.LayerNorm(d, eps=1e-12)
        self.up, self.down = torch.nn.Linear(d, ff), torch.nn.Linear(ff, d)
        self.ln2 = torch.nn.LayerNorm(d, eps=1e-12)

    def split(self, t):
        B, T, C = t.shape
        return t.view(B, T, self.heads, C // self.heads).permute(0, 2, 1, 3)

    def forward(self, x, ext_mask):
        B, T, C = x.shape
        q, k, v = self.split(self.q(x)), self.split(self.k(x)), self.split(self.v(x))
        scores = q @ k.transpose(-1, -2) / math.sqrt(C // self.heads) + ext_mask
        ctx = (F.softmax(scores, dim=-1) @ v).permute(0, 2, 1, 3).reshape(B, T, C)
        x = self.ln1(x + self.o(ctx))
        return self.ln2(x + self.down(F.gelu(self.up(x))))


class Bert(torch.nn.Module):
    """Word, position and token-type embeddings; post-norm layers whose
    scores get the attention mask as HF's BERT builds it (unsqueezed, cast
    to float, (1 - mask) times float32's lowest); a tanh pooler on the
    first token and a classifier."""

    def __init__(self, vocab=96, ctx=32, d=64, heads=4, layers=2, types=2, classes=3):
        super().__init__()
        self.word, self.pos = torch.nn.Embedding(vocab, d), torch.nn.Embedding(ctx, d)
        self.token_type = torch.nn.Embedding(types, d)
        self.ln = torch.nn.LayerNorm(d, eps=1e-12)
        self.layers = torch.nn.ModuleList(BertLayer(d, heads, 4 * d) for _ in range(layers))
        self.pool, self.cls = torch.nn.Linear(d, d), torch.nn.Linear(d, classes)

    def forward(self, input_ids, token_type_ids, attention_mask):
        T = input_ids.shape[1]
        pos = torch.arange(T, dtype=torch.long).unsqueeze(0)
        x = self.ln(self.word(input_ids) + self.pos(pos) + self.token_type(token_type_ids))
        ext = attention_mask[:, None, None, :].to(dtype=torch.float32)
        ext = (1.0 - ext) * torch.finfo(torch.float32).min
        for layer in self.layers:
            x = layer(x, ext)
        return self.cls(torch.tanh(self.pool(x[:, 0])))


class Padded(torch.nn.Module):
    """Token ids whose 0s are padding: the padding mask (BOOL) is computed
    at the start and applied at the end, and the ids themselves (I64) are
    read again at the end, with a stack of layers in between, so a split
    carries integer and boolean tensors between stages."""

    def __init__(self, vocab=32, d=48, layers=4):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, d)
        self.layers = torch.nn.ModuleList(torch.nn.Linear(d, d) for _ in range(layers))

    def forward(self, input_ids):
        pad = input_ids == 0
        x = self.emb(input_ids)
        for layer in self.layers:
            x = F.gelu(layer(x))
        x = x.masked_fill(pad[..., None], 0.0)
        return x.sum(-1) + input_ids.to(torch.float32)


def build_padded(seed, batch=2, seq=12):
    torch.manual_seed(seed)
    ids = _ids(np.random.default_rng(seed), (batch, seq), 32)
    ids[:, -3:] = 0
    return Padded().eval(), {"input_ids": ids}


class Recurrent(torch.nn.Module):
    """A two-layer bidirectional batch-first LSTM, then a GRU and an RNN
    (tanh) over its output, then a linear head on the last step: torch
    exports ONNX LSTM, GRU and RNN nodes, which the converter unrolls."""

    def __init__(self, d=8, h=12):
        super().__init__()
        self.lstm = torch.nn.LSTM(d, h, num_layers=2, bidirectional=True, batch_first=True)
        self.gru = torch.nn.GRU(2 * h, h, batch_first=True)
        self.rnn = torch.nn.RNN(h, h, batch_first=True)
        self.head = torch.nn.Linear(h, 4)

    def forward(self, x):
        y, _ = self.lstm(x)
        y, _ = self.gru(y)
        y, _ = self.rnn(y)
        return self.head(y[:, -1])


def build_recurrent(seed, batch=2, seq=6):
    torch.manual_seed(seed)
    x = np.random.default_rng(seed).standard_normal((batch, seq, 8)).astype(np.float32)
    return Recurrent().eval(), {"x": x}


def _ids(rng, shape, vocab):
    return rng.integers(0, vocab, shape).astype(np.int64)


@dataclass
class Spec:
    """A model: how to build it, its input names, and its output name."""
    name: str
    build: object           # seed -> (module, feeds)
    inputs: tuple
    output: str = "logits"


def build_gpt(seed, mask="buffer", batch=2, seq=16):
    torch.manual_seed(seed)
    model = GPT(mask=mask).eval()
    return model, {"input_ids": _ids(np.random.default_rng(seed), (batch, seq), 96)}


def build_bert(seed, batch=2, seq=16):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    mask = np.ones((batch, seq), np.int64)
    mask[1, seq - 5:] = 0                 # the second sequence is padded
    types = np.zeros((batch, seq), np.int64)
    types[:, seq // 2:] = 1
    return Bert().eval(), {"input_ids": _ids(rng, (batch, seq), 96), "token_type_ids": types,
                           "attention_mask": mask}


def build_vision(arch, seed, size=224, batch=1):
    import torchvision
    torch.manual_seed(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = getattr(torchvision.models, arch)(weights=None).eval()
    image = np.random.default_rng(seed).standard_normal((batch, 3, size, size)).astype(np.float32)
    return model, {"image": image}


MODELS = {
    "gpt2": Spec("gpt2", build_gpt, ("input_ids",)),
    "gpt2_tril": Spec("gpt2_tril", lambda s, **kw: build_gpt(s, mask="tril", **kw), ("input_ids",)),
    "bert": Spec("bert", build_bert, ("input_ids", "token_type_ids", "attention_mask")),
    "padded": Spec("padded", build_padded, ("input_ids",)),
    "recurrent": Spec("recurrent", build_recurrent, ("x",)),
    "resnet18": Spec("resnet18", lambda s, **kw: build_vision("resnet18", s, **kw), ("image",)),
    "mobilenet_v2": Spec("mobilenet_v2", lambda s, **kw: build_vision("mobilenet_v2", s, **kw),
                         ("image",)),
    "squeezenet1_1": Spec("squeezenet1_1",
                          lambda s, **kw: build_vision("squeezenet1_1", s, **kw), ("image",)),
}


def export(model, feeds, spec, path):
    """torch.onnx.export at OPSET with fixed shapes, inputs and the output
    named as the spec says."""
    args = tuple(torch.from_numpy(feeds[n]) for n in spec.inputs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, args, str(path), opset_version=OPSET,
                          input_names=list(spec.inputs), output_names=[spec.output])


def reference(model, feeds, spec):
    """torch's own forward on the same inputs, as numpy."""
    with torch.no_grad():
        return model(*(torch.from_numpy(feeds[n]) for n in spec.inputs)).numpy()


def rel_err(got, want):
    """max |got - want| over max |want|: the error relative to the logits'
    scale (an elementwise ratio would blow up at logits near 0)."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-30))
