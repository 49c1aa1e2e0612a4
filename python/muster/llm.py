# SPDX-License-Identifier: MIT
"""Decoder LLMs through libmuster (include/muster/llm.h).

    import muster
    llm = muster.LLM("models/stories260K/stories260K.gguf")
    print(llm.generate("Once upon a time", max_tokens=100, temperature=0))
    for piece in llm.generate("Lily", max_tokens=50, stream=True):
        print(piece, end="", flush=True)
    ids = llm.tokenize("Hello")            # as generate feeds the model
    text = llm.detokenize(ids)

The model runs in this process (threads=), or over `muster stage` servers
(stages=["host:port", ...], in layer order): the same prompt, options and
seed give the same text either way. Several calls may run at once on one
LLM from different threads (max_sequences= of them generate together).
"""

import atexit
import codecs
import ctypes
import itertools
import queue
import secrets
import threading
import weakref

from . import _lib
from ._lib import check

_STOPS = {0: "eos", 1: "length", 2: "context", 3: "stopped"}


def _text_bytes(text):
    return text.encode("utf-8") if isinstance(text, str) else bytes(text)


def _stats(st):
    return {"prompt_tokens": st.prompt_tokens, "new_tokens": st.new_tokens,
            "decode_steps": st.decode_steps, "stop": _STOPS.get(st.stop, str(st.stop)),
            "prefill_ms": st.prefill_ms, "ttft_ms": st.ttft_ms, "decode_ms": st.decode_ms}


# One pair of C callbacks for every request: a request's ud is its key in
# _requests. The ctypes thunks live as long as the module, so none is
# freed while the library's thread is still inside it; the per-request
# state (a list of pieces, or a queue) is plain Python.
_requests = {}
_keys = itertools.count(1)
_requests_lock = threading.Lock()


def _on_token(ud, tid, text, n):
    sink = _requests.get(ud)
    if sink is not None:
        sink.put(ctypes.string_at(text, n) if n else b"")
    return 0


def _on_done(ud, rc, st, err):
    with _requests_lock:
        sink = _requests.pop(ud, None)
    if sink is not None:
        sink.put((rc, err.decode(errors="replace") if err else "", _stats(st.contents)))


_TOKEN = _lib.LLM_TOKEN_CB(_on_token)
_DONE = _lib.LLM_DONE_CB(_on_done)


def _register(sink):
    with _requests_lock:
        key = next(_keys)
        _requests[key] = sink
    return key


def _unregister(key):
    with _requests_lock:
        _requests.pop(key, None)


# Handles still open when the interpreter exits are closed before it
# finalizes: their thread calls back into Python as what runs ends, which
# it can no longer do once finalization has begun.
_live = weakref.WeakSet()


@atexit.register
def _close_all():
    for llm in list(_live):
        llm.close()


class _Pieces:
    """generate(stream=True)'s iterator: the text pieces of one request as
    the library's thread hands them over. Closing it (or dropping it)
    before the end cancels the request."""

    def __init__(self, llm, q, rid):
        self._llm, self._q, self._rid = llm, q, rid
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._ended = False

    def __iter__(self):
        return self

    def __next__(self):
        while not self._ended:
            item = self._q.get()
            if isinstance(item, tuple):
                self._ended = True
                rc, why, self._llm.last_stats = item
                tail = self._decoder.decode(b"", final=True)
                check("generation failed", rc, why)
                if tail:
                    return tail
                break
            piece = self._decoder.decode(item)
            if piece:
                return piece
        raise StopIteration

    def close(self):
        if self._ended:
            return
        self._ended = True
        if getattr(self._llm, "_h", None):
            _lib.llm_cancel(self._llm._h, self._rid)
        while not isinstance(self._q.get(), tuple):  # its end (on_done) has come
            pass

    def __del__(self):
        self.close()


class _Collect:
    """A sink that keeps the pieces in a list (generate without stream)."""

    def __init__(self, pieces):
        self.put = pieces.append


