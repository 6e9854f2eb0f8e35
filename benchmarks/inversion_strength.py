"""Strength of privreid's gradient inversion against the Inverting Gradients reference recipe, side by side.

Two attackers invert the **same true gradients** of the **same models** for
the same number of iterations, and **one metric function** scores both
(privreid's :func:`~privreid.inversion.report.image_metrics`:
scikit-image PSNR and Wang et al.'s Gaussian SSIM on ``[0, 1]`` pixels;
the model's feature cosine; reconstructions matched to subjects by the
least-MSE assignment, :func:`~privreid.inversion.attack.match_reconstructions`):

``privreid``
    ``privreid invert``'s default attack (:class:`~privreid.inversion.InversionSettings`
    at its defaults, only ``iterations`` and ``batch`` set), which recovers
    the labels itself (label accuracy is reported).
``reference``
    the published configuration of Geiping et al.'s reference implementation
    (JonasGeiping/breaching, ``attack=invertinggradients``), re-implemented
    here from the paper ("Inverting Gradients", NeurIPS 2020, Eq. 4 and
    Sec. 4) and that configuration's documented values, sharing no code with
    privreid's optimiser: ``1 - cos`` over all layers plus 0.2 x total
    variation (mean of ``|dx| + |dy|`` over the zero-padded normalised image),
    Adam at lr 0.1 on the sign of the gradient, the rate x0.1 at 3/8, 5/8 and
    7/8 of the budget, a N(0, 1) start in normalised space, the image boxed
    to valid pixels, the iterate with the lowest objective returned, one
    trial.  It is given the **true labels** (the comparison is of the images;
    privreid has to find its own).
``breaching`` (with ``--breaching DIR``)
    the reference implementation itself, imported from a checkout ``DIR`` of
    JonasGeiping/breaching (with hydra-core on the path), its
    ``invertinggradients`` configuration at the same iterations, the same
    true labels and the same start (it draws its N(0, 1) start from torch's
    global generator, seeded as the reference's); it checks the
    re-implementation.

Settings (``SETTINGS``): DLG's LeNet (Zhu et al. 2019: three 5x5 sigmoid
convolutions of 12 channels and a 100-class linear layer with bias, uniform
init in [-0.5, 0.5]) on 32x32 colour photographs (scikit-image's bundled
images, downsampled), batch 1 and 4; privreid's ReID ResNet-18 (random init,
linear neck, bias-free 100-identity head) on 32x16 synthetic persons
(privreid's renderer), batch 4.  Each seed draws its own model, images,
distinct labels and starts.  A last table attacks a client's multi-step
local update (LeNet, batch 4, 4 SGD steps at lr 0.1) with privreid's two
attacks on it: one averaged gradient, or simulating the local steps.

    OMP_NUM_THREADS=1 python benchmarks/inversion_strength.py            # ~9 min on one CPU thread
    python benchmarks/inversion_strength.py --seeds 1 --lenet-iterations 50 --reid-iterations 5   # smoke run
    PYTHONPATH=/tmp/breaching/deps python benchmarks/inversion_strength.py --breaching /tmp/breaching/src
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

# Run from a checkout without installing privreid.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from privreid.inversion import InversionSettings, reconstruct_batch  # noqa: E402
from privreid.inversion.attack import match_reconstructions  # noqa: E402
from privreid.inversion.report import feature_cosine, image_metrics  # noqa: E402
from privreid.inversion.observation import client_gradient  # noqa: E402
from privreid.data.transforms import IMAGENET_MEAN, IMAGENET_STD  # noqa: E402
from privreid.losses import identity_loss  # noqa: E402

#: (name, model, batch, iterations option) of the main table
SETTINGS = (("LeNet 32x32, batch 1", "lenet", 1, "lenet_iterations"),
            ("LeNet 32x32, batch 4", "lenet", 4, "lenet_iterations"),
            ("ReID ResNet-18 32x16, batch 4", "reid", 4, "reid_iterations"))
CLASSES = 100
#: the multi-step client update of the last table
LOCAL_STEPS, LOCAL_LR = 4, 0.1


class LeNet(nn.Module):
    """DLG's LeNet (Zhu et al. 2019) with privreid's model interface (``forward_train``, ``classifier``)."""

    def __init__(self, generator: torch.Generator) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, 12, 5, padding=2, stride=2), nn.Sigmoid(),
                                  nn.Conv2d(12, 12, 5, padding=2, stride=2), nn.Sigmoid(),
                                  nn.Conv2d(12, 12, 5, padding=2, stride=1), nn.Sigmoid(), nn.Flatten())
        self.classifier = nn.Linear(768, CLASSES)
        self.num_classes = CLASSES
        with torch.no_grad():
            for p in self.parameters():
                p.copy_(torch.rand(p.shape, generator=generator) - 0.5)

    def forward(self, x):
        return self.body(x)

    def forward_train(self, x):
        feature = self.body(x)
        return feature, feature, self.classifier(feature)


def photographs(size: tuple[int, int]) -> torch.Tensor:
    """scikit-image's bundled colour photographs, downsampled to ``size``: ``(N, 3, H, W)`` in ``[0, 1]``."""
    import skimage.data as data

    images = [getattr(data, name)() for name in ("astronaut", "chelsea", "coffee", "rocket", "retina", "hubble_deep_field",
                                                  "immunohistochemistry", "stereo_motorcycle")]
    images = [im[0] if isinstance(im, tuple) else im for im in images]
    tensors = [torch.from_numpy(np.ascontiguousarray(im[..., :3])).permute(2, 0, 1).float()[None] / 255 for im in images]
    return torch.cat([F.interpolate(t, size=size, mode="area") for t in tensors])


