# SPDX-License-Identifier: MIT
"""The Python binding's LLM (python/muster/llm.py over include/muster/llm.h),
against what `muster generate` and `muster tokenize` give:

* stories260K's known greedy story from muster.LLM(...).generate('',
  max_tokens=200, temperature=0), from the GGUF and the llama2.c
  checkpoint, whole and as a stream of pieces;
* sampling with a seed gives the tokens the command gives with that seed;
* tokenize is what `muster tokenize` gives, and detokenize undoes it;
* over 2 `muster stage` servers, the same story;
* several requests at once on one handle each get what they get alone,
  and a stream closed early cancels only its own request;
* refusals raise MusterError with the library's reason.
"""

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import stagefix

REPO = Path(__file__).resolve().parents[2]
STORIES = REPO / "models" / "stories260K"
GGUF = STORIES / "stories260K.gguf"
L2C = STORIES / "stories260K.bin"
EXPECTED = (STORIES / "expected_t0_200.txt").read_text(encoding="utf-8")
ENV = dict(os.environ)

sys.path.insert(0, str(REPO / "python"))
import muster  # noqa: E402


@pytest.fixture(scope="module")
def gguf():
    with muster.LLM(GGUF, threads=1) as llm:
        yield llm


@pytest.mark.parametrize("path", [GGUF, L2C], ids=["gguf", "llama2.c"])
def test_the_known_story(path):
    llm = muster.LLM(str(path))
    try:
        assert llm.generate('', max_tokens=200, temperature=0) == EXPECTED
        assert llm.last_stats["new_tokens"] == 200 and llm.last_stats["stop"] == "length"
        pieces = list(llm.generate('', max_tokens=200, temperature=0, stream=True))
        assert len(pieces) > 100, "the stream came in one piece"
        assert "".join(pieces) == EXPECTED
        assert llm.info["stages"] == 1 and llm.info["vocab"] == 512
        assert llm.info["where"].startswith("this process")
    finally:
        llm.close()


def test_sampling_follows_the_seed_as_the_command_does(muster_bin, gguf):
    proc = subprocess.run([str(muster_bin), "generate", "--model", str(GGUF), "--temperature",
                           "1.0", "--top-p", "0.9", "--top-k", "40", "--seed", "7",
                           "--max-tokens", "60", "--json"], capture_output=True, timeout=60,
                          env=ENV)
    assert proc.returncode == 0, proc.stderr
    want = json.loads(proc.stdout)["text"]
    got = gguf.generate('', max_tokens=60, temperature=1.0, top_p=0.9, top_k=40, seed=7)
    assert got == want
    again = "".join(gguf.generate('', max_tokens=60, temperature=1.0, top_p=0.9, top_k=40,
                                  seed=7, stream=True))
    assert again == want
    other = gguf.generate('', max_tokens=60, temperature=1.0, top_p=0.9, top_k=40, seed=8)
    assert other != want


TEXTS = ["Once upon a time, there was a little dog named Max.",
         "Lily and Tom went to the park. They saw a big red ball!",
         "  two spaces, then\nnew lines\n\nand \"quotes\""]


def test_tokenize_matches_the_command_and_round_trips(muster_bin):
    with muster.LLM(L2C, threads=1) as llm:
        for text in TEXTS:
            ids = llm.tokenize(text)
            proc = subprocess.run([str(muster_bin), "tokenize", "--llama2c",
                                   str(STORIES / "tok512.bin"), "--vocab", "512", "--text", text],
                                  capture_output=True, text=True, timeout=30)
            assert proc.returncode == 0, proc.stderr
            assert ids == [int(x) for x in proc.stdout.split()]
            assert ids[0] == 1  # BOS, as generate feeds it
            assert llm.detokenize(ids) == text
            assert llm.tokenize(text, bos=False) == ids[1:]


def test_prompt_and_ids_continue_alike(gguf):
    """A prompt's text continues as generate's own tokenization of it."""
    prompt = "Lily and her mom went to the park. They saw"
    text = gguf.generate(prompt, max_tokens=40, temperature=0)
    ids = gguf.tokenize(prompt + text)
    assert gguf.detokenize(ids).startswith(prompt)
    assert len(text) > 20


def test_over_two_stages(muster_bin, tmp_path):
    start = stagefix.stage_factory(muster_bin, tmp_path, ENV)
    try:
        group = start(GGUF, 2, "--threads", 1)
        llm = muster.LLM(GGUF, stages=[s.address for s in group])
        try:
            assert llm.info["stages"] == 2 and llm.info["where"] == "2 stages"
            assert llm.generate('', max_tokens=200, temperature=0) == EXPECTED
            assert "".join(llm.generate('', max_tokens=200, temperature=0,
                                        stream=True)) == EXPECTED
        finally:
            llm.close()
    finally:
        start.teardown()


def test_requests_at_once_get_what_they_get_alone(gguf):
    prompts = ["Once upon a time", "The dog", "Lily and Tom", "A big red"]
    alone = [gguf.generate(p, max_tokens=30, temperature=0.8, seed=3) for p in prompts]
    with muster.LLM(GGUF, threads=1, max_sequences=3) as llm:
        got = [None] * len(prompts)

        def run(i):
            got[i] = llm.generate(prompts[i], max_tokens=30, temperature=0.8, seed=3)

        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(prompts))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert got == alone
        # a stream closed early ends its request only; the handle goes on
        stream = llm.generate('', max_tokens=200, temperature=0, stream=True)
        first = next(stream)
        stream.close()
        assert first and EXPECTED.startswith(first)
        assert llm.generate('', max_tokens=200, temperature=0) == EXPECTED


def test_refusals_raise_with_the_reason(gguf, tmp_path):
    with pytest.raises(muster.MusterError) as info:
        gguf.generate("word " * 3000, max_tokens=2)
    assert "the prompt is" in str(info.value) and "the context is 2048" in str(info.value)
    with pytest.raises(muster.MusterError) as info:
        muster.LLM(tmp_path / "nothing.gguf")
    assert "cannot open the model" in str(info.value)
    with pytest.raises(muster.MusterError) as info:
        gguf.generate("x", top_p=0)
    assert "top_p" in str(info.value)
    with pytest.raises(muster.MusterError) as info:
        list(gguf.generate("x" * 30000, max_tokens=1, stream=True))
    assert "the prompt is" in str(info.value)
