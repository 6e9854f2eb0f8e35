"""The cost of a DP-SGD step: privreid's against Opacus' per-sample-gradient modes used directly.

Same model (privreid's ReID ResNet with GroupNorm, ``norm="group"``, the
model DP-SGD trains), same batch, same loss (cross-entropy with label
smoothing 0.1 on the identity logits), one process.  Each approach times
forward + backward + optimiser step (SGD, lr 0.01):

``non-private``  plain SGD, the reference;
``privreid``     privreid's DP-SGD step as a client takes it
                 (:class:`privreid.defenses.dp_sgd.mechanism.PrivateTraining`: Opacus
                 hooks on the model, :class:`~privreid.defenses.dp_sgd.mechanism.AttributionCheckingDPOptimizer`
                 around SGD, accountant step hook), entered through
                 ``model.forward_train``;
``hooks``, ``functorch``, ``ew``, ``ghost``
                 ``opacus.PrivacyEngine.make_private`` with that
                 ``grad_sample_mode`` on a module whose ``forward`` returns
                 the logits (ghost: fast gradient clipping with Opacus'
                 loss wrapper and its double backward).

Approaches are interleaved (one block of steps of each, repeated), and the
median time per step is reported, which keeps the comparison fair on a
shared machine.  ``--poisson`` draws the batch sizes as DP-SGD does
(binomial, expected ``--batch``; one sequence shared by every approach) and
reports the mean.  Ratios are to the non-private step; the target is
privreid within 1.1x of the fastest Opacus mode.

    python benchmarks/dp_overhead.py                                       # ResNet-18, 64x32, batch 16
    python benchmarks/dp_overhead.py --height 128 --width 64 --batch 32    # the demo setting
    python benchmarks/dp_overhead.py --height 128 --width 64 --batch 32 --poisson --modes non-private,privreid,hooks,ew

Measured here (2-core CPU shared with other jobs, load average 4-7, so the
absolute times are inflated; one thread; seconds per step, x non-private):

===========================  ===========  ============  ===========  ============  ============  ===========
setting                      non-private  privreid      hooks        functorch     ew            ghost
===========================  ===========  ============  ===========  ============  ============  ===========
64x32, batch 16 (default)    0.435        3.00 (6.9x)   2.89 (6.6x)  4.87 (11.2x)  6.52 (15.0x)  3.46 (8.0x)
128x64, batch 32             2.36         8.11 (3.4x)   9.30 (3.9x)  10.5 (4.5x)   5.91 (2.5x)   9.08 (3.8x)
128x64, Poisson batch ~32    2.74         7.74 (2.8x)   7.46 (2.7x)  -             8.69 (3.2x)   -
===========================  ===========  ============  ===========  ============  ============  ===========

privreid / best Opacus mode: 1.04 (hooks), 1.37 (ew), 1.04 (hooks).  A
fixed batch of 32 or more is ``ew``'s best case: torch's ExpandedWeights
computes convolution per-sample gradients with unfold + einsum from 32
samples on and with (here much slower) grouped convolutions below; DP-SGD's
Poisson batches of expected size 32 are below 32 half of the time, and
there hooks win.  privreid therefore uses hooks
(:mod:`privreid.defenses.dp_sgd.mechanism`).
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
import warnings

import torch
from torch import nn

# Run from a checkout without installing privreid.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from privreid.defenses.accounting import ClientAccountant  # noqa: E402
from privreid.defenses.dp_sgd.mechanism import DPSGDPlan, PrivateTraining  # noqa: E402
from privreid.models import build_model  # noqa: E402

OPACUS_MODES = ("hooks", "functorch", "ew", "ghost")
APPROACHES = ("non-private", "privreid", *OPACUS_MODES)
NOISE, CLIP, LR = 1.0, 1.0, 0.01


class LogitsView(nn.Module):
    """``forward`` = the identity logits of :meth:`ReIDModel.forward_train` (what Opacus' wrappers call)."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model.forward_train(x)[2]


def criterion() -> nn.Module:
    return nn.CrossEntropyLoss(label_smoothing=0.1)


def plain_step(model, x, y):
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    loss_fn = criterion()

    def step(b):
        opt.zero_grad(set_to_none=True)
        loss_fn(model.forward_train(x[:b])[2], y[:b]).backward()
        opt.step()

    return step, lambda: None


def privreid_step(model, x, y):
    plan = DPSGDPlan(num_samples=len(x) * 10, sample_rate=0.1, steps_per_epoch=1, steps_per_round=1,
                     noise_multiplier=NOISE, max_grad_norm=CLIP, delta=1e-5, target_epsilon=None)
    session = PrivateTraining(model, plan, ClientAccountant()).__enter__()
    opt = session.wrap_optimizer(torch.optim.SGD(model.parameters(), lr=LR))
    loss_fn = criterion()

    def step(b):
        opt.zero_grad(set_to_none=True)
        loss_fn(model.forward_train(x[:b])[2], y[:b]).backward()
        opt.step()

    return step, lambda: session.__exit__(None, None, None)


def opacus_step(mode, model, x, y):
    from opacus import PrivacyEngine

    module = LogitsView(model)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=len(x))
    engine = PrivacyEngine(accountant="rdp")
    kwargs = {"criterion": criterion()} if mode == "ghost" else {}
    out = engine.make_private(module=module, optimizer=torch.optim.SGD(module.parameters(), lr=LR),
                              data_loader=loader, noise_multiplier=NOISE, max_grad_norm=CLIP,
                              grad_sample_mode=mode, poisson_sampling=False, **kwargs)
    wrapped, opt = out[0], out[1]
    loss_fn = out[2] if mode == "ghost" else criterion()

    def step(b):
        opt.zero_grad(set_to_none=True)
        loss_fn(wrapped(x[:b]), y[:b]).backward()
        opt.step()

    return step, lambda: None


