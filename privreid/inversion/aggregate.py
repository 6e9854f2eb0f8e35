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

import torch

from privreid.errors import CheckpointError, ConfigError
from privreid.inversion.campaign import (CampaignResult, attacked_model, client_of, invert_checkpoints, load_targets,
                                         select_subjects, write_summary)
from privreid.inversion.defenses import NO_DEFENSE, Defense, defense_as_trained
from privreid.inversion.optimise import invert_feature, random_start
from privreid.inversion.observation import Observation, leak_bottleneck_feature
from privreid.inversion.threat_models import get_threat, observe

BASE_THREAT = "shared-feature"


def parse_clients(values: list[str] | None) -> list[int]:
    """``--clients 1,2,4 --clients 8`` -> ``[1, 2, 4, 8]``; ConfigError for anything but positive integers.

    None or empty -> ``[]``: :func:`invert_aggregate` then sums each checkpoint's own clients per round."""
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


def client_defense(config, m: int, defended: bool) -> Defense:
    """The defense each of the ``m`` clients applies to its own step before masking (module docstring)."""
    if not defended:
        return NO_DEFENSE
    return defense_as_trained(config, aggregated=m)


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
    from privreid.federated.engine import selection_size
    from privreid.composition import method_of

    fraction = target.config.federation.client_fraction
    method = method_of(target.config)
    return selection_size(method.client_fraction if fraction is None else fraction, len(target.clients))


def invert_aggregate(paths: list[Path], out: Path, *, settings, clients: list[int] | None = None,
                     client: str | None = None, index: int | None = None, n: int = 1, defended: bool = True,
                     seed: int = 0, device: str = "cpu", progress: bool = True,
                     skip_refused: bool = False) -> CampaignResult:
    """Per checkpoint, the single-upload reference and one row per ``m``; metrics.json + grid.png per row.

    Subjects as :func:`.campaign.invert_checkpoints`. ``clients=None``: each checkpoint's clients per round
    (:func:`clients_per_round`; 1 for a centralised run). All is checked before any attack; ``skip_refused``
    (the report suite) names a checkpoint it cannot attack, with the reason, instead of failing.
    """
    from privreid.log import progress_bar

    from privreid.checkpoint import label_file_stem
    from privreid.data.formats import read_image
    from privreid.device import resolve_device
    from privreid.losses import identity_loss
    from privreid.seeding import derive_seed
    from privreid.inversion.attack import Reconstruction, reconstruct
    from privreid.inversion.campaign import _to_unit_tensor
    from privreid.inversion.report import save_grid, score, subject_caption, summarise, write_metrics_json

    if n < 1:
        raise ConfigError(f"--subjects must be >= 1 (got {n})")
    dev = resolve_device(device)
    targets = load_targets(paths)
    subjects, first = select_subjects(targets[0], client, index, None, n)
    jobs, refused = [], []  # everything is checked before any attack
    for target in targets:
        try:
            sizes = clients or [clients_per_round(target)]
            owners = [client_of(target, s, first, None) for s in subjects]
            plan = {m: [other_steps(target, victim, m) for victim, _ in owners] for m in sizes}
            names = {c for steps in plan.values() for s in steps for c, _ in s} | {c for c, _ in owners}
            models = {name: attacked_model(target, name, BASE_THREAT, dev) for name in sorted(names)}
        except (ConfigError, CheckpointError) as exc:
            if not skip_refused:
                raise
            refused.append({"name": target.name, "refused": str(exc)})
            continue
        jobs.append((target, sizes, owners, plan, models))
    rows, results = [], []
    several = len(targets) > 1
    bar = progress_bar(total=sum((1 + len(j[1])) * len(subjects) for j in jobs), desc="subjects", enabled=progress)
    for target, sizes, owners, plan, models in jobs:
        h, w = target.config.data.height, target.config.data.width
        loss_fn = identity_loss(target.config.optim.label_smoothing)
        for row, m in [("single upload", None)] + [(f"aggregate of {m}", m) for m in sizes]:
            recs, scores, described = [], [], []
            for k, (subject, (victim, pid)) in enumerate(zip(subjects, owners)):
                net, shared = models[victim]
                subject_seed = derive_seed(seed, "invert", subject.path)
                if m is None:
                    defense = defense_as_trained(target.config) if defended else NO_DEFENSE
                    rec = reconstruct(net, subject.image, pid, threat=BASE_THREAT, shared=shared, settings=settings,
                                      label_smoothing=target.config.optim.label_smoothing, defense=defense,
                                      seed=subject_seed, progress=progress)
                else:
                    defense = client_defense(target.config, m, defended)
                    generator = torch.Generator().manual_seed(subject_seed)
                    steps = [(net, subject.image.to(dev), pid)]
                    for c, i in plan[m][k]:
                        path, label, _ = target.clients[c].train[i]
                        steps.append((models[c][0], _to_unit_tensor(read_image(path), h, w).to(dev), label))
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
            where = (out / label_file_stem(target.name) if several else out) / ("single" if m is None else f"m{m}")
            meta = {"checkpoint": str(target.path), "method": target.ckpt.method,
                    "threat": BASE_THREAT if m is None else "aggregate", "clients": m, **settings.record(),
                    "attack": "feature inversion", "recipe": settings.describe(), "seed": seed,
                    "defense_per_client": asdict(defense),
                    "image_size": list(subjects[0].image.shape[1:])}
            write_metrics_json(where / "metrics.json", settings=meta, subjects=described, scores=scores)
            title = f"{target.name}: {row}"
            save_grid(where / "grid.png", recs, captions=[subject_caption(d) for d in described],
                      title=title)
            rows.append((title if several else row, summarise(scores)))
            results.append({"name": target.name, "row": row, "clients": m, "summary": rows[-1][1], "dir": str(where),
                            "grid": str(where / "grid.png")})
    bar.close()
    caption = (f"Gradient inversion of the server's view under secure aggregation"
               f"{'' if several else f' ({targets[0].name})'}: the sum of m clients' shared one-image updates, "
               f"attacked through the bottleneck's feature leak and feature inversion ({settings.describe()}; "
               f"{'defenses as trained, per client' if defended else 'no defenses'}; {len(subjects)} subject(s); "
               f"m: {'as given' if clients else 'each run' + chr(39) + 's clients per round'}); reference: the "
               f"single upload (threat {BASE_THREAT}).  Mean ± std against the victim's image, each row above its "
               "random-image baseline; a lower bound on what leaks (a stronger attack or a longer budget may "
               "recover more)."
               + "".join(f" Not attacked: {r['name']} ({r['refused']})." for r in refused))
    result = write_summary(out, caption, rows, results)
    result.models += refused
    return result




