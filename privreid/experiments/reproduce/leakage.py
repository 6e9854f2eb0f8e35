"""L2RW+ Fig. 8 (paper 003, "Discussion on privacy"): iDLG on one visible and one infrared subject, per model.

The paper inverts one subject's gradient with iDLG [59] (Adam, lr 0.01, 200 iterations), shows the bilateral- and
Laplacian-filtered views, and compares the feature cosine of subject and reconstruction between DNS and I-DPPT.
privreid attacks each checkpoint with :mod:`privreid.inversion` under ``full``, with the run's defenses (none here).
Subjects: the first training image (path order) of each modality among the run's clients (:func:`subject_path`),
each attacked through its client with its label. Cached beside the run (``inversion-<modality>.json``, ``.pt``)."""

from __future__ import annotations

import json
from pathlib import Path

from privreid.inversion.settings import PRESETS, InversionSettings
from privreid.data.types import MODALITIES
from privreid.errors import ConfigError
from privreid.pickle_scan import UnsafePickle, safe_torch_load
from privreid.io import save_figure, save_torch_atomic

#: the paper's attack: iDLG, Adam at lr 0.01, 200 iterations (its "Discussion on privacy"): the ``l2rw-fig8`` preset
#: of :data:`privreid.inversion.settings.PRESETS` (plain Adam on [0, 1] pixels from uniform noise, the last
#: iterate), not ``privreid invert``'s stronger default recipe
FIG8_PRESET = "l2rw-fig8"
FIG8_ATTACK = PRESETS[FIG8_PRESET]
#: the threat model: the server sees the one-image gradient of the whole model (head included), as iDLG assumes
FIG8_THREAT = "full"
#: the cell metrics (``score``'s names) -> what the table calls them
FIG8_METRICS = (("feature_cosine", "cos"), ("psnr", "PSNR"), ("ssim", "SSIM"), ("label_correct", "label"))


def subject_path(clients, modality_of: dict[str, str], modality: str) -> str:
    """The first (in path order) training image of ``modality`` among ``clients``' training images."""
    if modality not in MODALITIES:
        raise ConfigError(f"modality must be one of {', '.join(MODALITIES)}, got {modality!r}")
    paths = sorted(p for c in clients for p, _, _ in c.train if modality_of.get(p) == modality)
    if not paths:
        raise ConfigError(f"the run's clients hold no {modality} training image: Fig. 8 needs visible-infrared "
                          "training data")
    return paths[0]


def _modalities(config) -> dict[str, str]:
    from privreid.data.catalog import resolve_datasets

    found: dict[str, str] = {}
    for ds in resolve_datasets(config.data.roots, config.data.format, synth_seed=config.data.synth_seed).values():
        found |= ds.modality or {}
    return found


def _client_model(target, client: str, device):
    """The client's model as it trained (head included, a shared classifier like DPPT's too, via
    :meth:`privreid.checkpoint.Checkpoint.load_model`) and its shared parameter names."""
    from privreid.inversion.threat_models import check_model

    net = target.ckpt.load_model(client, device=device)
    shared = target.ckpt.shared_keys & {n for n, _ in net.named_parameters()}
    check_model(net, FIG8_THREAT, shared)
    return net, shared


