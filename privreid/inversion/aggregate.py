"""Threat ``aggregate``: what a server under secure aggregation sees, the sum of m clients' updates, inverted.

``privreid invert --threat aggregate --clients 1,2,4,8`` (one row per m):

* the observation is the sum of the shared-key gradients of ``m`` one-image steps: the victim's on the subject
  and ``m - 1`` of other clients of the checkpoint, each on its own training image with its own model and head
  (clients in turn, several images each when needed);
* each step is defended as trained before the sum: beta and DP-SGD noise per step; under ``--client-dp`` the
  distributed share ``N(0, (Z S)^2 / m)`` of each clipped step
  (:mod:`privreid.defenses.secure_aggregation.mechanism`), so the sum carries DP-FedAvg's noise ``Z S`` (with
  ``m = 1``, noise a server seeing the upload would not have);
* the attack: the bottleneck's feature leak (:func:`.observation.leak_bottleneck_feature`) then feature
  inversion, which on a sum returns a mixture of the ``m`` pooled features weighted by their bias gradients:
  what secure aggregation buys.

Metrics are against the victim's subject (PSNR, SSIM, feature cosine; no label: the head is not observed).
Reference row: ``shared-feature`` with the defenses as trained; without defenses ``m = 1`` reproduces it.
Quantisation is not simulated (error about ``2c/Q`` per value, far below the noise).
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from privreid.composition import method_of
from privreid.data.formats import read_image
from privreid.errors import ConfigError
from privreid.federated.engine import selection_size
from privreid.losses import identity_loss
from privreid.seeding import derive_seed
from privreid.inversion.attack import Reconstruction, reconstruct
from privreid.inversion.defenses import NO_DEFENSE, Defense, defense_as_trained
from privreid.inversion.optimise import invert_feature, random_start
from privreid.inversion.observation import Observation, leak_bottleneck_feature, to_unit_tensor
from privreid.inversion.report import score, write_row
from privreid.inversion.threat_models import THREATS, observe

BASE_THREAT = "shared-feature"


def parse_clients(values: list[str] | None) -> list[int]:
    """``--clients 1,2,4 --clients 8`` -> ``[1, 2, 4, 8]``; ConfigError for anything but positive integers.

    None or empty -> ``[]``: :func:`plan_sums` then sums each checkpoint's own clients per round."""
    out: list[int] = []
    for value in values or []:
        for part in str(value).split(","):
            try:
                m = int(part)
            except ValueError:
                raise ConfigError(f"--clients takes positive integers (got {part!r})") from None
            if m < 1:
                raise ConfigError(f"--clients takes positive integers (got {m})")
            out.append(m)
    return sorted(set(out))


def other_steps(target, victim: str, m: int) -> list[tuple[str, int]]:
    """``(client, training index)`` of the ``m - 1`` other one-image steps: other clients in turn."""
    if m == 1:
        return []
    others = sorted(c for c in target.clients if c != victim)
    if not others:
        raise ConfigError(f"--clients {m}: {target.path} has no client besides {victim!r} to aggregate with")
    used = {c: 0 for c in others}
    steps = []
    for k in range(m - 1):
        c = others[k % len(others)]
        n = len(target.clients[c].train)
        if used[c] >= n:
            raise ConfigError(f"--clients {m}: client {c!r} has only {n} training images")
        steps.append((c, used[c]))
        used[c] += 1
    return steps


def aggregate_observation(steps, *, shared: set[str], loss_fn, defense: Defense,
                          generator: torch.Generator) -> Observation:
    """The sum of the defended shared gradients of ``steps`` = ``[(model, image, label), ...]``."""
    total: dict[str, torch.Tensor] | None = None
    for model, image, label in steps:
        grads = observe(model, image, label, threat=BASE_THREAT, shared=shared, loss_fn=loss_fn, defense=defense,
                        generator=generator).grads
        total = grads if total is None else {k: total[k] + grads[k] for k in total}
    return Observation(BASE_THREAT, total)


def clients_per_round(target) -> int:
    """The run's ``m``: how many clients each of its rounds aggregated (the engine's ``max(1, ceil(C N))``)."""
    fraction = target.config.federation.client_fraction
    method = method_of(target.config)
    return selection_size(method.client_fraction if fraction is None else fraction, len(target.clients))


def plan_sums(target, owners: list[tuple[str, int]], sizes: list[int]) -> dict[int, list[list[tuple[str, int]]]]:
    """Per ``m`` (``sizes``, or the run's :func:`clients_per_round`), per subject, its :func:`other_steps`."""
    return {m: [other_steps(target, victim, m) for victim, _ in owners] for m in sizes or [clients_per_round(target)]}