def persons(size: tuple[int, int]) -> torch.Tensor:
    """Training images of privreid's synthetic persons at ``size``: ``(N, 3, H, W)`` in ``[0, 1]``."""
    from PIL import Image
    import torchvision.transforms.functional as TF

    from privreid.data.synthetic import SynthConfig, generate_synthetic

    with tempfile.TemporaryDirectory() as tmp:
        root = generate_synthetic(Path(tmp) / "synth", SynthConfig(
            num_domains=1, ids_per_domain=12, test_ids_per_domain=2, cams_per_domain=2, images_per_id_per_cam=1,
            height=size[0], width=size[1], distractors=0, junk=0))
        files = sorted(root.glob("*/bounding_box_train/*.jpg"))
        return torch.stack([TF.to_tensor(Image.open(f).convert("RGB").resize(size[::-1])) for f in files])


def build(kind: str, seed: int) -> nn.Module:
    generator = torch.Generator().manual_seed(seed)
    if kind == "lenet":
        return LeNet(generator).eval()
    from privreid.models import build_model

    torch.manual_seed(seed)
    return build_model("resnet18", num_classes=CLASSES).eval()


# --------------------------------------------------------------------------- the reference recipe (re-implemented)
def reference_tv(z: torch.Tensor) -> torch.Tensor:
    """Mean over pixels of ``|x[i, j+1] - x[i, j]| + |x[i+1, j] - x[i, j]|`` with zeros past the border."""
    padded = F.pad(z, (0, 1, 0, 1))
    across = padded[..., :-1, 1:] - z
    down = padded[..., 1:, :-1] - z
    return (across.abs() + down.abs()).mean()


def reference_seed(seed: int) -> int:
    """The seed of the reference's (and breaching's) N(0, 1) start."""
    return 10_000 + seed


def reference_attack(model: nn.Module, observed: dict, images_shape, labels: list[int], iterations: int,
                     seed: int) -> torch.Tensor:
    """The reference configuration's attack (module docstring); ``[0, 1]`` images."""
    mean = torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1)
    std = torch.tensor(IMAGENET_STD).view(1, 3, 1, 1)
    names = list(observed)
    params = dict(model.named_parameters())
    target = [observed[n] for n in names]
    target_norm = torch.sqrt(sum(t.pow(2).sum() for t in target))
    y = torch.tensor(labels)
    z = torch.randn(images_shape, generator=torch.Generator().manual_seed(reference_seed(seed))).requires_grad_(True)
    adam = torch.optim.Adam([z], lr=0.1)
    decay = torch.optim.lr_scheduler.MultiStepLR(
        adam, milestones=[int(iterations * k / 8) for k in (3, 5, 7)], gamma=0.1)
    lowest, kept = float("inf"), z.detach().clone()
    for _ in range(iterations):
        logits = model.forward_train(z)[2]
        grads = torch.autograd.grad(F.cross_entropy(logits, y), [params[n] for n in names], create_graph=True)
        dot = sum((g * t).sum() for g, t in zip(grads, target))
        norm = torch.sqrt(sum(g.pow(2).sum() for g in grads))
        objective = 1 - dot / (norm * target_norm) + 0.2 * reference_tv(z)
        (step,) = torch.autograd.grad(objective, [z])
        if float(objective.detach()) < lowest:
            lowest, kept = float(objective.detach()), z.detach().clone()
        z.grad = step.sign()
        adam.step()
        decay.step()
        with torch.no_grad():
            z.copy_(torch.max(torch.min(z, (1 - mean) / std), -mean / std))
    return (kept * std + mean).clamp(0, 1)


