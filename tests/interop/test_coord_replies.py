# SPDX-License-Identifier: MIT
"""The graph coordinator reads a stage's RESULT for what the stage's
description promised: exactly its outputs, each once. A stage (or
whatever sits on the way to it) that adds a tensor named as another
stage's output, or the model's, would otherwise have that tensor taken
for the real one and written to --output with exit 0.
"""

import json
import os
import socket
import struct
import subprocess
import threading

import pytest

import mumodel
import stagefix
from conftest import HOST
from stagefix import CLOSE, HDR, ask_info, recv_exact

ENV = dict(os.environ)
RESULT = 3


def f32_tensor(name, dims):
    n = 1
    for d in dims:
        n *= d
    return (struct.pack("<I", len(name)) + name.encode() + struct.pack("<I", len(dims)) +
            b"".join(struct.pack("<Q", d) for d in dims) + struct.pack("<Q", n) +
            b"\0" * (4 * n))


class Forger:
    """Between the coordinator and a stage: each RESULT gets one more
    tensor, `extra`."""

    def __init__(self, stage_addr, extra):
        self.target, self.extra = stage_addr, extra
        self.srv = socket.create_server((HOST, 0))
        self.address = f"{HOST}:{self.srv.getsockname()[1]}"
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        try:
            client, _ = self.srv.accept()
        except OSError:
            return
        host, port = self.target.rsplit(":", 1)
        with client, socket.create_connection((host, int(port)), timeout=30) as stage:
            try:
                while True:
                    head = recv_exact(client, HDR.size)
                    stage.sendall(head + recv_exact(client, HDR.unpack(head)[7]))
                    if HDR.unpack(head)[2] == CLOSE:
                        return
                    h = list(HDR.unpack(recv_exact(stage, HDR.size)))
                    body = recv_exact(stage, h[7])
                    if h[2] == RESULT:
                        count, = struct.unpack_from("<I", body)
                        body = struct.pack("<I", count + 1) + body[4:] + self.extra
                        h[7] = len(body)
                    client.sendall(HDR.pack(*h) + body)
            except (EOFError, OSError):
                return

    def close(self):
        self.srv.close()


@pytest.fixture
def stages(muster_bin, tmp_path):
    start = stagefix.stage_factory(muster_bin, tmp_path, ENV)
    yield start
    start.teardown()


def test_result_with_a_tensor_of_another_stage(muster_bin, tmp_path, stages):
    model = mumodel.write_mlp(tmp_path / "mlp", widths=(8, 16, 4), batch=2, seed=5,
                              activations=["relu", "none"])
    group = stages(model.path, 2)
    info = json.loads(ask_info(group[1].address))
    out = info["model_outputs"][0]
    forger = Forger(group[0].address, f32_tensor(out, [2, 4]))
    src = tmp_path / "in.safetensors"
    mumodel.write_safetensors(src, model.inputs(seed=1))
    proc = subprocess.run([str(muster_bin), "run", "--model", str(model.path), "--input",
                           str(src), "--output", str(tmp_path / "out.safetensors"),
                           "--stages", f"{forger.address},{group[1].address}"],
                          capture_output=True, text=True, timeout=60, env=ENV)
    forger.close()
    assert proc.returncode != 0, "a forged tensor was taken for the model's output"
    assert f"returned {out} (F32), which is not one of its outputs" in proc.stderr, proc.stderr
    assert "stage 0/2" in proc.stderr