def invert_run(run_dir: Path, modality: str, device: str) -> dict:
    """Invert the run's subject of ``modality`` (cached next to the run): its ``metrics.json`` payload."""
    cache = run_dir / f"inversion-{modality}.json"
    if cache.is_file():
        return json.loads(cache.read_text())
    from privreid.inversion import defense_as_trained, reconstruct
    from privreid.inversion.campaign import Subject, client_of, load_targets
    from privreid.inversion.observation import to_unit_tensor
    from privreid.inversion.report import score, write_metrics_json
    from privreid.data.formats import read_image
    from privreid.device import resolve_device
    from privreid.seeding import derive_seed

    dev = resolve_device(device)
    [target] = load_targets([run_dir / "ckpt.pt"])
    path = subject_path(target.clients.values(), _modalities(target.config), modality)
    height, width = target.config.data.height, target.config.data.width
    subject = Subject(to_unit_tensor(read_image(path), height, width), path, 0)
    client, label = client_of(target, subject, "", None)
    net, shared = _client_model(target, client, dev)
    settings = InversionSettings.preset(FIG8_PRESET)
    defense = defense_as_trained(target.config)
    rec = reconstruct(net, subject.image, label, threat=FIG8_THREAT, shared=shared, settings=settings,
                      label_smoothing=target.config.optim.label_smoothing, defense=defense,
                      seed=derive_seed(0, "invert", path))
    save_torch_atomic({"subject": rec.subject, "reconstruction": rec.reconstruction},
                      run_dir / f"inversion-{modality}.pt")
    meta = {"checkpoint": str(run_dir / "ckpt.pt"), "method": target.ckpt.method, "threat": FIG8_THREAT,
            **FIG8_ATTACK, "match": settings.distance, "tv": settings.tv_weight, "recipe": settings.describe(),
            "modality": modality}
    write_metrics_json(cache, settings=meta, subjects=[{"path": path, "client": client, "label": label,
                                                        "inferred_label": rec.inferred_label}],
                       scores=[score(net, rec)])
    return json.loads(cache.read_text())


def inversion_cell(run_dir: Path, measure: tuple[str, str], metric: str, device: str) -> float | None:
    """One Fig. 8 cell: ``metric`` of the reconstruction (``"inversion"``) or of its random start
    (``"inversion-random"``) for the subject of modality ``measure[1]``; label recovery in %."""
    kind, modality = measure
    [scores] = invert_run(run_dir, modality, device)["subjects"]
    if metric == "label_correct":
        correct = scores["label_correct"] if kind == "inversion" else None
        return None if correct is None else 100.0 * correct
    value = scores["attack" if kind == "inversion" else "random"][metric]
    return None if value is None else float(value)


def leakage_figure(spec, rows: list[dict], path) -> None:
    """Per subject (one line each): the subject, then per model its reconstruction with the bilateral- and
    Laplacian-filtered views (as Fig. 8 shows them), titled with the feature cosine."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from privreid.inversion.report import filtered_views

    path = Path(path)
    groups = list(dict.fromkeys(c.group for c in spec.columns))
    subjects = [r for r in spec.rows if r.measure and r.measure[0] == "inversion"]
    images = {}
    for row in subjects:
        for group in groups:
            saved = path.parent / "runs" / row.run_name(group) / f"inversion-{row.measure[1]}.pt"
            if saved.is_file():
                try:
                    images[(row.name, group)] = safe_torch_load(saved)
                except UnsafePickle as exc:  # tampered: refused, nothing executed
                    raise ConfigError(f"refusing to read {exc}") from exc
                except Exception as exc:  # truncated or foreign
                    raise ConfigError(f"{saved} is not a readable torch file ({type(exc).__name__})") from exc
    cos = {(r["row"], r["column"]): r["privreid"] for r in rows}
    ncols = 1 + 3 * len(groups)
    fig, axes = plt.subplots(len(subjects), ncols, figsize=(0.9 * ncols, 2.0 * len(subjects) + 0.4), squeeze=False)
    for i, row in enumerate(subjects):
        shown = next((images[(row.name, g)]["subject"] for g in groups if (row.name, g) in images), None)
        panels = [(shown, "subject")]
        for group in groups:
            rec = images.get((row.name, group))
            if rec is None:
                panels += [(None, f"{group}: not run")] + [(None, "")] * 2
                continue
            smooth, edges = filtered_views(rec["reconstruction"])
            value = cos.get((row.name, f"{group} cos"))
            caption = f"{group}\ncos {value:.3f}" if value is not None else group
            panels += [(rec["reconstruction"], caption), (smooth, "bilateral"), (edges, "Laplacian")]
        for ax, (image, caption) in zip(axes[i], panels):
            if image is not None:
                ax.imshow(image.permute(1, 2, 0).clamp(0, 1).numpy())
            ax.set_xticks([])
            ax.set_yticks([])
            ax.set_title(caption, fontsize=5)
        axes[i][0].set_ylabel(row.name, fontsize=6)
    save_figure(fig, path, title=f"{spec.paper}, {spec.title}")
