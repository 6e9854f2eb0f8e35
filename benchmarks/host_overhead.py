"""Host overhead per step, evaluation features/s and inversion iterations/s: privreid against plain torch loops.

Three measurements, each privreid's own code path against the loop a user
writes for the same work, run side by side (interleaved blocks after a
warm-up, medians), so that the ratios survive a loaded machine (issue 42):

``train``      privreid's local update (:class:`~privreid.federated.client.SupervisedUpdate`, what the engine
               calls for one client's local epochs: its ``DataLoader`` of the client's decoded ``uint8`` images,
               the batch moved to the device and augmented there, forward, loss, backward, optimiser step, its
               bookkeeping and logging) against a raw loop (the same ``uint8`` images kept on the device, random
               batches, the same augmentation on the device, same model, loss and optimiser), on a model so small
               that arithmetic is negligible: a one-layer trunk (the mean of every 8th pixel, a linear map to the 512
               features a ResNet-18 trunk gives) under privreid's neck and classifier.  A third
               loop runs only forward, loss, backward and the optimiser step on one fixed batch; the **host
               overhead** of a loop is its time per step minus that compute time: data, augmentation launches,
               bookkeeping, logging.  Reported: privreid / raw overhead (target <= 1.1) and time per step.
``eval``       features per second of a test set at ``--size`` (256x128 by default): privreid's
               :func:`~privreid.evaluation.model_eval.dataset_features` (its loader of the files, decoded once
               and cached, the evaluation transform, flip averaging) against ``model(x)`` and its flip on the same
               images already preprocessed and on the device.  ``--eval-arch`` (``resnet18`` by default: a
               ResNet-50 is too slow for a CPU run; ``resnet50`` on a GPU).
``inversion``  iterations per second of Inverting Gradients (``privreid invert``'s default attack: cosine
               gradient matching over every parameter, TV 0.2, signed Adam, step schedule, box constraint, best
               iterate kept) through :func:`privreid.inversion.attack.reconstruct` against a plain loop doing the
               same work on the same model and image: the client's gradient observed, the same objective and
               optimiser, the last iterate's objective evaluated (best of); ``--inv-size`` (64x32 on the CPU: the
               double backward of a ResNet-18 at 256x128 takes seconds per iteration there).

    OMP_NUM_THREADS=1 python benchmarks/host_overhead.py                          (CPU, all three)
    python benchmarks/host_overhead.py --device cuda --eval-arch resnet50 --inv-size 256x128 --json out.json
    python benchmarks/host_overhead.py --only train --steps 20 --repeats 5
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn

# Run from a checkout without installing privreid.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from privreid.config import DataConfig, OptimConfig, RunConfig, RuntimeConfig  # noqa: E402
from privreid.data import ImageDataset, build_transforms  # noqa: E402
from privreid.data.catalog import federation_for_config  # noqa: E402
from privreid.data.torch_dataset import DECODED  # noqa: E402
from privreid.data.transforms import tensor_pipeline  # noqa: E402
from privreid.evaluation.model_eval import dataset_features  # noqa: E402
from privreid.federated import fast_optim  # noqa: E402
from privreid.federated.client import ClientContext, SupervisedUpdate  # noqa: E402
from privreid.inversion.attack import reconstruct  # noqa: E402
from privreid.inversion.optimise import total_variation, to_pixels, to_space  # noqa: E402
from privreid.inversion.settings import STEP_MILESTONES, InversionSettings  # noqa: E402
from privreid.inversion.observation import to_model_input  # noqa: E402
from privreid.losses import identity_loss  # noqa: E402
from privreid.models import build_model  # noqa: E402
from privreid.precision import to_device  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from precision import device_name  # noqa: E402


class TinyTrunk(nn.Module):
    """A trunk with next to no arithmetic: the mean of every 8th pixel's channels, a linear map to 512 features.

    (A strided 1x1 convolution is no cheaper in effect and takes 200 ms per step on a CPU.)"""

    out_dim = 512

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(3, self.out_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x[..., ::8, ::8].mean((2, 3)))


def timed(block, device: torch.device) -> float:
    """Seconds per unit of work of one call of ``block`` (it returns its count of units).

    On the CPU the seconds are the process's CPU time: the loops run in this one thread (``OMP_NUM_THREADS=1``),
    and CPU time does not count the moments another process holds the core, which wall time on a shared machine
    does (it moved the train ratio between 0.84 and 1.23 from run to run).  On CUDA, wall time: the device's work
    is finished inside the timing."""
    clock = time.process_time if device.type == "cpu" else time.perf_counter
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = clock()
    units = block()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return (clock() - start) / units


def side_by_side(blocks: dict, device: torch.device, repeats: int) -> dict[str, float]:
    """Median seconds per unit of each block: one warm-up call each, then ``repeats`` interleaved rounds."""
    for block in blocks.values():
        block()
    times: dict[str, list[float]] = {name: [] for name in blocks}
    for _ in range(repeats):
        for name, block in blocks.items():
            times[name].append(timed(block, device))
    return {name: statistics.median(ts) for name, ts in times.items()}


def train(args, device: torch.device) -> dict:
    data = DataConfig(height=args.height, width=args.width)
    client = federation_for_config(RunConfig(data=data, runtime=RuntimeConfig(device="cpu"))).clients[0]
    steps_per_epoch = min(args.steps, len(client.train) // args.batch)  # epochs of the client's data, to --steps
    epochs = -(-args.steps // steps_per_epoch)
    steps = steps_per_epoch * epochs
    config = RunConfig(data=data, optim=OptimConfig(batch_size=args.batch, max_steps_per_epoch=steps_per_epoch,
                                                    local_epochs=epochs, lr_backbone=0.05, lr_head=0.05),
                                  runtime=RuntimeConfig(device=str(device), seed=0, num_workers=0))
    pipeline = tensor_pipeline(build_transforms(args.height, args.width, train=True))
    images = torch.stack([DECODED.get(path, pipeline) for path, _, _ in client.train]).to(device)
    labels = torch.tensor([pid for _, pid, _ in client.train], device=device)
    torch.manual_seed(0)
    base = build_model("resnet18", num_classes=client.num_classes, feat_dim=16)
    base.backbone = TinyTrunk()
    update = SupervisedUpdate(config)
    privreid_model = copy.deepcopy(base).to(device)
    seeds = iter(range(10**6))

    def privreid_block() -> int:
        ctx = ClientContext(model=privreid_model, client=client, round=0, config=config, device=device,
                            global_state={}, seed=next(seeds))
        return int(update(ctx)["steps"])

    hyper = dict(momentum=config.optim.momentum, weight_decay=config.optim.weight_decay, nesterov=True)
    model = copy.deepcopy(base).to(device).train()
    opt = torch.optim.SGD(model.parameters(), lr=config.optim.lr_backbone, **hyper,
                          **fast_optim.implementation("sgd", device.type, **hyper))
    criterion = identity_loss(config.optim.label_smoothing)
    generator = torch.Generator(device=images.device).manual_seed(0)

    def step(batch, target) -> torch.Tensor:
        loss = criterion(model.forward_train(batch)[2], target)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.detach()

    def raw_block() -> int:
        total = torch.zeros((), device=device)
        for _ in range(steps):
            idx = torch.randint(len(images), (args.batch,), generator=generator, device=images.device)
            total += step(to_device(images[idx], device, pipeline, channels_last=config.runtime.channels_last), labels[idx])
        float(total)  # the loss read once, as privreid reads it
        return steps

    fixed = to_device(images[:args.batch], device, pipeline, channels_last=config.runtime.channels_last)

    def compute_block() -> int:
        for _ in range(steps):
            step(fixed, labels[:args.batch])
        return steps

    s = side_by_side({"privreid": privreid_block, "raw": raw_block, "compute": compute_block}, device, args.repeats)
    overhead = {name: s[name] - s["compute"] for name in ("privreid", "raw")}
    return {"model": "tiny trunk (pixel mean, linear 3->512) + neck 16 + classifier", "steps": steps,
            "size": f"{args.height}x{args.width}", "batch": args.batch,
            "ms_per_step": {k: 1e3 * v for k, v in s.items()},
            "overhead_ms_per_step": {k: 1e3 * v for k, v in overhead.items()},
            "overhead_privreid_vs_raw": overhead["privreid"] / overhead["raw"],
            "step_privreid_vs_raw": s["privreid"] / s["raw"]}


def evaluation(args, device: torch.device) -> dict:
    config = RunConfig(data=DataConfig(height=args.height, width=args.width), runtime=RuntimeConfig(device="cpu"))
    federation = federation_for_config(config)
    samples = [s for c in federation.clients for s in c.train][:args.eval_images]
    transform = build_transforms(args.height, args.width, train=False)
    dataset = ImageDataset(samples, transform)
    torch.manual_seed(0)
    model = build_model(args.eval_arch, feat_dim=512).to(device).eval()
    if device.type == "cuda":
        model = model.to(memory_format=torch.channels_last)
    pipeline = tensor_pipeline(transform)
    images = pipeline(torch.stack([DECODED.get(path, pipeline) for path, _, _ in samples])).to(device)

    def privreid_block() -> int:
        feats, _, _ = dataset_features(model, dataset, batch_size=args.eval_batch, device=device, flip=True)
        return len(feats)

    def raw_block() -> int:
        out = []
        with torch.no_grad():
            for x in images.split(args.eval_batch):
                out.append((model(x) + model(x.flip(-1))) / 2)
        return len(torch.cat(out).cpu())

    s = side_by_side({"privreid": privreid_block, "raw": raw_block}, device, args.repeats)
    return {"arch": args.eval_arch, "size": f"{args.height}x{args.width}", "images": len(samples), "flip": True,
            "batch": args.eval_batch, "features_per_s": {k: 1 / v for k, v in s.items()},
            "privreid_vs_raw": s["raw"] / s["privreid"]}


def inversion(args, device: torch.device) -> dict:
    h, w = args.inv_height, args.inv_width
    torch.manual_seed(0)
    model = build_model("resnet18", num_classes=4, feat_dim=32).to(device).eval()
    shared = {n for n, _ in model.named_parameters() if not n.startswith("classifier.")}
    subject = torch.rand(3, h, w, generator=torch.Generator().manual_seed(1)).to(device)
    settings = InversionSettings(attack="ig", iterations=args.inv_iterations)
    loss_fn = identity_loss(0.0)
    params = [p for _, p in model.named_parameters()]
    label = torch.tensor([2], device=device)

    def privreid_block() -> int:
        reconstruct(model, subject, 2, threat="full", shared=shared, settings=settings, seed=0)
        return settings.iterations

    low, high = to_space(torch.zeros(1, 3, 1, 1, device=device), "normalised"), \
        to_space(torch.ones(1, 3, 1, 1, device=device), "normalised")
    generator = torch.Generator().manual_seed(0)

    def raw_block() -> int:
        # the same work as privreid: the client's gradient observed, the iterations, the last iterate's objective
        observed = [g.detach() for g in torch.autograd.grad(
            loss_fn(model.forward_train(to_model_input(subject[None]))[2], label), params)]
        onorm = torch.sqrt(sum((o ** 2).sum() for o in observed))

        def objective(z):
            loss = loss_fn(model.forward_train(to_model_input(to_pixels(z, "normalised")))[2], label)
            dummy = torch.autograd.grad(loss, params, create_graph=True)
            dot = sum((d * o).sum() for d, o in zip(dummy, observed))
            dnorm = torch.sqrt(sum((d ** 2).sum() for d in dummy))
            return 1 - dot / (dnorm * onorm + 1e-12) + settings.tv_weight * total_variation(z)

        z = torch.randn(1, 3, h, w, generator=generator).to(device).requires_grad_(True)
        opt = torch.optim.Adam([z], lr=settings.lr)
        schedule = torch.optim.lr_scheduler.MultiStepLR(
            opt, [int(f * settings.iterations) for f in STEP_MILESTONES], gamma=0.1)
        best_value, best = torch.tensor(float("inf"), device=device), z.detach()
        for _ in range(settings.iterations):
            value = objective(z)
            (grad,) = torch.autograd.grad(value, [z])
            better = value.detach() < best_value
            best_value, best = torch.where(better, value.detach(), best_value), torch.where(better, z.detach(), best)
            z.grad = grad.sign()
            opt.step()
            schedule.step()
            with torch.no_grad():
                z.copy_(torch.maximum(torch.minimum(z, high), low))
        value = objective(z).detach()
        float(torch.minimum(value, best_value)), F.relu(best).sum()
        return settings.iterations

    s = side_by_side({"privreid": privreid_block, "raw": raw_block}, device, args.repeats)
    return {"attack": "ig (full threat, every parameter)", "model": "resnet18", "size": f"{h}x{w}",
            "iterations": settings.iterations, "iterations_per_s": {k: 1 / v for k, v in s.items()},
            "privreid_vs_raw": s["raw"] / s["privreid"]}


def _size(ap, text: str, flag: str) -> tuple[int, int]:
    try:
        h, w = (int(v) for v in text.lower().split("x"))
    except ValueError:
        ap.error(f"{flag}: {text!r} is not HEIGHTxWIDTH")
    return h, w


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--only", choices=("train", "eval", "inversion"), action="append",
                    help="run only this measurement (repeatable; default: all three)")
    ap.add_argument("--size", default="256x128", help="HEIGHTxWIDTH of the training and evaluation images")
    ap.add_argument("--batch", type=int, default=32, help="training batch")
    ap.add_argument("--steps", type=int, default=20, help="training steps per timed block")
    ap.add_argument("--repeats", type=int, default=5, help="interleaved timed blocks per approach")
    ap.add_argument("--eval-arch", default="resnet18")
    ap.add_argument("--eval-batch", type=int, default=64)
    ap.add_argument("--eval-images", type=int, default=128)
    ap.add_argument("--inv-size", default="64x32", help="HEIGHTxWIDTH of the inverted image")
    ap.add_argument("--inv-iterations", type=int, default=10, help="inversion iterations per timed block")
    ap.add_argument("--json", default=None, help="write the results here")
    args = ap.parse_args(argv)
    args.height, args.width = _size(ap, args.size, "--size")
    args.inv_height, args.inv_width = _size(ap, args.inv_size, "--inv-size")
    device = torch.device(args.device)
    only = args.only or ["train", "eval", "inversion"]
    result = {"device": device_name(device), "torch": torch.__version__, "threads": torch.get_num_threads()}
    print(f"{result['device']}, torch {torch.__version__}, {result['threads']} thread(s); medians of "
          f"{args.repeats} interleaved blocks")
    if "train" in only:
        r = result["train"] = train(args, device)
        ms, over = r["ms_per_step"], r["overhead_ms_per_step"]
        print(f"train {args.size} batch {args.batch}, {r['model']}: ms/step privreid {ms['privreid']:.2f}, raw "
              f"{ms['raw']:.2f}, compute only {ms['compute']:.2f}; host overhead ms/step privreid "
              f"{over['privreid']:.2f} / raw {over['raw']:.2f} = {r['overhead_privreid_vs_raw']:.3f} "
              f"(target <= 1.1); whole step {r['step_privreid_vs_raw']:.3f}")
    if "eval" in only:
        r = result["eval"] = evaluation(args, device)
        f = r["features_per_s"]
        print(f"eval {r['arch']} {r['size']} batch {r['batch']}, flip, {r['images']} images: features/s privreid "
              f"{f['privreid']:.1f} / raw {f['raw']:.1f} = {r['privreid_vs_raw']:.3f}")
    if "inversion" in only:
        r = result["inversion"] = inversion(args, device)
        i = r["iterations_per_s"]
        print(f"inversion {r['attack']}, {r['model']} {r['size']}: iterations/s privreid {i['privreid']:.2f} / raw "
              f"{i['raw']:.2f} = {r['privreid_vs_raw']:.3f}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(result, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
