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
from privreid.errors import CheckpointError, ConfigError
from privreid.io import write_text_atomic
from privreid.inversion.observation import to_model_input


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


def _to_unit_tensor(pil_image, height: int, width: int) -> torch.Tensor:
    import torchvision.transforms as T

    return T.Compose([T.Resize((height, width)), T.ToTensor()])(pil_image)


def load_targets(paths: list[Path]) -> list[Target]:
    """Checkpoints with their run configs and their clients' training data."""
    from privreid.data.catalog import federation_for_config
    from privreid.composition import method_of

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
    from privreid.data.formats import read_image

    if not image.is_file():
        raise ConfigError(f"--image: no such file: {image}")
    pil = read_image(image)
    if pil.size != (width, height):
        raise ConfigError(f"--image {image} is {pil.size[1]}x{pil.size[0]} (HxW) but the model takes "
                          f"{height}x{width}; resize it first")
    return Subject(_to_unit_tensor(pil, height, width), str(image), None)


def training_subjects(train: list, height: int, width: int, index: int | None, n: int) -> list[Subject]:
    """``n`` images of the ``train`` list (:func:`subject_indices` from ``index``), resized to ``height`` x ``width``."""
    from privreid.data.formats import read_image

    return [Subject(_to_unit_tensor(read_image(train[i][0]), height, width), train[i][0], i)
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
    from privreid.inversion.threat_models import check_model, get_threat

    if client not in target.ckpt.client_states:
        raise CheckpointError(f"{target.path} holds no state for client {client!r}: it cannot rebuild the "
                              "client's model")
    net = target.ckpt.load_model(client, device=device)
    if not net.num_classes:  # neither its own head nor one every client shares (DPPT's, in the server state)
        raise CheckpointError(f"{target.path} holds no classifier head for client {client!r}; the client's "
                              "training step cannot be rebuilt")
    shared = target.ckpt.shared_keys & {n for n, _ in net.named_parameters()}
    if get_threat(threat).needs_shared and not shared:
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
    from privreid.inversion.report import summary_table

    table = f"{caption}\n\n{summary_table(rows)}\n"
    out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out / "summary.md", table)
    return CampaignResult(table, results)


def invert_checkpoints(paths: list[Path], out: Path, *, settings, client: str | None = None, index: int | None = None,
                       image: Path | None = None, label: int | None = None, n: int = 1, threat: str = "full",
                       defended: bool = True, seed: int = 0, device: str = "cpu",
                       progress: bool = True) -> CampaignResult:
    """Attack every checkpoint on the same subjects; write metrics.json + grid.png per model and summary.md."""
    from privreid.log import progress_bar

    from privreid.inversion import NO_DEFENSE, defense_as_trained
    from privreid.device import resolve_device

    if n < 1:
        raise ConfigError(f"--subjects must be >= 1 (got {n})")
    if label is not None and image is None:
        raise ConfigError("--label is for --image only; dataset subjects carry their client's label")
    dev = resolve_device(device)
    targets = load_targets(paths)
    subjects, first_client = select_subjects(targets[0], client, index, image, n)
    jobs = []  # (target, model, shared, [(subject, client, label)]) -- everything is checked before any attack
    for target in targets:
        owners = [client_of(target, s, first_client, label) for s in subjects]
        models = {name: attacked_model(target, name, threat, dev) for name in dict.fromkeys(c for c, _ in owners)}
        jobs.append((target, models, owners))
    results = []
    bar = progress_bar(total=len(targets) * len(subjects), desc="subjects", enabled=progress)
    for target, models, owners in jobs:
        defense = defense_as_trained(target.config) if defended else NO_DEFENSE
        recs, scores, described = [], [], []
        for group in batches(len(subjects), settings.batch):
            names = {owners[k][0] for k in group}
            if len(names) > 1:
                raise ConfigError(f"--batch {settings.batch}: subjects {[subjects[k].path for k in group]} belong "
                                  f"to different clients of {target.path} ({', '.join(sorted(names))}); a batch is "
                                  "one client's step")
            net, shared = models[names.pop()]
            _attack_batch(net, [subjects[k] for k in group], [owners[k][1] for k in group],
                          [{"client": owners[k][0]} for k in group], (recs, scores, described), threat=threat,
                          shared=shared, settings=settings, label_smoothing=target.config.optim.label_smoothing,
                          defense=defense, seed=seed, progress=progress)
            bar.update(len(group))
        where = out if len(targets) == 1 else out / label_file_stem(target.name)
        meta = {"checkpoint": str(target.path), "method": target.ckpt.method, "defense": asdict(defense)}
        results.append(_write_model_result(where, target.name, meta, described, recs, scores, settings=settings,
                                           threat=threat, seed=seed))
    bar.close()
    return write_summary(out, _caption(settings, threat, "defenses as trained" if defended else "no defenses",
                                       len(subjects)), [(r["name"], r["summary"]) for r in results], results)


