"""An inversion campaign: several checkpoints attacked on the same subjects (``privreid invert``'s engine).

Subjects are training images of one client of the first checkpoint (``--index``, ``--n``) or an image file
(``--image``), each attacked through the client that trained on it (its label and head); random starts are
shared, so the random-image baselines match row by row. Models from elsewhere (:func:`invert_files`) are
attacked under ``full`` only, on an image file or images of ``--data``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from privreid.checkpoint import Checkpoint, checkpoint_labels, label_file_stem
from privreid.composition import method_of
from privreid.data.catalog import federation_for_config, resolve_datasets
from privreid.data.formats import read_image
from privreid.device import resolve_device
from privreid.errors import CheckpointError, ConfigError
from privreid.io import write_text_atomic
from privreid.log import progress_bar
from privreid.models.evaluated import model_labels
from privreid.seeding import derive_seed
from privreid.inversion.attack import reconstruct_batch
from privreid.inversion.defenses import NO_DEFENSE, defense_as_trained
from privreid.inversion.observation import to_model_input, to_unit_tensor
from privreid.inversion.report import score, summary_table, write_row
from privreid.inversion.threat_models import THREATS, check_model


@dataclass
class Subject:
    """One image to reconstruct: its ``[0, 1]`` pixels and where it came from."""

    image: torch.Tensor
    path: str
    index: int | None


@dataclass
class Target:
    """One checkpoint ready to attack."""

    name: str
    path: Path
    ckpt: Checkpoint
    config: Any
    clients: dict[str, Any]  # client name -> ClientData (after the method's client preparation)


def load_targets(paths: list[Path]) -> list[Target]:
    """Checkpoints with their run configs and their clients' training data."""
    ckpts = [Checkpoint.load(p) for p in paths]
    targets = []
    for path, ckpt, name in zip(paths, ckpts, checkpoint_labels(ckpts)):
        cfg = ckpt.run_config
        method = method_of(cfg)
        clients = federation_for_config(cfg).clients
        prepare = method.prepare_clients_for(cfg)
        clients = prepare(clients) if prepare else clients
        targets.append(Target(name, Path(path), ckpt, cfg, {c.name: c for c in clients}))
    sizes = {(t.config.data.height, t.config.data.width) for t in targets}
    if len(sizes) > 1:
        raise ConfigError(f"the checkpoints take different input sizes ({sorted(sizes)}); attack them separately")
    return targets


def subject_indices(count: int, index: int, n: int) -> list[int]:
    """``n`` indices into a client's ``count`` training images: ``index`` then evenly spaced (wrapping)."""
    if not 0 <= index < count:
        raise ConfigError(f"--index {index} is out of range: the client has {count} training images (0..{count - 1})")
    if n > count:
        raise ConfigError(f"--subjects {n} exceeds the client's {count} training images")
    stride = count // n
    return [(index + k * stride) % count for k in range(n)]


def select_subjects(target: Target, client: str | None, index: int | None, image: Path | None,
                    n: int) -> tuple[list[Subject], str]:
    """The subjects and the client of the first checkpoint they belong to."""
    height, width = target.config.data.height, target.config.data.width
    name = client or sorted(target.clients)[0]
    if name not in target.clients:
        raise ConfigError(f"no client {name!r} in {target.path}; clients: {', '.join(sorted(target.clients))}")
    if image is not None:
        if index is not None:
            raise ConfigError("give either --index or --image, not both")
        if n != 1:
            raise ConfigError("--subjects needs dataset subjects; --image attacks exactly one image")
        return [image_subject(image, height, width)], name
    return training_subjects(target.clients[name].train, height, width, index, n), name


def image_subject(image: Path, height: int, width: int) -> Subject:
    """``--image``: the file as a subject; ConfigError when it is missing or not ``height`` x ``width``."""
    if not image.is_file():
        raise ConfigError(f"--image: no such file: {image}")
    pil = read_image(image)
    if pil.size != (width, height):
        raise ConfigError(f"--image {image} is {pil.size[1]}x{pil.size[0]} (HxW) but the model takes "
                          f"{height}x{width}; resize it first")
    return Subject(to_unit_tensor(pil, height, width), str(image), None)