class LLM:
    """A decoder LLM (HF directory, GGUF file or llama2.c checkpoint) with
    its tokenizer, ready to generate."""

    def __init__(self, path, stages=None, threads=None, ctx=None, max_sequences=None,
                 tokenizer=None, kv_type=None):
        """kv_type: what the KV cache keeps keys and values in, "f32",
        "f16" (the default, as llama.cpp's) or "q8_0", here and on the
        stages (as `muster generate --kv-type`)."""
        opts = _lib.LlmOpts()
        _lib.llm_opts_init(opts)
        keep = []  # what opts points to, alive until mu_llm_open returns
        if kv_type is not None:
            err = ctypes.create_string_buffer(256)
            t = ctypes.c_int()
            rc = _lib.llm_kv_type_parse(str(kv_type).encode(), ctypes.byref(t), err, len(err))
            if rc != 0:
                raise ValueError(err.value.decode(errors="replace"))
            opts.kv_type = t.value
        if threads is not None:
            opts.threads = int(threads)
        if ctx is not None:
            opts.ctx = int(ctx)
        if max_sequences is not None:
            opts.max_sequences = int(max_sequences)
        if tokenizer is not None:
            keep.append(str(tokenizer).encode())
            opts.tokenizer = keep[-1]
        if stages:
            arr = (ctypes.c_char_p * len(stages))(*[str(s).encode() for s in stages])
            keep.append(arr)
            opts.stages = ctypes.cast(arr, ctypes.POINTER(ctypes.c_char_p))
            opts.nstages = len(stages)
        err = ctypes.create_string_buffer(2048)
        handle = ctypes.c_void_p()
        rc = _lib.llm_open(str(path).encode(), ctypes.byref(opts), ctypes.byref(handle), err,
                           len(err))
        check(f"cannot open the model {path}", rc, err.value.decode(errors="replace"))
        self._h = handle
        _live.add(self)
        self._tok = _lib.llm_tokenizer(handle)
        info = _lib.LlmInfo()
        _lib.llm_info(handle, ctypes.byref(info))
        self.info = {"arch": info.arch.decode(), "format": ("hf", "gguf", "llama2.c")[info.format],
                     "layers": info.layers, "dim": info.dim, "vocab": info.vocab,
                     "trained_ctx": info.trained_ctx, "ctx": info.ctx,
                     "weight_bytes": info.weight_bytes, "stages": info.stages,
                     "where": info.where.decode()}

    # ---- generating ----

    def _opts(self, max_tokens, temperature, top_k, top_p, seed):
        o = _lib.LlmGenOpts()
        _lib.llm_gen_opts_init(o)
        if max_tokens is not None:
            o.max_tokens = int(max_tokens)
        if temperature is not None:
            o.temperature = float(temperature)
        if top_k is not None:
            o.top_k = int(top_k)
        if top_p is not None:
            o.top_p = float(top_p)
        o.seed = secrets.randbits(64) if seed is None else int(seed)
        return o

    def generate(self, prompt, max_tokens=None, temperature=None, top_k=None, top_p=None,
                 seed=None, stream=False):
        """The text generated after prompt (a str, or with stream=True an
        iterator of its pieces as they come). Options left None take the
        library's defaults (256 tokens, temperature 0.8, top_k 40, top_p
        0.95); seed None draws a random one. Raises MusterError on failure
        (a prompt longer than the context, a stage that failed)."""
        self._alive()
        opts = self._opts(max_tokens, temperature, top_k, top_p, seed)
        data = _text_bytes(prompt)
        if stream:
            return self._stream(data, opts)
        pieces = []
        key = _register(_Collect(pieces))
        opts.on_token = ctypes.cast(_TOKEN, ctypes.c_void_p)
        opts.ud = key
        err = ctypes.create_string_buffer(1024)
        stats = _lib.LlmStats()
        try:
            rc = _lib.llm_generate(self._h, data, len(data), ctypes.byref(opts),
                                   ctypes.byref(stats), err, len(err))
        finally:
            _unregister(key)
        check("generation failed", rc, err.value.decode(errors="replace"))
        self.last_stats = _stats(stats)
        return b"".join(pieces).decode("utf-8", errors="replace")

    def _stream(self, data, opts):
        """Submit now (so a refusal raises here); the pieces come after."""
        q = queue.Queue()
        key = _register(q)
        opts.on_token = ctypes.cast(_TOKEN, ctypes.c_void_p)
        opts.on_done = ctypes.cast(_DONE, ctypes.c_void_p)
        opts.ud = key
        err = ctypes.create_string_buffer(1024)
        rid = ctypes.c_uint64()
        rc = _lib.llm_submit(self._h, data, len(data), ctypes.byref(opts), ctypes.byref(rid),
                             err, len(err))
        if rc != 0:
            _unregister(key)
        check("generation failed", rc, err.value.decode(errors="replace"))
        return _Pieces(self, q, rid.value)

    # ---- tokens ----

    def tokenize(self, text, bos=True, special=True):
        """The ids of text as generate feeds them to the model (BOS first
        where the tokenizer adds one; special tokens' text recognised)."""
        self._alive()
        data = _text_bytes(text)
        ids = ctypes.POINTER(ctypes.c_int32)()
        n = ctypes.c_size_t()
        flags = (1 if bos else 0) | (2 if special else 0)
        check("tokenize", _lib.tokenizer_encode(self._tok, data, len(data), flags,
                                                ctypes.byref(ids), ctypes.byref(n)))
        try:
            return [ids[i] for i in range(n.value)]
        finally:
            _lib.free(ids)

    def detokenize(self, ids, keep_special=False):
        """The text of ids (special tokens left out unless keep_special)."""
        self._alive()
        arr = (ctypes.c_int32 * len(ids))(*ids)
        text = ctypes.c_void_p()
        n = ctypes.c_size_t()
        check("detokenize", _lib.tokenizer_decode(self._tok, arr, len(ids), int(keep_special),
                                                  ctypes.byref(text), ctypes.byref(n)))
        try:
            return ctypes.string_at(text, n.value).decode("utf-8", errors="replace")
        finally:
            _lib.free(text)

    @property
    def vocab(self):
        return self.info["vocab"]

    # ---- lifetime ----

    def _alive(self):
        if not getattr(self, "_h", None):
            raise ValueError("the LLM is closed")

    def close(self):
        """End what runs (its streams raise MusterError) and free the model."""
        h, self._h = getattr(self, "_h", None), None
        if h:
            _lib.llm_free(h)

    def __del__(self):
        self.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
