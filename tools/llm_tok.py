# SPDX-License-Identifier: MIT
"""Tokenizer files for tools/llm_convert.py: HF tokenizer.json (and its
tokenizer_config.json) written from a SentencePiece-style vocabulary, and
the tokenizer.ggml.* arrays of a GGUF derived from a tokenizer.json.

SentencePiece-style BPE (Llama 2, TinyLlama, Mistral)
    `spm_tokenizer_files(pieces, scores, ...)` writes what HF's
    LlamaConverter writes for a SentencePiece BPE model: a BPE model with
    byte_fallback and fuse_unk, the "legacy" normalizer (Prepend "▁", then
    Replace " " by "▁"), no pre-tokenizer, a TemplateProcessing that adds
    BOS, and the decoder Replace/ByteFallback/Fuse/Strip. `spm_merges`
    derives the ranked merges from the pieces' scores as LlamaConverter
    does (transformers' generate_merges before it added length
    tie-breaks): every split of a piece into two pieces of the vocabulary
    is a merge; a piece's splits are ordered by the ids of their halves;
    all merges are then stably sorted by the piece's score, highest first.
    On the real Llama 2 tokenizer.json this reproduces all 58,980 merges
    in order (tests/interop/test_llm_tools.py checks it).

GGUF tokenizer metadata (`gguf_tokenizer`)
    * SentencePiece-style files (BPE with byte_fallback) become model
      "llama": tokens in id order, token types (1 normal, 2 unknown,
      3 control, 4 user-defined, 6 byte) and scores. A tokenizer.json has
      no scores, so they are derived: SentencePiece numbers its normal
      pieces by falling score and scores the n-th one -n, so when the
      merges are exactly what those scores imply (`spm_merges`), those are
      the scores (this reproduces the original scores of a vocabulary
      converted from SentencePiece, such as stories260K's). Otherwise each
      piece scores minus the rank of the first merge that makes it, which
      makes llama.cpp's score-driven merging follow the same merge order.
      Special and byte pieces score 0.
    * Byte-level files become model "gpt2": tokens (the vocab, then added
      tokens; ids the files leave out are "[PAD<id>]", type 5 unused, up to
      the config's vocab_size), types, merges as "a b" strings, and
      tokenizer.ggml.pre named after the pre-tokenizer's regex.
"""

import json
import os
import re

import numpy as np

NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
SPACE = "\u2581"
BYTE_RE = re.compile(r"<0x[0-9A-Fa-f]{2}>")


# ---------------------------------------------------------------------------
# SentencePiece-style tokenizer.json
# ---------------------------------------------------------------------------

def spm_merges(pieces, scores):
    """Ranked merges (left, right) implied by a SentencePiece vocabulary
    (`pieces` in id order, one score each)."""
    vocab = {p: i for i, p in enumerate(pieces)}
    merges = []
    for piece, score in zip(pieces, scores):
        local = [(piece[:k], piece[k:]) for k in range(1, len(piece))
                 if piece[:k] in vocab and piece[k:] in vocab]
        local.sort(key=lambda m: (vocab[m[0]], vocab[m[1]]))
        merges.extend((score, m) for m in local)
    merges.sort(key=lambda e: -e[0])          # stable: ties keep their order
    return [m for _, m in merges]


def _added(i, content, special=True):
    return {"id": i, "content": content, "single_word": False, "lstrip": False,
            "rstrip": False, "normalized": False, "special": special}