def batch_sizes(args) -> list[int]:
    """The batch size of every timed step: ``--batch``, or Poisson-sampled sizes (same sequence for every approach)."""
    n = args.repeats * args.steps
    if not args.poisson:
        return [args.batch] * n
    population = 10 * args.batch  # each of 10 B images drawn with probability 0.1: expected size B
    gen = torch.Generator().manual_seed(0)
    return [max(1, int((torch.rand(population, generator=gen) < 0.1).sum())) for _ in range(n)]  # at least one


def build_steps(approaches, args, largest: int):
    torch.manual_seed(0)
    base = build_model(arch=args.arch, num_classes=args.classes, feat_dim=args.feat_dim, norm="group")
    base.train()
    x = torch.randn(largest, 3, args.height, args.width)
    y = torch.randint(0, args.classes, (largest,))
    steps = {}
    for name in approaches:
        model = copy.deepcopy(base)
        if name == "non-private":
            steps[name] = plain_step(model, x, y)
        elif name == "privreid":
            steps[name] = privreid_step(model, x, y)
        else:
            steps[name] = opacus_step(name, model, x, y)
    return steps


def measure(approaches, args) -> dict[str, list[float]]:
    sizes = batch_sizes(args)
    steps = build_steps(approaches, args, max(sizes))
    sync = torch.cuda.synchronize if args.device.startswith("cuda") else (lambda: None)
    times: dict[str, list[float]] = {name: [] for name in approaches}
    for name in approaches:  # warm-up: allocator, hooks, first-call overheads
        for _ in range(args.warmup):
            steps[name][0](args.batch)
    for block in range(args.repeats):
        for name in approaches:
            step = steps[name][0]
            for b in sizes[block * args.steps:(block + 1) * args.steps]:
                sync()
                t = time.perf_counter()
                step(b)
                sync()
                times[name].append(time.perf_counter() - t)
    for _, close in steps.values():
        close()
    return times


def report(times: dict[str, list[float]], poisson: bool) -> dict:
    # Poisson batches differ in size: the mean over the shared sequence; fixed batches: the median
    summarise = statistics.mean if poisson else statistics.median
    median = {name: summarise(ts) for name, ts in times.items()}
    base = median.get("non-private")
    rows = {name: {"s_per_step": m, "vs_non_private": m / base if base else None, "n": len(times[name])}
            for name, m in median.items()}
    opacus = {name: m for name, m in median.items() if name in OPACUS_MODES}
    out = {"steps": rows}
    if opacus:
        best = min(opacus, key=opacus.get)
        out["best_opacus_mode"] = best
        if "privreid" in median:
            out["privreid_vs_best_opacus"] = median["privreid"] / opacus[best]
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", default="resnet18")
    ap.add_argument("--height", type=int, default=64)
    ap.add_argument("--width", type=int, default=32)
    ap.add_argument("--batch", type=int, default=16, help="batch size (the expected size with --poisson)")
    ap.add_argument("--poisson", action="store_true", help="Poisson batch sizes as DP-SGD draws them (the same "
                    "sequence for every approach); the mean time per step is then reported")
    ap.add_argument("--feat-dim", type=int, default=512)
    ap.add_argument("--classes", type=int, default=100)
    ap.add_argument("--steps", type=int, default=2, help="timed steps per block")
    ap.add_argument("--repeats", type=int, default=3, help="interleaved blocks per approach")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (1: stable on a shared machine)")
    ap.add_argument("--modes", default=",".join(APPROACHES), help=f"subset of {','.join(APPROACHES)}")
    ap.add_argument("--device", default="cpu", help="cpu or cuda (timings synchronise the device)")
    ap.add_argument("--json", default=None, help="write the results here")
    args = ap.parse_args(argv)
    approaches = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = [m for m in approaches if m not in APPROACHES]
    if unknown:
        ap.error(f"unknown modes {unknown}; choose from {', '.join(APPROACHES)}")
    torch.set_num_threads(args.threads)
    torch.set_default_device(args.device)
    warnings.filterwarnings("ignore", message="Full backward hook is firing")
    warnings.filterwarnings("ignore", message="Secure RNG turned off")
    warnings.filterwarnings("ignore", message="Optimal order is the")
    times = measure(approaches, args)
    result = {"config": vars(args), "torch": torch.__version__, "machine": platform.processor() or platform.machine(),
              "batch_sizes": batch_sizes(args), **report(times, args.poisson)}
    kind = f"Poisson batches of expected size {args.batch}, mean" if args.poisson else f"batch {args.batch}, median"
    print(f"ResNet ({args.arch}) at {args.height}x{args.width}, {args.threads} thread(s), {args.device}; "
          f"{kind} of {args.repeats} x {args.steps} steps")
    print(f"{'approach':12s} {'s/step':>8s} {'x non-private':>14s}")
    for name, row in result["steps"].items():
        ratio = f"{row['vs_non_private']:.2f}" if row["vs_non_private"] else "-"
        print(f"{name:12s} {row['s_per_step']:8.3f} {ratio:>14s}")
    if "privreid_vs_best_opacus" in result:
        verdict = "within" if result["privreid_vs_best_opacus"] <= 1.1 else "NOT within"
        print(f"privreid / best Opacus mode ({result['best_opacus_mode']}): "
              f"{result['privreid_vs_best_opacus']:.3f} ({verdict} the 1.1x target)")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(result, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
