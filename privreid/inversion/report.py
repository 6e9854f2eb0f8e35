"""Scoring and reporting reconstructions: metrics, metrics.json, the PNG grid, the summary table.

Metrics per subject (``METRICS``), for the reconstruction and the random start (the baseline): ``mse``,
``psnr`` (dB) and ``ssim`` of the ``[0, 1]`` images (scikit-image, ``data_range=1``; SSIM with Wang et al.'s
Gaussian window, sigma 1.5, population covariances, :data:`SSIM_SETTINGS`, as the inversion literature
reports it); ``feature_cosine`` of the attacked model's features (L2RW+, paper 003, Fig. 8); whether the
inferred label is right (``None`` when the head is not observed). Summaries: mean and population std.

The grid follows L2RW+'s Fig. 8: subject, reconstruction, its kornia bilateral filter, and that view's
absolute 3x3 Laplacian scaled to its maximum. The paper gives no filter parameters: colour sigma 0.5 (L1 over
RGB; at OpenCV's 75/255 reconstructions keep their pixel noise), spatial sigma one pixel per 32 of width (at
least 1), kernel ``2 * ceil(2 * sigma) + 1``, covering the same part of the person at every resolution.
"""

from __future__ import annotations

import json
import math
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import kornia
import numpy as np
import torch
import torch.nn.functional as F
from skimage.metrics import mean_squared_error, peak_signal_noise_ratio, structural_similarity
from torch import nn

from privreid.io import finite_or_none, format_table, save_figure, write_text_atomic

from privreid.inversion.attack import Reconstruction
from privreid.inversion.observation import to_model_input

METRICS = ("mse", "psnr", "ssim", "feature_cosine")
#: SSIM as in Wang et al. (2004): 11x11 Gaussian window (sigma 1.5, truncated at 3.5 sigma), population covariances
SSIM_SETTINGS = {"gaussian_weights": True, "sigma": 1.5, "use_sample_covariance": False}


def _hwc(image: torch.Tensor) -> np.ndarray:
    return image.detach().cpu().permute(1, 2, 0).double().numpy()


def image_metrics(subject: torch.Tensor, image: torch.Tensor) -> dict[str, float]:
    """MSE, PSNR and SSIM of ``image`` against ``subject`` (both ``(3, H, W)`` in ``[0, 1]``)."""
    a, b = _hwc(subject), _hwc(image)
    mse = float(mean_squared_error(a, b))
    return {"mse": mse,
            "psnr": float(peak_signal_noise_ratio(a, b, data_range=1.0)) if mse > 0 else math.inf,
            "ssim": float(structural_similarity(a, b, data_range=1.0, channel_axis=2, **SSIM_SETTINGS))}


def feature_cosine(model: nn.Module, subject: torch.Tensor, image: torch.Tensor) -> float:
    """Cosine similarity of ``model``'s (eval-mode) features of two ``[0, 1]`` images."""
    device = next(model.parameters()).device
    model.eval()
    with torch.no_grad():
        feats = model(to_model_input(torch.stack([subject, image]).to(device)))
    return float(F.cosine_similarity(feats[0:1], feats[1:2]))


def score(model: nn.Module, rec: Reconstruction) -> dict[str, Any]:
    """``{"attack": metrics, "random": metrics, "label_correct": bool | None}`` for one subject."""
    out: dict[str, Any] = {}
    for key, image in (("attack", rec.reconstruction), ("random", rec.baseline)):
        out[key] = {**image_metrics(rec.subject, image), "feature_cosine": feature_cosine(model, rec.subject, image)}
    out["label_correct"] = None if rec.inferred_label is None else rec.inferred_label == rec.label
    return out


def mean_std(values: Sequence[float]) -> dict[str, float]:
    arr = np.asarray(values, dtype=float)
    return {"mean": float(arr.mean()), "std": float(arr.std())}


