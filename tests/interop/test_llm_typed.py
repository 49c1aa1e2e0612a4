# SPDX-License-Identifier: MIT
"""Typed tensors at an LLM stage, spoken raw (docs/protocols/pipeline.md,
"Typed tensors" and "Ids").

A SEQ_FORWARD or SEQ_BATCH whose `tokens`, `x` or `items` is of a dtype
the stage does not read (U8, I64, F16 ...) is answered with an ERROR that
names the tensor, the dtype it got and the one it takes, and the
connection stays; a version-1 header carrying a typed tensor is a broken
message (ERROR, the connection closes). Nothing is read past a tensor's
buffer (run under the ASan build too), and the stage keeps serving
another client afterwards.
"""

import json
import os
import socket
import struct
from pathlib import Path

import pytest

import stagefix

REPO = Path(__file__).resolve().parents[2]
MODEL = REPO / "models" / "stories260K" / "stories260K.bin"
ENV = dict(os.environ)
DIM = 64

HDR = struct.Struct("<4sHHiIQQQ")
INFO, RESULT, ERROR, READY = 1, 3, 4, 9
SEQ_OPEN, SEQ_FORWARD, SEQ_BATCH = 10, 11, 13
# code, struct letter
DT = {"F32": (0, "f"), "F16": (1, "e"), "I32": (6, "i"), "I64": (7, "q"), "U8": (8, "B"),
      "BOOL": (12, "B")}


def tensor(name, dtype, dims, values):
    code, fmt = DT[dtype]
    out = struct.pack("<I", len(name)) + name.encode()
    out += struct.pack("<I", len(dims) | code << 8) + b"".join(struct.pack("<Q", d)
                                                               for d in dims)
    return out + struct.pack("<Q", len(values)) + struct.pack(f"<{len(values)}{fmt}", *values)


def frame(*tensors):
    return struct.pack("<I", len(tensors)) + b"".join(tensors)


class Peer:
    def __init__(self, addr):
        host, port = addr.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=10)
        self.next_id = 0

    def recv_exact(self, n):
        buf = b""
        while len(buf) < n:
            part = self.sock.recv(n - len(buf))
            if not part:
                raise EOFError(f"closed after {len(buf)} of {n} bytes")
            buf += part
        return buf

    def ask(self, mtype, body=b"", aux=0, arg=0, version=1):
        self.next_id += 1
        self.sock.sendall(HDR.pack(b"MUPL", version, mtype, 0, arg, self.next_id, aux,
                                   len(body)) + body)
        _, _, rtype, status, _, rid, _, length = HDR.unpack(self.recv_exact(HDR.size))
        # a header refused as a whole is answered with id 0: its id was not read
        assert rid == self.next_id or (rtype == ERROR and rid == 0)
        return rtype, status, self.recv_exact(length)

    def closed(self):
        try:
            return self.sock.recv(1) == b""
        except OSError:
            return True

    def close(self):
        self.sock.close()


@pytest.fixture
def stages(muster_bin, tmp_path):
    start = stagefix.stage_factory(muster_bin, tmp_path, ENV)
    group = start(MODEL, 2, "--threads", 1)
    yield group
    start.teardown()


def still_serves(addr, first):
    """Another client opens a sequence and runs a position."""
    p = Peer(addr)
    rtype, _, body = p.ask(INFO)
    assert rtype == INFO and json.loads(body)["kind"] == "llm"
    assert p.ask(SEQ_OPEN, b'{"ctx": 16}', aux=3)[0] == READY
    x = tensor("tokens", "I32", [2], [1, 5]) if first else \
        tensor("x", "F32", [2, DIM], [0.01] * 2 * DIM)
    rtype, _, body = p.ask(SEQ_FORWARD, frame(x), aux=3, version=2 if first else 1)
    assert rtype == RESULT, body
    p.close()


def refused(p, mtype, body, words, aux=1, version=2):
    rtype, status, text = p.ask(mtype, body, aux=aux, version=version)
    assert rtype == ERROR, (rtype, text)
    for w in words:
        assert w.encode() in text, text
    return status, text


