"""Local training throughput: privreid's client update against a raw torch loop on pre-loaded tensors.

One client of the embedded synthetic federation (the ``make demo`` data,
128x64 JPEGs), ResNet-18 from scratch, identity cross-entropy with label
smoothing 0.1, SGD (momentum 0.9, Nesterov, weight decay 5e-4), batch 32, at
each ``--sizes`` resolution.  Approaches, each timed over the same number of
optimiser steps:

``privreid``   :class:`privreid.federated.client.SupervisedUpdate` as a
               FedPav round runs it: a fresh ``DataLoader`` of the client's
               files (decoded once per run and kept), the training
               augmentation (flip, pad-crop, random erasing) on every batch,
               forward, backward, optimiser step, loss bookkeeping;
``raw``        the loop a user writes on images already decoded, resized
               and normalised in memory: random batches of a float tensor,
               forward, backward, step, with the optimiser implementation
               privreid picks (:mod:`privreid.federated.fast_optim`);
``raw-default``  the same loop with torch's default SGD implementation
               (the per-tensor loop on a CPU), for reference.

privreid's decoded-image cache is filled first, as after a run's first
epoch (the steady state of a run; the first epoch decodes each image once).
The approaches are interleaved (one block of each, repeated) after a warm-up
block, and the median time per step is reported, which keeps the comparison fair on a shared machine.
The target is privreid >= 0.97x the raw loop's images/s at 64x32 and 128x64.

    OMP_NUM_THREADS=1 python benchmarks/train_throughput.py
    OMP_NUM_THREADS=1 python benchmarks/train_throughput.py --sizes 64x32 --repeats 5 --json out.json
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import statistics
import sys
import time

import torch

# Run from a checkout without installing privreid.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from privreid.config import DataConfig, ModelConfig, OptimConfig, RunConfig, RuntimeConfig  # noqa: E402
from privreid.data import build_transforms  # noqa: E402
from privreid.data.catalog import federation_for_config  # noqa: E402
from privreid.data.formats import read_image  # noqa: E402
from privreid.data.torch_dataset import DECODED  # noqa: E402
from privreid.data.transforms import tensor_pipeline  # noqa: E402
from privreid.federated import fast_optim  # noqa: E402
from privreid.federated.client import ClientContext, SupervisedUpdate  # noqa: E402
from privreid.losses import identity_loss  # noqa: E402
from privreid.models import build_model  # noqa: E402

APPROACHES = ("privreid", "raw", "raw-default")
TARGET = 0.97


def run_config(height: int, width: int, args) -> RunConfig:
    return RunConfig(data=DataConfig(height=height, width=width),
                     model=ModelConfig(arch=args.arch),
                     optim=OptimConfig(batch_size=args.batch, max_steps_per_epoch=args.steps, lr_backbone=0.05,
                                       lr_head=0.05),
                     runtime=RuntimeConfig(device="cpu", seed=0))


def approaches(height: int, width: int, args) -> dict:
    """``name -> step block``: each call runs ``args.steps`` optimiser steps."""
    config = run_config(height, width, args)
    client = federation_for_config(config).clients[0]
    torch.manual_seed(0)
    base = build_model(arch=args.arch, num_classes=client.num_classes)
    update = SupervisedUpdate(config)
    pipeline = tensor_pipeline(build_transforms(height, width, train=True))
    for path, _, _ in client.train:  # decoded as after the first epoch of a run
        DECODED.get(path, pipeline)
    privreid_model = copy.deepcopy(base)
    rounds = iter(range(10**6))

    def privreid_block() -> int:
        ctx = ClientContext(model=privreid_model, client=client, round=0, config=config, device=torch.device("cpu"),
                            global_state={}, seed=next(rounds))
        return int(update(ctx)["steps"])

    test = build_transforms(height, width, train=False)
    images = torch.stack([test(read_image(path)) for path, _, _ in client.train])
    labels = torch.tensor([pid for _, pid, _ in client.train])
    criterion = identity_loss(config.optim.label_smoothing)
    hyper = dict(momentum=config.optim.momentum, weight_decay=config.optim.weight_decay, nesterov=True)

    def raw(implementation: dict):
        model = copy.deepcopy(base).train()
        opt = torch.optim.SGD(model.parameters(), lr=config.optim.lr_backbone, **hyper, **implementation)
        generator = torch.Generator().manual_seed(0)

        def block() -> int:
            for _ in range(args.steps):
                idx = torch.randint(len(images), (args.batch,), generator=generator)
                opt.zero_grad(set_to_none=True)
                criterion(model.forward_train(images[idx])[2], labels[idx]).backward()
                opt.step()
            return args.steps

        return block

    blocks = {"privreid": privreid_block, "raw": raw(fast_optim.implementation("sgd", "cpu", **hyper)),
              "raw-default": raw({})}
    return {name: blocks[name] for name in args.approaches}


def measure(height: int, width: int, args) -> dict:
    blocks = approaches(height, width, args)
    for block in blocks.values():  # warm-up: allocator, first calls
        block()
    per_step: dict[str, list[float]] = {name: [] for name in blocks}
    for _ in range(args.repeats):
        for name, block in blocks.items():
            start = time.perf_counter()
            steps = block()
            per_step[name].append((time.perf_counter() - start) / steps)
    median = {name: statistics.median(ts) for name, ts in per_step.items()}
    rows = {name: {"s_per_step": m, "images_per_s": args.batch / m, "blocks": per_step[name]}
            for name, m in median.items()}
    out = {"size": f"{height}x{width}", "threads": torch.get_num_threads(), "approaches": rows}
    if "privreid" in median and "raw" in median:
        out["privreid_vs_raw"] = median["raw"] / median["privreid"]
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="64x32,128x64", help="comma list of HEIGHTxWIDTH")
    ap.add_argument("--arch", default="resnet18")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--steps", type=int, default=4, help="optimiser steps per timed block")
    ap.add_argument("--repeats", type=int, default=3, help="interleaved blocks per approach")
    ap.add_argument("--approaches", default=",".join(APPROACHES), help=f"subset of {','.join(APPROACHES)}")
    ap.add_argument("--json", default=None, help="write the results here")
    args = ap.parse_args(argv)
    args.approaches = [a.strip() for a in args.approaches.split(",") if a.strip()]
    if unknown := [a for a in args.approaches if a not in APPROACHES]:
        ap.error(f"unknown approaches {unknown}; choose from {', '.join(APPROACHES)}")
    sizes = []
    for size in args.sizes.split(","):
        try:
            h, w = (int(v) for v in size.lower().split("x"))
        except ValueError:
            ap.error(f"--sizes: {size!r} is not HEIGHTxWIDTH")
        sizes.append((h, w))
    threads = torch.get_num_threads()
    results = []
    print(f"ResNet ({args.arch}), batch {args.batch}, median of {args.repeats} blocks of {args.steps} steps; "
          f"{threads} torch thread(s) (OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')})")
    print(f"{'size':8s} {'approach':12s} {'s/step':>8s} {'images/s':>9s} {'threads':>8s}")
    for h, w in sizes:
        row = measure(h, w, args)
        results.append(row)
        for name, r in row["approaches"].items():
            print(f"{row['size']:8s} {name:12s} {r['s_per_step']:8.3f} {r['images_per_s']:9.1f} {threads:8d}")
        if "privreid_vs_raw" in row:
            ratio = row["privreid_vs_raw"]
            verdict = "meets" if ratio >= TARGET else "MISSES"
            print(f"{row['size']:8s} privreid / raw images/s: {ratio:.3f} at {threads} thread(s) "
                  f"({verdict} the {TARGET}x target)")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"config": {k: v for k, v in vars(args).items()}, "torch": torch.__version__,
                       "machine": platform.processor() or platform.machine(), "results": results}, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