def summarise(scores: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean ± std of every metric for the attack and the random baseline; label accuracy where known."""
    summary: dict[str, Any] = {key: {m: mean_std([s[key][m] for s in scores]) for m in METRICS}
                               for key in ("attack", "random")}
    known = [s["label_correct"] for s in scores if s["label_correct"] is not None]
    summary["label_accuracy"] = float(np.mean(known)) if known else None
    summary["subjects"] = len(scores)
    return summary


def write_metrics_json(path: str | Path, *, settings: dict[str, Any], subjects: list[dict[str, Any]],
                       scores: list[dict[str, Any]]) -> Path:
    """``metrics.json``: ``settings``, ``subjects`` (their description plus scores) and ``summary``; a
    non-finite number (the PSNR of an exact copy) is ``null``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {"settings": {**settings, "ssim": {"window": "gaussian", **SSIM_SETTINGS,
                                                 "reference": "Wang et al. 2004"}},
               "subjects": [{**subject, **s} for subject, s in zip(subjects, scores)],
               "summary": summarise(scores)}
    write_text_atomic(path, json.dumps(finite_or_none(payload), indent=2))
    return path


def filtered_views(image: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(bilateral-filtered, |Laplacian| of it scaled to [0, 1])`` of a ``(3, H, W)`` image."""
    sigma = max(1.0, image.shape[-1] / 32)
    kernel = 2 * math.ceil(2 * sigma) + 1
    smooth = kornia.filters.bilateral_blur(image[None], kernel, 0.5, (sigma, sigma))[0].clamp(0, 1)
    edges = kornia.filters.laplacian(smooth[None], 3)[0].abs().mean(0, keepdim=True)
    edges = edges / edges.max().clamp_min(1e-12)
    return smooth, edges.expand(3, -1, -1)


#: the grid's footnote: what a row's caption says (two models number the same identity differently)
CAPTION_NOTE = ("Each row: the subject's index and image file (its dataset identity), then its class in the attacked "
                "model's own head (each model numbers its classes: two grids differ for the same person), and the "
                "class the attack inferred where it inferred one.")


def subject_caption(described: dict[str, Any]) -> str:
    """A grid row's caption from a subject's description: ``#index file`` and ``head class L (inferred I)``."""
    first = " ".join(x for x in (f"#{described['index']}" if described.get("index") is not None else "",
                                 Path(described["path"]).stem if described.get("path") else "") if x)
    second = f"head class {described['label']}"
    if described.get("inferred_label") is not None:
        second += f", inferred {described['inferred_label']}"
    return f"{first}\n{second}" if first else second


def save_grid(path: str | Path, reconstructions: list[Reconstruction], captions: list[str] | None = None,
              title: str | None = None) -> Path:
    """PNG grid, one row per subject: subject, reconstruction, bilateral-filtered, Laplacian; each row's caption
    (:func:`subject_caption`) to its left, horizontal, and :data:`CAPTION_NOTE` under the title."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    columns = ("subject", "reconstruction", "bilateral", "Laplacian")
    height, width = reconstructions[0].subject.shape[-2:]
    cell_w = 1.3
    cell_h = cell_w * height / width
    caption_w = 2.2 if captions else 0.0
    fig, axes = plt.subplots(len(reconstructions), 4, squeeze=False,
                             figsize=(cell_w * 4 + caption_w, cell_h * len(reconstructions) + (1.2 if captions else 0.6)))
    for r, rec in enumerate(reconstructions):
        smooth, edges = filtered_views(rec.reconstruction)
        for c, image in enumerate((rec.subject, rec.reconstruction, smooth, edges)):
            ax = axes[r][c]
            ax.imshow(image.permute(1, 2, 0).clamp(0, 1).numpy())
            ax.set_xticks([])
            ax.set_yticks([])
            if r == 0:
                ax.set_title(columns[c], fontsize=7)
        if captions:
            axes[r][0].set_ylabel(captions[r], fontsize=8, rotation=0, ha="right", va="center", labelpad=6)
    if captions:  # under the title, wrapped to the figure's width
        note = textwrap.fill(CAPTION_NOTE, width=int(fig.get_figwidth() * 13))
        title = f"{title}\n{note}" if title else note
    return save_figure(fig, path, title=title)


#: summary-table columns: (metric, header, format)
TABLE_COLUMNS = (("psnr", "PSNR (dB)", "{:.2f}"), ("ssim", "SSIM", "{:.3f}"), ("mse", "MSE", "{:.4f}"),
                 ("feature_cosine", "feature cos", "{:.3f}"))


def summary_rows(name: str, summary: dict[str, Any]) -> list[dict[str, str]]:
    """Two Markdown rows for one model: its attack and the random-image baseline (mean ± std)."""
    rows = []
    for key, label in (("attack", name), ("random", f"{name}: random image")):
        row = {"model": label}
        for metric, header, fmt in TABLE_COLUMNS:
            m = summary[key][metric]
            row[header] = f"{fmt.format(m['mean'])} ± {fmt.format(m['std'])}"
        acc = summary["label_accuracy"] if key == "attack" else None
        row["label acc"] = "-" if acc is None else f"{100 * acc:.0f}%"
        rows.append(row)
    return rows


def summary_table(models: list[tuple[str, dict[str, Any]]]) -> str:
    """A Markdown table: per model, the attack and its random-image baseline."""
    return format_table([row for name, summary in models for row in summary_rows(name, summary)])


def write_row(where: Path, title: str, meta: dict[str, Any], described: list[dict[str, Any]], recs: list,
              scores: list[dict[str, Any]]) -> dict[str, Any]:
    """``metrics.json`` (``meta`` its settings) and ``grid.png`` in ``where``; the row's summary, folder and grid."""
    write_metrics_json(where / "metrics.json", settings=meta, subjects=described, scores=scores)
    save_grid(where / "grid.png", recs, captions=[subject_caption(d) for d in described], title=title)
    return {"summary": summarise(scores), "dir": str(where), "grid": str(where / "grid.png")}
