"""Throughput of privreid's feature-space attacks vs torchattacks' own cross-entropy attacks.

For each attack (FGSM, PGD, BIM, MI-FGSM, TI-FGSM) this script times, in the
same process and on the same ResNet-18 ReID model (random init, 128x64 input
by default, a fixed batch of random ``[0, 1]`` images):

``privreid``
    :func:`privreid.retrieval_attacks.feature_attacks.build_attack` ``(...).perturb(x)``:
    the feature-space objective (one extra no-grad forward for the clean
    reference feature, then ``steps`` forward+backward passes).
``torchattacks``
    torchattacks' class of the same name with its hard-coded cross-entropy,
    on the *same* model's classifier logits (``forward_train(x)[2]``, labels =
    the model's own predictions), same eps / alpha / steps / normalisation.
    Caveat for TI-FGSM: torchattacks' input diversity resizes the 128x64
    image to a 64x64 square half of the time, so its passes are cheaper than
    those of privreid's aspect-preserving version.

Both use the same normalisation inside the attack.  Throughput is the
batch size over the fastest of ``--repeats`` runs (the two implementations
alternate, after one warm-up run each; on CPU timed in process CPU time, see
``_time_pair``); the ratio is privreid's throughput over torchattacks'
(1.0 = same speed).

    OMP_NUM_THREADS=1 python benchmarks/attacks.py               # default: < 3 min on 1 CPU thread
    python benchmarks/attacks.py --methods pgd,fgsm --batch 32 --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

import torch
import torchattacks
import torchvision.transforms.functional as TF

# Run from a checkout without installing privreid.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from privreid.retrieval_attacks.feature_attacks import build_attack  # noqa: E402
from privreid.retrieval_attacks.retrieval import resolve_methods  # noqa: E402
from privreid.data.transforms import IMAGENET_MEAN, IMAGENET_STD  # noqa: E402
from privreid.models import build_model  # noqa: E402

BASELINES = {"fgsm": torchattacks.FGSM, "pgd": torchattacks.PGD, "bim": torchattacks.BIM,
             "mifgsm": torchattacks.MIFGSM, "tifgsm": torchattacks.TIFGSM}


class ClassifierLogits(torch.nn.Module):
    """``x -> logits`` of a ReID model's identity classifier (what torchattacks' CE attacks need)."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model.forward_train(x)[2]


def _time_pair(first, second, repeats: int, device: torch.device) -> tuple[float, float]:
    """Fastest time of ``first()`` and of ``second()`` over ``repeats`` alternating runs, after a warm-up.

    On CPU the clock is the process's CPU time (``time.process_time``): other
    processes sharing the cores do not inflate it, and with one thread it
    equals the wall time of an idle machine (with several threads it sums
    them: img/s per CPU-second).  On CUDA it is wall time with synchronisation.
    Alternating the two and keeping the minimum further protects the ratio
    from bursts of contention.
    """
    cuda = device.type == "cuda"
    clock = time.perf_counter if cuda else time.process_time

    def once(fn) -> float:
        if cuda:
            torch.cuda.synchronize(device)
        start = clock()
        fn()
        if cuda:
            torch.cuda.synchronize(device)
        return clock() - start

    once(first)
    once(second)
    times = [(once(first), once(second)) for _ in range(repeats)]
    return min(t[0] for t in times), min(t[1] for t in times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", default="all", help="comma list of attacks or 'all'")
    parser.add_argument("--height", type=int, default=128)
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--eps", type=float, default=8 / 255)
    parser.add_argument("--alpha", type=float, default=1 / 255)
    parser.add_argument("--classes", type=int, default=751, help="classifier size (Market-1501: 751)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--json", default=None, help="also write the results here")
    args = parser.parse_args()

    device = torch.device(args.device)
    torch.manual_seed(0)
    model = build_model(arch="resnet18", num_classes=args.classes).to(device).eval()
    logits = ClassifierLogits(model).eval()
    images = torch.rand(args.batch, 3, args.height, args.width, device=device)
    normalised = TF.normalize(images, list(IMAGENET_MEAN), list(IMAGENET_STD))
    with torch.no_grad():
        labels = logits(normalised).argmax(1)

    rows = []
    for method in resolve_methods(args.methods):
        ours = build_attack(method, model, eps=args.eps, alpha=args.alpha, steps=args.steps)
        kwargs = {"eps": args.eps} if method == "fgsm" else {"eps": args.eps, "alpha": args.alpha,
                                                             "steps": args.steps}
        baseline = BASELINES[method](logits, **kwargs)
        baseline.set_normalization_used(mean=list(IMAGENET_MEAN), std=list(IMAGENET_STD))
        t_ours, t_base = _time_pair(lambda: ours.perturb(images), lambda: baseline(normalised, labels),
                                    args.repeats, device)
        row = {"method": method, "privreid_img_s": args.batch / t_ours, "torchattacks_ce_img_s": args.batch / t_base,
               "ratio": t_base / t_ours}
        rows.append(row)
        print(f"{method:7s} privreid {row['privreid_img_s']:7.1f} img/s   torchattacks CE "
              f"{row['torchattacks_ce_img_s']:7.1f} img/s   ratio {row['ratio']:.2f}", flush=True)

    info = {"torch": torch.__version__, "torchattacks": torchattacks.__version__, "threads": torch.get_num_threads(),
            "machine": platform.machine(), "device": str(device), **{k: v for k, v in vars(args).items()
                                                                      if k != "json"}}
    print()
    clock = "wall time" if device.type == "cuda" else "process CPU time"
    print(f"ResNet-18, {args.height}x{args.width}, batch {args.batch}, {args.steps} steps, "
          f"{info['threads']} thread(s), device {device}, {clock}")
    print("| attack | privreid feature loss (img/s) | torchattacks CE on logits (img/s) | ratio |")
    print("|---|---|---|---|")
    for r in rows:
        print(f"| {r['method']} | {r['privreid_img_s']:.1f} | {r['torchattacks_ce_img_s']:.1f} | {r['ratio']:.2f} |")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"info": info, "results": rows}, fh, indent=2)


if __name__ == "__main__":
    main()
