"""Local training throughput at fp32 / bf16 / fp16: privreid's client update against a raw torch loop.

One client of the embedded synthetic federation, a ResNet from scratch,
identity cross-entropy, SGD, at each ``--precisions`` value (issue 29 §3):

``privreid``  :class:`privreid.federated.client.SupervisedUpdate` with
              ``--precision`` set: its ``DataLoader`` of the client's files
              (decoded once and kept as ``uint8``, as after a run's first
              epoch), the ``uint8`` batch moved to the device and augmented
              there (flip, pad + crop, conversion, normalisation, erasing), the
              forward pass and loss under autocast, the backward through the
              loss scaler (fp16), the optimiser step;
``raw``       the loop a user writes on the same decoded ``uint8`` images kept
              on the device: random batches, the same augmentation on the
              device, the same autocast and scaler, the same optimiser
              implementation.

On CUDA both take channels-last batches and run under cuDNN's autotuner
unless ``--no-channels-last`` / ``--no-cudnn-benchmark`` (privreid's
``runtime.channels_last`` / ``runtime.cudnn_benchmark``) turn one off:
``benchmarks/gpu_check.sh`` measures each with and without.  ``--compile``:
privreid with ``runtime.compile`` (its trunk and identity loss compiled,
:mod:`privreid.models.compilation`), the raw loop with its forward and loss
compiled as one function, as a user would write it; each row then gives the
seconds each spent compiling (in the warm-up block, outside the timing);
``--compile-backend aot_eager`` (``gpu_check.sh --cpu-smoke``) traces and
differentiates the graphs without inductor's code generation, which takes
minutes on a CPU: the plumbing, not the speed.

The two are interleaved (one block of each, repeated) after a warm-up block,
and the median time per step is reported with the ratio privreid / raw
images/s, each precision's speed-up over fp32 and, on CUDA, the peak GPU
memory allocated while it ran (both approaches' models and batches).  On the CPU the default
precisions are fp32 and, where the processor computes bf16 natively
(AVX512-BF16 or AMX; :func:`privreid.precision.cpu_bf16_native`), bf16:
elsewhere CPU bf16 is emulated and slower than fp32, and it is skipped with a
line saying so (``--precisions`` forces it).

    OMP_NUM_THREADS=1 python benchmarks/precision.py
    python benchmarks/precision.py --device cuda --arch resnet50 --size 256x128 --batch 32 --precisions fp32,bf16,fp16
    python benchmarks/precision.py --device cuda --arch resnet50 --size 256x128 --no-channels-last
"""

from __future__ import annotations

import argparse
import copy
import functools
import json
import os
import platform
import statistics
import sys
import time

import torch

# Run from a checkout without installing privreid.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from privreid.config import PRECISIONS, DataConfig, ModelConfig, OptimConfig, RunConfig, RuntimeConfig  # noqa: E402
from privreid.data import build_transforms  # noqa: E402
from privreid.data.catalog import federation_for_config  # noqa: E402
from privreid.data.torch_dataset import DECODED  # noqa: E402
from privreid.data.transforms import TensorPipeline, tensor_pipeline  # noqa: E402
from privreid.federated import fast_optim  # noqa: E402
from privreid.federated.client import ClientContext, SupervisedUpdate  # noqa: E402
from privreid.models.compilation import CompileClock  # noqa: E402
from privreid.losses import identity_loss  # noqa: E402
from privreid.models import build_model  # noqa: E402
from privreid.precision import autocast, cpu_bf16_native, cuda_speedups, grad_scaler, to_device  # noqa: E402


def default_precisions(device: torch.device) -> tuple[list[str], str | None]:
    """The precisions measured by default on ``device``, and why one is left out (or None)."""
    if device.type == "cuda":
        return list(PRECISIONS), None
    if cpu_bf16_native():
        return ["fp32", "bf16"], "fp16 skipped on the CPU (no native fp16 arithmetic; --precisions forces it)"
    return ["fp32"], "bf16 skipped: this CPU has no native bf16 (AVX512-BF16 / AMX); it would be emulated"