def batches(count: int, batch: int) -> list[list[int]]:
    """``count`` subjects in consecutive batches of ``batch`` (``--subjects`` must be a multiple of ``--batch``)."""
    if count % batch:
        raise ConfigError(f"--subjects {count} is not a multiple of --batch {batch}: every batch holds {batch} images")
    return [list(range(k, k + batch)) for k in range(0, count, batch)]


def _attack_batch(net, subjects: list[Subject], labels: list[int], about: list[dict[str, Any]],
                  into: tuple[list, list, list], *, seed: int, **reconstruct_options: Any) -> None:
    """Reconstruct the batch ``subjects`` from ``net``'s step on it with ``labels``; append the reconstructions,
    their scores and their descriptions (``about`` added) to the three lists of ``into``.  One subject keeps its
    own seed (as before batches); a batch is seeded by its first subject."""
    from privreid.inversion import reconstruct_batch
    from privreid.inversion.report import score
    from privreid.seeding import derive_seed

    recs = reconstruct_batch(net, torch.stack([s.image for s in subjects]), labels,
                             seed=derive_seed(seed, "invert", subjects[0].path), **reconstruct_options)
    all_recs, scores, described = into
    for subject, label, extra, rec in zip(subjects, labels, about, recs):
        all_recs.append(rec)
        scores.append(score(net, rec))
        described.append({"index": subject.index, "path": subject.path, "label": label, **extra,
                          "inferred_label": rec.inferred_label, "label_rule": rec.label_rule})


def _write_model_result(where: Path, name: str, meta: dict[str, Any], described: list[dict[str, Any]], recs: list,
                        scores: list[dict[str, Any]], *, settings, threat: str, seed: int) -> dict[str, Any]:
    """One model's ``metrics.json`` and ``grid.png`` in ``where``; its entry of :class:`CampaignResult` ``models``."""
    from privreid.inversion.report import save_grid, subject_caption, summarise, write_metrics_json

    meta = {**meta, "threat": threat, **settings.record(), "recipe": settings.describe(), "seed": seed,
            "image_size": list(recs[0].subject.shape[1:])}
    write_metrics_json(where / "metrics.json", settings=meta, subjects=described, scores=scores)
    save_grid(where / "grid.png", recs, captions=[subject_caption(d) for d in described],
              title=f"{name}: {settings.attack}, threat {threat}")
    return {"name": name, "summary": summarise(scores), "dir": str(where), "grid": str(where / "grid.png")}


def _caption(settings, threat: str, defenses: str, subjects: int) -> str:
    return (f"Gradient inversion (threat {threat}; attack {settings.describe()}; {defenses}; {subjects} subject(s)); "
            "mean ± std, each model above its random-image baseline.  A lower bound on what leaks: a stronger "
            "attack or a longer budget may recover more.")


def file_subjects(height: int, width: int, *, image: Path | None, data: list[str] | None, index: int | None,
                  n: int) -> list[Subject]:
    """Subjects for models from elsewhere: ``image`` (at the models' input size), or ``n`` training images of
    ``data``'s first domain from ``index`` on, resized to ``height`` x ``width``."""
    from privreid.data.catalog import resolve_datasets

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
    from privreid.log import progress_bar

    from privreid.device import resolve_device
    from privreid.models.evaluated import model_labels

    sizes = {m.input_size for m in models}
    if len(sizes) > 1:
        raise ConfigError(f"the models take different input sizes ({sorted(sizes)}); attack them separately")
    dev = resolve_device(device)
    subjects = file_subjects(*sizes.pop(), image=image, data=data, index=index, n=n)
    results = []
    bar = progress_bar(total=len(models) * len(subjects), desc="subjects", enabled=progress)
    for name, model in zip(model_labels(models), models):
        net = model.network(device=dev)
        recs, scores, described = [], [], []
        for group in batches(len(subjects), settings.batch):
            chosen = [subjects[k] for k in group]
            if label is not None:
                pids, source = [label] * len(chosen), "--label"
            else:
                with torch.no_grad():
                    logits = net.forward_train(to_model_input(torch.stack([c.image for c in chosen]).to(dev)))[2]
                pids, source = [int(k) for k in logits.argmax(dim=1)], "predicted by the model"
            _attack_batch(net, chosen, pids, [{"label_source": source}] * len(chosen), (recs, scores, described),
                          threat="full", shared=set(), settings=settings, seed=seed, progress=progress)
            bar.update(len(group))
        where = out if len(models) == 1 else out / label_file_stem(name)
        results.append(_write_model_result(where, name, {"model": model.provenance()}, described, recs, scores,
                                           settings=settings, threat="full", seed=seed))
    bar.close()
    return write_summary(out, _caption(settings, "full", "no defenses", len(subjects)),
                         [(r["name"], r["summary"]) for r in results], results)
