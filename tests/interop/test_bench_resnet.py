# SPDX-License-Identifier: MIT
"""`muster bench pipeline --only resnet18` runs at a toy size and prints
muster's and torch's forwards/s and their ratio (figures are never
asserted: speed is measured by `make bench`, not in tests), and
tools/torchbench.py's exported model is the model torch times: muster's
logits on it match torch's."""

import re
import subprocess
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import mumodel  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
TOOL = REPO / "tools" / "torchbench.py"


def test_bench_resnet18(muster_bin, tmp_path):
    d = tmp_path / "resnet18"
    subprocess.run(["/usr/bin/python3", str(TOOL), "export", str(d), "--size", "64"],
                   check=True, capture_output=True, timeout=300)
    proc = subprocess.run([str(muster_bin), "bench", "pipeline", "--only", "resnet18",
                           "--resnet18", str(d), "--torch-bench", str(TOOL),
                           "--resnet-forwards", "2"], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    rates = {k: float(v) for k, v in re.findall(r"^\s+(muster executor|torch, 1 thread)\s+"
                                                 r"([0-9.]+) forwards/s", proc.stdout, re.M)}
    assert set(rates) == {"muster executor", "torch, 1 thread"}, proc.stdout
    assert all(r > 0 for r in rates.values()), proc.stdout
    ratio = float(re.search(r"ratio muster/torch\s+([0-9.]+)", proc.stdout).group(1))
    assert abs(ratio - rates["muster executor"] / rates["torch, 1 thread"]) < 0.01 * ratio + 1e-3

    # the model torch times is the one muster ran: same logits
    out = tmp_path / "out.safetensors"
    run = subprocess.run([str(muster_bin), "run", "--model", str(d), "--input",
                          str(d / "input.safetensors"), "--output", str(out)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    code = ("import sys, json, numpy as np, torch; sys.path.insert(0, sys.argv[1]);"
            "import torchbench as tb; m = json.load(open(sys.argv[2] + '/bench.json'));"
            "model, image = tb.build(m['seed'], m['size']);"
            "np.save(sys.argv[3], model(torch.from_numpy(image)).detach().numpy())")
    ref = tmp_path / "ref.npy"
    subprocess.run(["/usr/bin/python3", "-c", code, str(TOOL.parent), str(d), str(ref)],
                   check=True, capture_output=True, timeout=300)
    got, want = mumodel.read_safetensors(out)["logits"], np.load(ref)
    assert np.abs(got - want).max() <= 1e-4 * np.abs(want).max()
