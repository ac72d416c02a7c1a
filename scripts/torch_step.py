#!/usr/bin/env python3
"""A few training steps of two small models on the GPU, float32, with fixed seeds.

    python3 scripts/torch_step.py [--steps N]

A 2-layer MLP (cuBLAS) and then a tiny conv net (cuDNN), each trained with plain SGD on random
data made on the CPU; every step's loss is printed to 6 significant digits. The run is
deterministic on one GPU (TF32 off, deterministic algorithms), so scripts/gpu-check.sh compares
the lines of a native run with those of a run through `cuwire run`. Exit status: 0 when every
stage ran, 2 without a usable torch or GPU, 1 when a stage failed (its error on stderr).
"""

import argparse
import os
import sys
import time
import traceback

# cuBLAS is only deterministic with a fixed workspace; it must be set before CUDA starts.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")


def say(*parts):
    print(*parts, flush=True)


def batches(torch, shape, classes, steps, seed):
    gen = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        x = torch.randn(*shape, generator=gen)
        y = torch.randint(0, classes, (shape[0],), generator=gen)
        yield x, y


def train(torch, name, model, shape, classes, steps, device):
    model = model.to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    start = time.monotonic()
    for i, (x, y) in enumerate(batches(torch, shape, classes, steps, seed=1)):
        x, y = x.to(device), y.to(device)
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        say(f"{name} step {i} loss {loss.item():.6g}")
    torch.cuda.synchronize()
    total = sum(float(p.detach().double().sum().cpu()) for p in model.parameters())
    say(f"{name} parameter sum {total:.6g}")
    print(f"{name}: {steps} steps in {time.monotonic() - start:.3f} s", file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=5)
    args = ap.parse_args()
    try:
        import torch
    except ImportError as e:
        print(f"torch_step: cannot import torch: {e}", file=sys.stderr)
        return 2
    say(f"torch {torch.__version__}, CUDA {torch.version.cuda}")
    if not torch.cuda.is_available():
        print("torch_step: torch.cuda.is_available() is False", file=sys.stderr)
        return 2
    # Full float32 and one algorithm per op, so that two runs on one GPU agree bit for bit.
    # warn_only: an op without a deterministic kernel warns rather than stopping the run.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    torch.use_deterministic_algorithms(True, warn_only=True)
    device = torch.device("cuda")
    nn = torch.nn
    stages = [
        ("mlp", lambda: nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10)),
         (512, 64), 10),
        ("conv", lambda: nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.ReLU(),
                                       nn.Flatten(), nn.Linear(8 * 8 * 8, 10)),
         (64, 3, 16, 16), 10),
    ]
    failed = False
    for name, make, shape, classes in stages:
        torch.manual_seed(0)
        model = make()  # initialised on the CPU, so the seed alone decides the weights
        try:
            train(torch, name, model, shape, classes, args.steps, device)
        except Exception as e:  # report and go on with the next stage
            failed = True
            first = (str(e).strip().splitlines() or [""])[0]
            print(f"torch_step: {name} failed: {type(e).__name__}: {first}", file=sys.stderr)
            traceback.print_exc()
            sys.stderr.flush()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