def training_subjects(train: list, height: int, width: int, index: int | None, n: int) -> list[Subject]:
    """``n`` images of the ``train`` list (:func:`subject_indices` from ``index``), resized to ``height`` x ``width``."""
    return [Subject(to_unit_tensor(read_image(train[i][0]), height, width), train[i][0], i)
            for i in subject_indices(len(train), index or 0, n)]


def client_of(target: Target, subject: Subject, client: str, label: int | None) -> tuple[str, int]:
    """The client of ``target`` that trained on ``subject`` and its label there; an image file goes through
    ``client`` (or the only client) with ``label``."""
    if subject.index is None:
        name = client if client in target.clients else (next(iter(target.clients)) if len(target.clients) == 1
                                                        else None)
        if name is None:
            raise ConfigError(f"{target.path} has no client {client!r}; clients: {', '.join(sorted(target.clients))}")
        classes = int(target.ckpt.client_classes.get(name, 0))
        if not 0 <= (label or 0) < classes:
            raise ConfigError(f"--label {label} is out of range for client {name!r} ({classes} identities)")
        return name, label or 0
    for name in sorted(target.clients):
        for path, pid, _ in target.clients[name].train:
            if path == subject.path:
                return name, pid
    raise ConfigError(f"{subject.path} is not a training image of any client of {target.path}")


def attacked_model(target: Target, client: str, threat: str, device):
    """The client's model (head included) and the set of shared parameter names; refused when parts are missing."""
    if client not in target.ckpt.client_states:
        raise CheckpointError(f"{target.path} holds no state for client {client!r}: it cannot rebuild the "
                              "client's model")
    net = target.ckpt.load_model(client, device=device)
    if not net.num_classes:  # neither its own head nor one every client shares (DPPT's, in the server state)
        raise CheckpointError(f"{target.path} holds no classifier head for client {client!r}; the client's "
                              "training step cannot be rebuilt")
    shared = target.ckpt.shared_keys & {n for n, _ in net.named_parameters()}
    if THREATS[threat].needs_shared and not shared:
        raise CheckpointError(f"method {target.ckpt.method!r} shares nothing: there is no upload to attack "
                              "under a shared threat model")
    check_model(net, threat, shared)
    return net, shared


@dataclass
class CampaignResult:
    """What :func:`invert_checkpoints` wrote: the Markdown table and, per model, its summary and output folder."""

    table: str
    models: list[dict[str, Any]]  # {"name", "summary" (report.summarise), "dir", "grid"}


def write_summary(out: Path, caption: str, rows, results: list[dict]) -> CampaignResult:
    """``out/summary.md``: the caption over the summary table of ``rows``; the campaign's result."""
    table = f"{caption}\n\n{summary_table(rows)}\n"
    out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out / "summary.md", table)
    return CampaignResult(table, results)