class _Logits(nn.Module):
    """``x -> logits``: the model as breaching calls it (its parameters in the model's order)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x):
        return self.model.forward_train(x)[2]


def breaching_attack(checkout: str, model: nn.Module, observed: dict, images_shape, labels: list[int],
                     iterations: int, seed: int) -> torch.Tensor:
    """JonasGeiping/breaching's own ``invertinggradients`` on the same gradient; ``[0, 1]`` images."""
    import contextlib
    import io
    import types

    if checkout not in sys.path:
        sys.path.insert(0, checkout)
    import breaching

    with contextlib.redirect_stdout(io.StringIO()):
        cfg = breaching.get_attack_config("invertinggradients", overrides=[f"optim.max_iterations={iterations}",
                                                                           "optim.callback=1000000"])
    net = _Logits(model).eval()
    if [n for n, _ in model.named_parameters()] != list(observed):
        raise SystemExit("breaching matches every parameter's gradient; this model has parameters the loss misses")
    attacker = breaching.attacks.prepare_attack(net, nn.CrossEntropyLoss(), cfg)
    meta = types.SimpleNamespace(shape=tuple(images_shape[1:]), mean=list(IMAGENET_MEAN), std=list(IMAGENET_STD),
                                 modality="vision")
    payload = [{"parameters": [p.detach() for p in net.parameters()], "buffers": [b.detach() for b in net.buffers()],
                "metadata": meta}]
    shared = [{"gradients": list(observed.values()), "buffers": None,
               "metadata": {"num_data_points": len(labels), "labels": torch.tensor(labels), "local_hyperparams": None}}]
    torch.manual_seed(reference_seed(seed))
    with contextlib.redirect_stdout(io.StringIO()):
        found, _ = attacker.reconstruct(payload, shared, {}, dryrun=False)
    mean, std = torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1), torch.tensor(IMAGENET_STD).view(1, 3, 1, 1)
    return (found["data"] * std + mean).clamp(0, 1)


# --------------------------------------------------------------------------- scoring and the table
def scores(model: nn.Module, subjects: torch.Tensor, images: torch.Tensor) -> dict[str, float]:
    """Mean PSNR, SSIM and feature cosine over the batch, reconstructions matched to subjects."""
    order = match_reconstructions(subjects, images)
    per = [{**image_metrics(subjects[j], images[order[j]]),
            "feature_cosine": feature_cosine(model, subjects[j], images[order[j]])} for j in range(len(subjects))]
    return {m: float(np.mean([p[m] for p in per])) for m in ("psnr", "ssim", "feature_cosine")}


def one_run(kind: str, pool: torch.Tensor, batch: int, iterations: int, seed: int,
            checkout: str | None = None) -> dict[str, dict]:
    model = build(kind, seed)
    g = torch.Generator().manual_seed(seed)
    subjects = pool[torch.randperm(len(pool), generator=g)[:batch]]
    labels = [int(k) for k in torch.randperm(CLASSES, generator=g)[:batch]]
    out = {}
    t = time.process_time()
    recs = reconstruct_batch(model, subjects, labels, threat="full", shared=set(),
                             settings=InversionSettings(iterations=iterations, batch=batch), seed=seed)
    out["privreid"] = {**scores(model, subjects, torch.stack([r.reconstruction for r in recs])),
                       "label_accuracy": float(np.mean([r.inferred_label == r.label for r in recs])),
                       "seconds": time.process_time() - t}
    t = time.process_time()
    observed = client_gradient(model, subjects, labels, identity_loss(0.0))
    images = reference_attack(model, observed, subjects.shape, labels, iterations, seed)
    out["reference"] = {**scores(model, subjects, images), "label_accuracy": None,
                        "seconds": time.process_time() - t}
    if checkout:
        t = time.process_time()
        images = breaching_attack(checkout, model, observed, subjects.shape, labels, iterations, seed)
        out["breaching"] = {**scores(model, subjects, images), "label_accuracy": None,
                            "seconds": time.process_time() - t}
    return out