def attack_sums(target, subjects, owners, plan, models, where: Path, *, threat: str, settings, defended: bool,
                seed: int, progress: bool, bar) -> list[tuple[str, dict[str, Any]]]:
    """One checkpoint's rows (:func:`.campaign.invert_checkpoints`): the single upload (``shared-feature``), then
    the sum of ``m`` uploads per ``m`` of ``plan``; per row its table label and result."""
    h, w = target.config.data.height, target.config.data.width
    dev = next(models[owners[0][0]][0].parameters()).device
    loss_fn = identity_loss(target.config.optim.label_smoothing)
    out = []
    for row, m in [("single upload", None)] + [(f"aggregate of {m}", m) for m in plan]:
        # each client's own defense before masking (module docstring); the single upload's as trained
        defense = defense_as_trained(target.config, aggregated=m) if defended else NO_DEFENSE
        recs, scores, described = [], [], []
        for k, (subject, (victim, pid)) in enumerate(zip(subjects, owners)):
            net, shared = models[victim]
            subject_seed = derive_seed(seed, "invert", subject.path)
            if m is None:
                rec = reconstruct(net, subject.image, pid, threat=BASE_THREAT, shared=shared, settings=settings,
                                  label_smoothing=target.config.optim.label_smoothing, defense=defense,
                                  seed=subject_seed, progress=progress)
            else:
                generator = torch.Generator().manual_seed(subject_seed)
                steps = [(net, subject.image.to(dev), pid)]
                for c, i in plan[m][k]:
                    path, label, _ = target.clients[c].train[i]
                    steps.append((models[c][0], to_unit_tensor(read_image(path), h, w).to(dev), label))
                obs = aggregate_observation(steps, shared=shared, loss_fn=loss_fn, defense=defense,
                                            generator=generator)
                start = random_start((settings.restarts, *subject.image.shape), generator, settings.start, dev)
                image = invert_feature(net, leak_bottleneck_feature(obs.grads), start, settings=settings,
                                       progress=progress)
                rec = Reconstruction(subject=subject.image.cpu(), reconstruction=image[0].cpu(),
                                     baseline=start[0].cpu(), label=pid, inferred_label=None, label_rule=None)
            recs.append(rec)
            scores.append(score(net, rec))
            described.append({"index": subject.index, "path": subject.path, "client": victim, "label": pid,
                              "aggregated_with": [] if m is None else
                              [target.clients[c].train[i][0] for c, i in plan[m][k]]})
            bar.update()
        meta = {"checkpoint": str(target.path), "method": target.ckpt.method,
                "threat": BASE_THREAT if m is None else threat, "clients": m, **settings.record(),
                "attack": "feature inversion", "recipe": settings.describe(), "seed": seed,
                "defense_per_client": asdict(defense), "image_size": list(subjects[0].image.shape[1:])}
        done = write_row(where / ("single" if m is None else f"m{m}"), f"{target.name}: {row}", meta, described,
                         recs, scores)
        out.append((f"{target.name}: {row}", {"name": target.name, "row": row, "clients": m, **done}))
    return out


def caption(settings, names: list[str], defended: bool, subjects: int, given: bool) -> str:
    """summary.md's caption for the checkpoints ``names``; ``given``: the sizes m came from ``--clients``."""
    return (f"Gradient inversion of the server's view under secure aggregation"
            f"{'' if len(names) > 1 else f' ({names[0]})'}: the sum of m clients' shared one-image updates, "
            f"attacked through the bottleneck's feature leak and feature inversion ({settings.describe()}; "
            f"{'defenses as trained, per client' if defended else 'no defenses'}; {subjects} subject(s); "
            f"m: {'as given' if given else 'each run' + chr(39) + 's clients per round'}); reference: the "
            f"single upload (threat {BASE_THREAT}).  Mean ± std against the victim's image, each row above its "
            "random-image baseline; a lower bound on what leaks (a stronger attack or a longer budget may "
            "recover more).")


def check_campaign(threat: str, *, image, clients) -> list[int] | None:
    """Refuse the campaign options ``threat`` cannot take, before any work: ``--clients`` is for a threat that
    observes a sum of uploads (:attr:`~.threat_models.ThreatModel.single_upload` False), ``--image`` for one that
    observes a single upload.  The sizes m of ``--clients`` (:func:`parse_clients`), None for a single upload."""
    if THREATS[threat].single_upload:
        if clients:
            raise ConfigError("--clients is for --threat aggregate")
        return None
    if image is not None:
        raise ConfigError(f"--threat {threat} attacks dataset subjects (--index, --subjects), not --image")
    return parse_clients(clients)