def invert_checkpoints(paths: list[Path], out: Path, *, settings, threat: str = "full", clients=None,
                       client: str | None = None, index: int | None = None, image: Path | None = None,
                       label: int | None = None, n: int = 1, defended: bool = True, seed: int = 0,
                       device: str = "cpu", progress: bool = True, skip_refused: bool = False) -> CampaignResult:
    """``privreid invert``: every checkpoint attacked on the same subjects under ``threat``; metrics.json +
    grid.png per model (per row for a sum of ``clients`` uploads, :mod:`.aggregate`) and summary.md.  All is
    checked before any attack; ``skip_refused`` (the report suite) names a checkpoint it cannot attack, with the
    reason, instead of failing."""
    from privreid.inversion import aggregate

    sizes = aggregate.check_campaign(threat, image=image, clients=clients)  # None: a single upload
    if n < 1:
        raise ConfigError(f"--subjects must be >= 1 (got {n})")
    if label is not None and image is None:
        raise ConfigError("--label is for --image only; dataset subjects carry their client's label")
    dev = resolve_device(device)
    targets = load_targets(paths)
    subjects, first_client = select_subjects(targets[0], client, index, image, n)
    jobs, refused = [], []  # (target, owners [(client, label)], plan, models)
    for target in targets:
        try:
            owners = [client_of(target, s, first_client, label) for s in subjects]
            plan = {} if sizes is None else aggregate.plan_sums(target, owners, sizes)
            names = [c for c, _ in owners] + [c for steps in plan.values() for s in steps for c, _ in s]
            observed = threat if sizes is None else aggregate.BASE_THREAT
            models = {name: attacked_model(target, name, observed, dev) for name in dict.fromkeys(names)}
        except (ConfigError, CheckpointError) as exc:
            if not skip_refused:
                raise
            refused.append({"name": target.name, "refused": str(exc)})
            continue
        jobs.append((target, owners, plan, models))
    rows, results = [], []
    bar = progress_bar(total=sum(1 + len(j[2]) for j in jobs) * len(subjects), desc="subjects", enabled=progress)
    for target, owners, plan, models in jobs:
        where = out if len(targets) == 1 else out / label_file_stem(target.name)
        attack = _attack_upload if sizes is None else aggregate.attack_sums
        for row, result in attack(target, subjects, owners, plan, models, where, threat=threat, settings=settings,
                                  defended=defended, seed=seed, progress=progress, bar=bar):
            rows.append((row if sizes is None or len(targets) > 1 else result["row"], result["summary"]))
            results.append(result)
    bar.close()
    if sizes is None:
        caption = _caption(settings, threat, "defenses as trained" if defended else "no defenses", len(subjects))
    else:
        caption = aggregate.caption(settings, [t.name for t in targets], defended, len(subjects), bool(sizes))
    result = write_summary(out, caption + "".join(f" Not attacked: {r['name']} ({r['refused']})." for r in refused),
                           rows, results)
    result.models += refused
    return result


def _attack_upload(target: Target, subjects: list[Subject], owners, plan, models, where: Path, *, threat: str,
                   settings, defended: bool, seed: int, progress: bool, bar) -> list[tuple[str, dict[str, Any]]]:
    """One checkpoint's attack on single uploads, in batches of ``settings.batch``: its table row and result."""
    defense = defense_as_trained(target.config) if defended else NO_DEFENSE

    def step(group: list[int]):
        names = {owners[k][0] for k in group}
        if len(names) > 1:
            raise ConfigError(f"--batch {settings.batch}: subjects {[subjects[k].path for k in group]} belong "
                              f"to different clients of {target.path} ({', '.join(sorted(names))}); a batch is "
                              "one client's step")
        name = names.pop()
        return (*models[name], [owners[k][1] for k in group], {"client": name})

    meta = {"checkpoint": str(target.path), "method": target.ckpt.method, "defense": asdict(defense)}
    return [(target.name, _attack_model(target.name, where, meta, subjects, step, settings=settings, threat=threat,
                                        seed=seed, progress=progress, bar=bar, defense=defense,
                                        label_smoothing=target.config.optim.label_smoothing))]


def batches(count: int, batch: int) -> list[list[int]]:
    """``count`` subjects in consecutive batches of ``batch`` (``--subjects`` must be a multiple of ``--batch``)."""
    if count % batch:
        raise ConfigError(f"--subjects {count} is not a multiple of --batch {batch}: every batch holds {batch} images")
    return [list(range(k, k + batch)) for k in range(0, count, batch)]