# U8 and I64 have other sizes than F32/I32: read as those, one runs past
# its buffer (U8) or reads halves of its values (I64)
@pytest.mark.parametrize("dtype", ["U8", "I64", "F16", "BOOL"])
def test_typed_tokens(stages, dtype):
    s0 = stages[0]
    p = Peer(s0.address)
    assert p.ask(SEQ_OPEN, b'{"ctx": 64}', aux=1)[0] == READY
    n = 40
    refused(p, SEQ_FORWARD, frame(tensor("tokens", dtype, [n], [1] * n)),
            ['"tokens" is ' + dtype, "ids are I32"])
    items = tensor("items", "I32", [1, 4], [1, 0, n, 0])
    refused(p, SEQ_BATCH, frame(items, tensor("tokens", dtype, [n], [1] * n)),
            ['"tokens" is ' + dtype, "ids are I32"], aux=0)
    refused(p, SEQ_BATCH, frame(tensor("items", dtype, [1, 4], [1, 0, 1, 0]),
                                tensor("tokens", "I32", [1], [1])),
            ['"items" is ' + dtype, "ids are I32"], aux=0)
    # the connection stays and a right one runs
    rtype, _, body = p.ask(SEQ_FORWARD, frame(tensor("tokens", "I32", [1], [1])), aux=1,
                           version=2)
    assert rtype == RESULT, body
    p.close()
    still_serves(s0.address, True)


@pytest.mark.parametrize("dtype", ["U8", "I64", "I32", "F16"])
def test_typed_x(stages, dtype):
    s1 = stages[1]
    p = Peer(s1.address)
    assert p.ask(SEQ_OPEN, b'{"ctx": 64}', aux=1)[0] == READY
    n = 3
    refused(p, SEQ_FORWARD, frame(tensor("x", dtype, [n, DIM], [1] * (n * DIM))),
            ['"x" is ' + dtype, "activations are F32"])
    items = tensor("items", "I32", [1, 4], [1, 0, n, 0])
    refused(p, SEQ_BATCH, frame(items, tensor("x", dtype, [n, DIM], [1] * (n * DIM))),
            ['"x" is ' + dtype, "activations are F32"], aux=0)
    rtype, _, body = p.ask(SEQ_FORWARD, frame(tensor("x", "F32", [1, DIM], [0.0] * DIM)), aux=1)
    assert rtype == RESULT, body
    p.close()
    still_serves(s1.address, False)


@pytest.mark.parametrize("which", ["tokens", "items", "x"])
def test_version1_typed_frame(stages, which):
    """A version-1 header promises F32 only: a typed tensor under it is a
    broken message, answered and the connection closed."""
    first = which != "x"
    addr = stages[0 if first else 1].address
    p = Peer(addr)
    assert p.ask(SEQ_OPEN, b'{"ctx": 64}', aux=1)[0] == READY
    if which == "tokens":
        mtype, body = SEQ_FORWARD, frame(tensor("tokens", "I32", [2], [1, 5]))
    elif which == "items":
        mtype, body = SEQ_BATCH, frame(tensor("items", "I32", [1, 4], [1, 0, 1, 0]),
                                       tensor("tokens", "F32", [1], [1.0]))
    else:
        mtype, body = SEQ_FORWARD, frame(tensor("x", "U8", [1, DIM], [0] * DIM))
    status, _ = refused(p, mtype, body, ["version-1 header carries only F32"], version=1)
    assert status == -1000
    assert p.closed()
    still_serves(addr, first)


def test_typed_frame_on_other_types(stages):
    """Version 2 is only for the types whose body is a frame: an INFO or
    SEQ_OPEN under it is refused and the stage keeps serving."""
    for mtype, body in ((INFO, b""), (SEQ_OPEN, b'{"ctx": 8}')):
        p = Peer(stages[0].address)
        rtype, status, text = p.ask(mtype, body, aux=1, version=2)
        assert rtype == ERROR and status == -1000, text
        assert p.closed()
        p.close()
    still_serves(stages[0].address, True)