def spm_tokenizer_json(pieces, scores, unk_id=0, bos_id=1, eos_id=2):
    """tokenizer.json (a dict) for a SentencePiece-style BPE vocabulary.
    Pieces use "▁" for spaces and "<0xNN>" for the byte pieces."""
    bos, unk = pieces[bos_id], pieces[unk_id]
    specials = sorted({unk_id, bos_id, eos_id})
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [_added(i, pieces[i]) for i in specials],
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": SPACE},
            {"type": "Replace", "pattern": {"String": " "}, "content": SPACE}]},
        "pre_tokenizer": None,
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": bos, "type_id": 0}},
                       {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": bos, "type_id": 0}},
                     {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": bos, "type_id": 1}},
                     {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {bos: {"id": bos, "ids": [bos_id], "tokens": [bos]}}},
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": SPACE}, "content": " "},
            {"type": "ByteFallback"},
            {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
        "model": {
            "type": "BPE", "dropout": None, "unk_token": unk,
            "continuing_subword_prefix": None, "end_of_word_suffix": None,
            "fuse_unk": True, "byte_fallback": True,
            "vocab": {p: i for i, p in enumerate(pieces)},
            "merges": [f"{a} {b}" for a, b in spm_merges(pieces, scores)]},
    }


def spm_tokenizer_config(pieces, unk_id=0, bos_id=1, eos_id=2, max_length=None):
    """tokenizer_config.json (a dict) to go with `spm_tokenizer_json`."""
    decoder = {str(i): {k: v for k, v in _added(i, pieces[i]).items() if k != "id"}
               for i in sorted({unk_id, bos_id, eos_id})}
    cfg = {"add_bos_token": True, "add_eos_token": False,
           "added_tokens_decoder": decoder,
           "bos_token": pieces[bos_id], "eos_token": pieces[eos_id],
           "unk_token": pieces[unk_id], "pad_token": None,
           "clean_up_tokenization_spaces": False, "legacy": True,
           "tokenizer_class": "LlamaTokenizerFast"}
    if max_length:
        cfg["model_max_length"] = int(max_length)
    return cfg


def llama2c_pieces(tokens):
    """llama2.c tokenizer entries [(bytes, score)] -> (pieces, scores) as
    SentencePiece had them: llama2.c's exporter wrote "▁" as a space and
    BOS/EOS as "\\n<s>\\n" / "\\n</s>\\n"; ids 0/1/2 are unk/BOS/EOS."""
    pieces, scores = [], []
    for i, (raw, score) in enumerate(tokens):
        text = raw.decode("utf-8")
        if i == 1:
            text = "<s>"
        elif i == 2:
            text = "</s>"
        elif not BYTE_RE.fullmatch(text):
            text = text.replace(" ", SPACE)
        pieces.append(text)
        scores.append(0.0 if i < 3 else float(score))
    if len(set(pieces)) != len(pieces):
        raise ValueError("the vocabulary repeats a piece")
    return pieces, scores


# A few sentences to learn the synthetic vocabulary's first merges from, so
# that ordinary English text exercises the merging.
_CORPUS = """Once upon a time there was a small robot that lived in a quiet town.
Every morning the robot walked to the market and counted the apples, the
bread and the fish. The people of the town liked the robot, because it was
kind and it never forgot a name. One day a storm came over the hills and the
river rose. The robot carried the children and their parents to the old
stone bridge, and then it went back for the cats and the dogs. When the sun
came out again, the town had a party for the robot. They sang songs, they
danced in the street, and they gave it a new coat of paint. The robot said:
thank you, my friends, I will always be here to help you. And it was."""


def _learn_merges(limit):
    """Up to `limit` pieces merged BPE-style from _CORPUS: the most frequent
    adjacent pair first (ties broken by the pair's text), while a pair
    occurs at least twice."""
    words = {}
    for w in _CORPUS.split():
        key = tuple(SPACE + w)
        words[key] = words.get(key, 0) + 1
    made = []
    while len(made) < limit:
        counts = {}
        for syms, n in words.items():
            for pair in zip(syms, syms[1:]):
                counts[pair] = counts.get(pair, 0) + n
        best = min(counts.items(), key=lambda kv: (-kv[1], kv[0]), default=None)
        if best is None or best[1] < 2:
            break
        (a, b), piece = best[0], best[0][0] + best[0][1]
        made.append(piece)
        merged = {}
        for syms, n in words.items():
            out, k = [], 0
            while k < len(syms):
                if k + 1 < len(syms) and syms[k] == a and syms[k + 1] == b:
                    out.append(piece)
                    k += 2
                else:
                    out.append(syms[k])
                    k += 1
            merged[tuple(out)] = merged.get(tuple(out), 0) + n
        words = merged
    return made


def synthetic_spm(vocab_size, seed=0):
    """A small SentencePiece-style vocabulary of `vocab_size` pieces:
    unk/BOS/EOS, the 256 byte pieces, merged pieces (first those learned
    from a few English sentences, then random merges of earlier pieces, in
    the order they were made, scored -0, -1, ...), then the single
    characters they are built from (scored lowest, as SentencePiece does)."""
    chars = [SPACE] + [chr(c) for c in range(ord("a"), ord("z") + 1)] + \
        [chr(c) for c in range(ord("A"), ord("Z") + 1)] + list("0123456789.,!?'\"-:;()")
    n_merged = vocab_size - 3 - 256 - len(chars)
    if n_merged < 0:
        raise ValueError(f"a synthetic tokenizer needs --vocab >= {vocab_size - n_merged}")
    rng = np.random.default_rng(seed)
    letters = [SPACE] + chars[1:27]
    made = _learn_merges(n_merged)
    seen = set(chars) | set(made)
    def pick():                             # a letter or an earlier piece
        k = int(rng.integers(len(letters) + len(made)))
        return letters[k] if k < len(letters) else made[k - len(letters)]
    while len(made) < n_merged:
        a = pick()
        b = pick() if rng.random() < 0.5 else letters[1 + int(rng.integers(26))]
        piece = a + b
        if len(piece) > 12 or piece in seen or SPACE in piece[1:]:
            continue
        seen.add(piece)
        made.append(piece)
    pieces = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + made + chars
    scores = [0.0] * 259 + [-float(i) for i in range(len(made) + len(chars))]
    return pieces, scores


def write_spm_files(outdir, pieces, scores, max_length=None):
    """tokenizer.json and tokenizer_config.json for a SentencePiece-style
    vocabulary (unk/BOS/EOS at ids 0/1/2)."""
    write_json(os.path.join(outdir, "tokenizer.json"), spm_tokenizer_json(pieces, scores))
    write_json(os.path.join(outdir, "tokenizer_config.json"),
               spm_tokenizer_config(pieces, max_length=max_length))


def write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, ensure_ascii=False)
        f.write("\n")


# ---------------------------------------------------------------------------
# tokenizer.json -> GGUF metadata
# ---------------------------------------------------------------------------

# pre-tokenizer regex -> llama.cpp's tokenizer.ggml.pre name
_PRE_NAMES = {
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+"
    r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+": "llama-bpe",
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+"
    r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+": "qwen2",
    r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+": "gpt-2",
}


def _merge_pairs(merges):
    return [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in merges]


def _is_spm(tok):
    model = tok.get("model", {})
    return model.get("type") == "BPE" and bool(model.get("byte_fallback"))


def _regexes(pre):
    if not pre:
        return []
    if pre.get("type") == "Sequence":
        return [r for p in pre.get("pretokenizers", []) for r in _regexes(p)]
    if pre.get("type") == "Split":
        return [pre.get("pattern", {}).get("Regex")]
    if pre.get("type") == "ByteLevel" and pre.get("use_regex", True):
        return [next(k for k, v in _PRE_NAMES.items() if v == "gpt-2")]
    return []


def spm_scores(pieces, types, merges):
    """Scores for a SentencePiece-style vocabulary known only by its pieces
    and merges (see the module docstring)."""
    normal = [i for i, t in enumerate(types) if t in (NORMAL, USER_DEFINED)]
    scores = [0.0] * len(pieces)
    first = normal[0] if normal else 0
    for i in normal:
        scores[i] = -float(i - first)
    if spm_merges(pieces, scores) == merges:
        return scores
    rank = {}
    for r, (a, b) in enumerate(merges):
        rank.setdefault(a + b, r)
    last = len(merges)
    for i in normal:
        scores[i] = -float(rank.get(pieces[i], last + i))
    return scores


def gguf_tokenizer(tok, tok_config=None, vocab_size=None):
    """GGUF tokenizer metadata for a tokenizer.json `tok` (a dict):
    a dict with model, pre, tokens, token_type, and scores (llama) or
    merges (gpt2), plus the ids of the added tokens named by
    `tok_config` (tokenizer_config.json) and its add_bos/add_eos flags."""
    tok_config = tok_config or {}
    model = tok.get("model", {})
    if model.get("type") != "BPE":
        raise ValueError(f"tokenizer.json model.type {model.get('type')!r}: only BPE")
    vocab = dict(model["vocab"])
    added = {a["id"]: a for a in tok.get("added_tokens", [])}
    for i, a in added.items():
        vocab.setdefault(a["content"], i)
    n = max(vocab.values()) + 1
    if vocab_size is not None:
        if vocab_size < n:
            raise ValueError(f"vocab_size {vocab_size} < the tokenizer's {n} ids")
        n = vocab_size
    tokens, types = [None] * n, [UNUSED] * n
    for piece, i in vocab.items():
        tokens[i] = piece
    spm = _is_spm(tok)
    for i in range(n):
        if tokens[i] is None:
            tokens[i] = f"[PAD{i}]"
        elif i in added:
            types[i] = CONTROL if added[i].get("special") else USER_DEFINED
            if spm and tokens[i] == model.get("unk_token"):
                types[i] = UNKNOWN
        elif spm and BYTE_RE.fullmatch(tokens[i]):
            types[i] = BYTE
        else:
            types[i] = NORMAL
    merges = _merge_pairs(model.get("merges", []))
    out = {"tokens": tokens, "token_type": types}
    if spm:
        out.update(model="llama", pre="default", scores=spm_scores(tokens, types, merges))
    else:
        regexes = [r for r in _regexes(tok.get("pre_tokenizer")) if r]
        names = {_PRE_NAMES.get(r) for r in regexes}
        if len(regexes) != 1 or None in names:
            raise ValueError(f"tokenizer.json pre_tokenizer {regexes!r}: no llama.cpp "
                             "pre-tokenizer name known for it")
        out.update(model="gpt2", pre=names.pop(), merges=[f"{a} {b}" for a, b in merges])
    ids = {p: i for i, p in enumerate(tokens)}
    for key in ("bos", "eos", "unk", "pad"):
        name = tok_config.get(f"{key}_token")
        if isinstance(name, dict):
            name = name.get("content")
        if name is not None and name in ids:
            out[f"{key}_id"] = ids[name]
    if spm and "unk_id" not in out and model.get("unk_token") in ids:
        out["unk_id"] = ids[model["unk_token"]]
    for key in ("add_bos_token", "add_eos_token"):
        if key in tok_config:
            out[key] = bool(tok_config[key])
    return out
