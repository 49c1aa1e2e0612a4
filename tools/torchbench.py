#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""torch's side of `muster bench pipeline --only resnet18`.

usage: torchbench.py export DIR [--size S] [--seed N]
       torchbench.py time DIR [--threads T] [--forwards N]

`export` builds torchvision's resnet18 with seeded random weights (the
same every time for a seed), exports it at opset 14 to DIR/resnet18.onnx,
converts it with tools/onnx2muster.py into DIR (model.json,
model.safetensors) and writes the image it is timed on to
DIR/input.safetensors, with DIR/bench.json saying how it was made.

`time` rebuilds the same model and times torch's own forward on that
image with T threads (torch.set_num_threads), best of N after a warm-up,
and prints one line:

    torch forwards/s 12.34 (threads 1, best of 8)

which `muster bench pipeline` reads. Needs python3-torch and
python3-torchvision.
"""

import argparse
import json
import os
import struct
import sys
import time
import warnings

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def build(seed, size):
    import torchvision
    torch.manual_seed(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = torchvision.models.resnet18(weights=None).eval()
    image = np.random.default_rng(seed).standard_normal((1, 3, size, size)).astype(np.float32)
    return model, image


def write_input(path, name, a):
    raw = np.ascontiguousarray(a, "<f4").tobytes()
    head = json.dumps({name: {"dtype": "F32", "shape": list(a.shape),
                              "data_offsets": [0, len(raw)]}}).encode()
    head += b" " * (-len(head) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(head)) + head + raw)


def export(outdir, seed, size):
    import onnx2muster
    os.makedirs(outdir, exist_ok=True)
    model, image = build(seed, size)
    src = os.path.join(outdir, "resnet18.onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (torch.from_numpy(image),), src, opset_version=14,
                          input_names=["image"], output_names=["logits"])
    onnx2muster.convert(src, outdir)
    write_input(os.path.join(outdir, "input.safetensors"), "image", image)
    with open(os.path.join(outdir, "bench.json"), "w") as f:
        json.dump({"model": "resnet18", "seed": seed, "size": size}, f)


def time_torch(outdir, threads, forwards):
    with open(os.path.join(outdir, "bench.json")) as f:
        made = json.load(f)
    torch.set_num_threads(threads)
    model, image = build(made["seed"], made["size"])
    x = torch.from_numpy(image)
    best = float("inf")
    with torch.no_grad():
        model(x)                                # warm-up
        for _ in range(forwards):
            t0 = time.perf_counter()
            model(x)
            best = min(best, time.perf_counter() - t0)
    print(f"torch forwards/s {1.0 / best:.3f} (threads {threads}, best of {forwards})",
          flush=True)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("export")
    e.add_argument("dir")
    e.add_argument("--size", type=int, default=224)
    e.add_argument("--seed", type=int, default=0)
    t = sub.add_parser("time")
    t.add_argument("dir")
    t.add_argument("--threads", type=int, default=1)
    t.add_argument("--forwards", type=int, default=8)
    args = p.parse_args(argv)
    if args.cmd == "export":
        export(args.dir, args.seed, args.size)
    else:
        time_torch(args.dir, args.threads, args.forwards)
    return 0


if __name__ == "__main__":
    sys.exit(main())