def multi_step_run(pool: torch.Tensor, iterations: int, seed: int) -> dict[str, dict]:
    """LeNet, batch 4, a 4-step local update: privreid's two attacks on it."""
    model = build("lenet", seed)
    g = torch.Generator().manual_seed(seed)
    subjects = pool[torch.randperm(len(pool), generator=g)[:4]]
    labels = [int(k) for k in torch.randperm(CLASSES, generator=g)[:4]]
    out = {}
    for update in ("gradient", "simulate"):
        t = time.process_time()
        settings = InversionSettings(iterations=iterations, batch=4, local_steps=LOCAL_STEPS, local_lr=LOCAL_LR,
                                     update=update)
        recs = reconstruct_batch(model, subjects, labels, threat="full", shared=set(), settings=settings, seed=seed)
        out[update] = {**scores(model, subjects, torch.stack([r.reconstruction for r in recs])),
                       "label_accuracy": float(np.mean([r.inferred_label == r.label for r in recs])),
                       "seconds": time.process_time() - t}
    return out


def _cell(values: list[float], fmt: str) -> str:
    return f"{fmt.format(np.mean(values))} ± {fmt.format(np.std(values))}"


def table(rows: list[tuple[str, str, list[dict]]]) -> str:
    lines = ["| setting | attack | PSNR (dB) | SSIM | feature cos | label acc |", "|---|---|---|---|---|---|"]
    for setting, attack, runs in rows:
        acc = [r["label_accuracy"] for r in runs if r["label_accuracy"] is not None]
        lines.append(f"| {setting} | {attack} | {_cell([r['psnr'] for r in runs], '{:.2f}')} | "
                     f"{_cell([r['ssim'] for r in runs], '{:.3f}')} | "
                     f"{_cell([r['feature_cosine'] for r in runs], '{:.3f}')} | "
                     f"{'true labels given' if not acc else f'{100 * np.mean(acc):.0f}%'} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--lenet-iterations", type=int, default=1000)
    parser.add_argument("--reid-iterations", type=int, default=200)
    parser.add_argument("--json", type=Path, default=None, help="Also write every run's numbers here.")
    parser.add_argument("--breaching", default=None, metavar="DIR",
                        help="Also run breaching's own attack from this checkout of JonasGeiping/breaching.")
    args = parser.parse_args(argv)
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    pools = {"lenet": photographs((32, 32)), "reid": persons((32, 16))}
    rows, record = [], {"settings": vars(args) | {"json": None}, "runs": {}}
    for name, kind, batch, option in SETTINGS:
        iterations = getattr(args, option)
        runs = [one_run(kind, pools[kind], batch, iterations, seed, args.breaching) for seed in range(args.seeds)]
        record["runs"][name] = runs
        for attack in runs[0]:
            rows.append((f"{name}, {iterations} it.", {"breaching": "breaching 8bd99d5 (itself)",
                                                       "reference": "reference recipe (re-implemented)"}.get(
                                                           attack, attack), [r[attack] for r in runs]))
        print(f"done: {name} ({sum(r[a]['seconds'] for r in runs for a in r):.0f} s CPU)", file=sys.stderr)
    print(table(rows))
    iterations = args.lenet_iterations
    runs = [multi_step_run(pools["lenet"], iterations, seed) for seed in range(args.seeds)]
    record["runs"]["multi-step"] = runs
    print(f"\nLeNet 32x32, batch 4, a {LOCAL_STEPS}-step local update at lr {LOCAL_LR:g}, {iterations} iterations:\n")
    print(table([(f"{LOCAL_STEPS} local steps", {"gradient": "privreid, one averaged gradient",
                                                   "simulate": "privreid, simulated local steps"}[u],
                  [r[u] for r in runs]) for u in ("gradient", "simulate")]))
    if args.json:
        args.json.write_text(json.dumps(record, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