def blocks(precision: str, client, base: torch.nn.Module, images: torch.Tensor, labels: torch.Tensor,
           augment: TensorPipeline, device: torch.device, args) -> dict:
    """``{"privreid": block, "raw": block}`` at ``precision``; each call runs ``args.steps`` optimiser steps.

    ``images`` are the client's decoded ``uint8`` images on ``device``, which the raw loop augments there.
    """
    config = RunConfig(data=DataConfig(height=args.height, width=args.width), model=ModelConfig(arch=args.arch),
                       optim=OptimConfig(batch_size=args.batch, max_steps_per_epoch=args.steps, lr_backbone=args.lr,
                                         lr_head=args.lr),
                       runtime=RuntimeConfig(device=str(device), seed=0, precision=precision,
                                             num_workers=args.workers, channels_last=args.channels_last,
                                             cudnn_benchmark=args.cudnn_benchmark, compile=args.compile))
    update = SupervisedUpdate(config)
    privreid_model = copy.deepcopy(base).to(device)
    rounds = iter(range(10**6))

    def privreid_block() -> int:
        ctx = ClientContext(model=privreid_model, client=client, round=0, config=config, device=device,
                            global_state={}, seed=next(rounds))
        return int(update(ctx)["steps"])

    hyper = dict(momentum=config.optim.momentum, weight_decay=config.optim.weight_decay, nesterov=True)
    model = copy.deepcopy(base).to(device).train()
    opt = torch.optim.SGD(model.parameters(), lr=config.optim.lr_backbone, **hyper,
                          **fast_optim.implementation("sgd", device.type, **hyper))
    scaler = grad_scaler(precision, device)
    criterion = identity_loss(config.optim.label_smoothing)
    generator = torch.Generator(device=images.device).manual_seed(0)

    def loss_of(batch: torch.Tensor, batch_labels: torch.Tensor) -> torch.Tensor:
        return criterion(model.forward_train(batch)[2], batch_labels)

    if args.compile:
        loss_of = torch.compile(loss_of)

    def raw_block() -> int:
        for _ in range(args.steps):
            idx = torch.randint(len(images), (args.batch,), generator=generator, device=images.device)
            batch = to_device(images[idx], device, augment, channels_last=args.channels_last)
            with autocast(precision, device):
                loss = loss_of(batch, labels[idx])
            opt.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        return args.steps

    return {"privreid": privreid_block, "raw": raw_block}