def _attack_model(name: str, where: Path, meta: dict[str, Any], subjects: list[Subject], step, *, settings,
                  threat: str, seed: int, progress: bool, bar, **options: Any) -> dict[str, Any]:
    """One model attacked on ``subjects`` in batches of ``settings.batch``, each seeded by its first subject
    (``step(batch)``: the attacked net, its shared parameters, the batch's labels and what describes them);
    ``metrics.json`` (``meta`` and the settings) and ``grid.png`` in ``where``; its :class:`CampaignResult` entry."""
    recs, scores, described = [], [], []
    for group in batches(len(subjects), settings.batch):
        chosen = [subjects[k] for k in group]
        net, shared, labels, about = step(group)
        done = reconstruct_batch(net, torch.stack([s.image for s in chosen]), labels, threat=threat, shared=shared,
                                 settings=settings, seed=derive_seed(seed, "invert", chosen[0].path),
                                 progress=progress, **options)
        for subject, label, rec in zip(chosen, labels, done):
            recs.append(rec)
            scores.append(score(net, rec))
            described.append({"index": subject.index, "path": subject.path, "label": label, **about,
                              "inferred_label": rec.inferred_label, "label_rule": rec.label_rule})
        bar.update(len(group))
    meta = {**meta, "threat": threat, **settings.record(), "recipe": settings.describe(), "seed": seed,
            "image_size": list(recs[0].subject.shape[1:])}
    return {"name": name, **write_row(where, f"{name}: {settings.attack}, threat {threat}", meta, described, recs,
                                      scores)}


def _caption(settings, threat: str, defenses: str, subjects: int) -> str:
    return (f"Gradient inversion (threat {threat}; attack {settings.describe()}; {defenses}; {subjects} subject(s)); "
            "mean ± std, each model above its random-image baseline.  A lower bound on what leaks: a stronger "
            "attack or a longer budget may recover more.")


def file_subjects(height: int, width: int, *, image: Path | None, data: list[str] | None, index: int | None,
                  n: int) -> list[Subject]:
    """Subjects for models from elsewhere: ``image`` (at the models' input size), or ``n`` training images of
    ``data``'s first domain from ``index`` on, resized to ``height`` x ``width``."""
    if image is not None:
        if data or index is not None or n != 1:
            raise ConfigError("--image attacks exactly one image; --data, --index and --subjects pick dataset subjects")
        return [image_subject(image, height, width)]
    if not data:
        raise ConfigError("a model file from elsewhere records no training data: give --image FILE or --data ROOT")
    return training_subjects(next(iter(resolve_datasets(list(data)).values())).train, height, width, index, n)


def invert_files(models: list, out: Path, *, settings, image: Path | None = None, label: int | None = None,
                 data: list[str] | None = None, index: int | None = None, n: int = 1, seed: int = 0,
                 device: str = "cpu", progress: bool = True) -> CampaignResult:
    """The ``full`` threat on models from elsewhere (:class:`privreid.models.evaluated.EvaluatedModel`), each
    with its own classifier, on the same subjects (:func:`file_subjects`). A subject's label is ``label``
    (``--image``) or the identity the model predicts (``metrics.json``: ``label_source``); no defense applies."""
    sizes = {m.input_size for m in models}
    if len(sizes) > 1:
        raise ConfigError(f"the models take different input sizes ({sorted(sizes)}); attack them separately")
    dev = resolve_device(device)
    subjects = file_subjects(*sizes.pop(), image=image, data=data, index=index, n=n)
    results = []
    bar = progress_bar(total=len(models) * len(subjects), desc="subjects", enabled=progress)
    for name, model in zip(model_labels(models), models):
        net = model.network(device=dev)

        def step(group: list[int], net=net):
            if label is not None:
                return net, set(), [label] * len(group), {"label_source": "--label"}
            with torch.no_grad():
                logits = net.forward_train(to_model_input(torch.stack([subjects[k].image for k in group]).to(dev)))[2]
            return net, set(), [int(k) for k in logits.argmax(dim=1)], {"label_source": "predicted by the model"}

        where = out if len(models) == 1 else out / label_file_stem(name)
        results.append(_attack_model(name, where, {"model": model.provenance()}, subjects, step, settings=settings,
                                     threat="full", seed=seed, progress=progress, bar=bar))
    bar.close()
    return write_summary(out, _caption(settings, "full", "no defenses", len(subjects)),
                         [(r["name"], r["summary"]) for r in results], results)