def check_campaign(threat: str, *, image, clients) -> None:
    """Refuse the campaign options ``threat`` cannot take, before any work: ``--clients`` is for a threat that
    observes a sum of uploads (:attr:`~.threat_models.ThreatModel.single_upload` False), ``--image`` for one that
    observes a single upload."""
    if get_threat(threat).single_upload:
        if clients:
            raise ConfigError("--clients is for --threat aggregate")
        return
    if image is not None:
        raise ConfigError(f"--threat {threat} attacks dataset subjects (--index, --subjects), not --image")
    parse_clients(clients)


def invert_campaign(threat: str, paths: list[Path], out: Path, *, settings, client=None, index=None, image=None,
                    label=None, n=1, clients=None, defended=True, seed=0, device="cpu",
                    progress=True) -> CampaignResult:
    """``privreid invert``'s campaign on the checkpoints ``paths`` under ``threat`` (options checked by
    :func:`check_campaign`): :func:`.campaign.invert_checkpoints` for a single upload, else :func:`invert_aggregate`
    with the sums of ``clients`` uploads."""
    check_campaign(threat, image=image, clients=clients)
    if get_threat(threat).single_upload:
        return invert_checkpoints(paths, out, settings=settings, client=client, index=index, image=image, label=label,
                                  n=n, threat=threat, defended=defended, seed=seed, device=device, progress=progress)
    return invert_aggregate(paths, out, settings=settings, clients=parse_clients(clients), client=client, index=index,
                            n=n, defended=defended, seed=seed, device=device, progress=progress)