def timed(block, device: torch.device) -> float:
    """Seconds per optimiser step of one call of ``block`` (CUDA work finished inside the timing)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    steps = block()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return (time.perf_counter() - start) / steps


def measure(args) -> dict:
    device = torch.device(args.device)
    precisions, skipped = (args.precisions, None) if args.precisions else default_precisions(device)
    config = RunConfig(data=DataConfig(height=args.height, width=args.width), runtime=RuntimeConfig(device="cpu"))
    client = federation_for_config(config).clients[0]
    pipeline = tensor_pipeline(build_transforms(args.height, args.width, train=True))
    # decoded as after the first epoch of a run; the raw loop keeps the same uint8 images on the device
    images = torch.stack([DECODED.get(path, pipeline) for path, _, _ in client.train]).to(device)
    labels = torch.tensor([pid for _, pid, _ in client.train], device=device)
    torch.manual_seed(0)
    base = build_model(arch=args.arch, num_classes=client.num_classes)
    rows = {}
    with cuda_speedups(device, args.cudnn_benchmark):
        for precision in precisions:
            approaches = blocks(precision, client, base, images, labels, pipeline, device, args)
            if device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(device)
            compile_seconds = {}
            for name, block in approaches.items():  # warm-up: allocator, cuDNN's algorithm search, compiling
                with CompileClock() as clock:
                    block()
                compile_seconds[name] = clock.seconds
            per_step: dict[str, list[float]] = {name: [] for name in approaches}
            for _ in range(args.repeats):
                for name, block in approaches.items():
                    per_step[name].append(timed(block, device))
            median = {name: statistics.median(ts) for name, ts in per_step.items()}
            rows[precision] = {name: {"s_per_step": m, "images_per_s": args.batch / m} for name, m in median.items()}
            rows[precision]["privreid_vs_raw"] = median["raw"] / median["privreid"]
            rows[precision]["compile_seconds"] = compile_seconds if args.compile else None
            rows[precision]["peak_memory_mib"] = (torch.cuda.max_memory_allocated(device) / 2**20
                                                  if device.type == "cuda" else None)
    for precision, row in rows.items():
        for name in ("privreid", "raw"):
            row[name]["vs_fp32"] = (row[name]["images_per_s"] / rows["fp32"][name]["images_per_s"]
                                    if "fp32" in rows else None)
    return {"device": device_name(device), "size": f"{args.height}x{args.width}", "arch": args.arch,
            "batch": args.batch, "channels_last": args.channels_last, "cudnn_benchmark": args.cudnn_benchmark,
            "compile": args.compile, "threads": torch.get_num_threads(), "skipped": skipped, "precisions": rows}


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"CPU ({platform.processor() or platform.machine()}, {torch.backends.cpu.get_cpu_capability()})"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--arch", default="resnet18")
    ap.add_argument("--size", default="64x32", help="HEIGHTxWIDTH")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=0.05, help="learning rate of every group (gpu_check.sh scales it)")
    ap.add_argument("--steps", type=int, default=4, help="optimiser steps per timed block")
    ap.add_argument("--repeats", type=int, default=3, help="interleaved blocks per approach")
    ap.add_argument("--workers", type=int, default=0, help="privreid's data-loading workers")
    ap.add_argument("--no-channels-last", dest="channels_last", action="store_false",
                    help="CUDA: NCHW batches (runtime.channels_last=false)")
    ap.add_argument("--no-cudnn-benchmark", dest="cudnn_benchmark", action="store_false",
                    help="CUDA: without cuDNN's autotuner (runtime.cudnn_benchmark=false)")
    ap.add_argument("--compile", action="store_true", help="both approaches compiled (runtime.compile for privreid)")
    ap.add_argument("--compile-backend", default="inductor", help="torch.compile's backend (aot_eager: the smoke)")
    ap.add_argument("--precisions", default=None, help=f"comma list of {', '.join(PRECISIONS)} (default: per device)")
    ap.add_argument("--json", default=None, help="write the results here")
    args = ap.parse_args(argv)
    try:
        args.height, args.width = (int(v) for v in args.size.lower().split("x"))
    except ValueError:
        ap.error(f"--size: {args.size!r} is not HEIGHTxWIDTH")
    if args.precisions:
        args.precisions = [p.strip() for p in args.precisions.split(",") if p.strip()]
        if unknown := [p for p in args.precisions if p not in PRECISIONS]:
            ap.error(f"unknown precisions {unknown}; choose from {', '.join(PRECISIONS)}")
    if args.compile_backend != "inductor":  # every torch.compile of the run, privreid's Module.compile included
        torch.compile = functools.partial(torch.compile, backend=args.compile_backend)
    result = measure(args)
    print(f"{result['device']}: {args.arch} {result['size']}, batch {args.batch}, median of {args.repeats} blocks "
          f"of {args.steps} steps, {result['threads']} torch thread(s)")
    if result["skipped"]:
        print(result["skipped"])
    print(f"{'precision':9s} {'privreid img/s':>14s} {'raw img/s':>10s} {'privreid/raw':>12s} {'vs fp32':>8s}")
    for precision, row in result["precisions"].items():
        gain = row["privreid"]["vs_fp32"]
        print(f"{precision:9s} {row['privreid']['images_per_s']:14.1f} {row['raw']['images_per_s']:10.1f} "
              f"{row['privreid_vs_raw']:12.3f} {'-' if gain is None else f'{gain:.2f}x':>8s}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"torch": torch.__version__, **result}, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
