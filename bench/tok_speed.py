#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Tokenizer encode speed: muster's against HF's JS library
(@huggingface/tokenizers@0.2.0), in one run, on the same texts: Debian's
/usr/share/common-licenses/*, each file one text. For each of the real
tokenizers of test_tokenizer.py (Llama 2, Llama 3, Qwen 3; fetched from
npm and cached like the tests do) and for stories260K's llama2.c one
(muster only). Load time is reported apart from encode time.

    bench/tok_speed.py [REPEAT]     (each text encoded REPEAT times, default 3)

Figures are noisy on a shared machine: repeat when one matters."""

import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "interop"))
import tokfix  # noqa: E402

MUSTER = Path(__import__("os").environ.get("MUSTER_BIN", ROOT / "build" / "bin" / "muster"))
STATS = re.compile(r"loaded in ([0-9.]+) ms.*?(\d+) bytes -> (\d+) tokens in ([0-9.]+) ms", re.S)


def licenses():
    seen, texts = set(), []
    for f in sorted(Path("/usr/share/common-licenses").iterdir()):
        if f.resolve() not in seen and f.resolve().is_file():
            seen.add(f.resolve())
            texts.append(f.resolve().read_text(encoding="utf-8"))
    return texts


def muster(args, jsonl, repeat):
    proc = subprocess.run([str(MUSTER), "tokenize", "--batch", "--stats", "--repeat",
                           str(repeat), *map(str, args)], input=jsonl, capture_output=True,
                          check=True, timeout=600)
    m = STATS.search(proc.stderr.decode())
    load, nbytes, tokens, ms = float(m[1]), int(m[2]), int(m[3]), float(m[4])
    return load, nbytes / repeat, tokens / repeat, nbytes / 1e3 / ms


def js(jslib, tokdir, jsonl, repeat):
    proc = subprocess.run([tokfix.node(), str(tokfix.TOKREF), str(jslib), str(tokdir),
                           "--bench", str(repeat)], input=jsonl, capture_output=True,
                          check=True, timeout=1800)
    r = json.loads(proc.stdout)
    return r["load_ms"], r["bytes"] / 1e3 / r["encode_ms"]


def main():
    repeat = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    texts = licenses()
    jsonl = "".join(json.dumps(t) + "\n" for t in texts).encode()
    cache = tokfix.cache_dir() / "tokenizers"
    cache.mkdir(parents=True, exist_ok=True)
    jslib = tokfix.ensure_jslib(cache)
    size = sum(len(t.encode()) for t in texts)
    print(f"encode speed on {len(texts)} license files ({size // 1000} kB), "
          f"each encoded {repeat}x; load time apart")
    print(f"{'tokenizer':<22}{'tokens':>8}{'muster MB/s':>13}{'JS MB/s':>10}{'ratio':>8}"
          f"{'muster load ms':>16}{'JS load ms':>12}")
    for name in tokfix.SHA256:
        d = tokfix.ensure_tokenizer(cache, name)
        load, nbytes, tokens, speed = muster(["--tokenizer", d], jsonl, repeat)
        jload, jspeed = js(jslib, d, jsonl, max(1, repeat // 3))
        print(f"{name:<22}{tokens:>8.0f}{speed:>13.2f}{jspeed:>10.3f}{speed / jspeed:>7.0f}x"
              f"{load:>16.0f}{jload:>12.0f}")
    load, nbytes, tokens, speed = muster(
        ["--llama2c", ROOT / "models" / "stories260K" / "tok512.bin", "--vocab", 512],
        jsonl, repeat)
    print(f"{'stories260K (llama2.c)':<22}{tokens:>8.0f}{speed:>13.2f}{'-':>10}{'-':>8}"
          f"{load:>16.1f}{'-':>12}")


if __name__ == "__main__":
    with tempfile.TemporaryDirectory():
        main()
