"""A picture of corruptions: one row per type, the clean image then one column per severity."""

from __future__ import annotations

import os
from collections.abc import Sequence

import torch

from privreid.errors import ConfigError

from privreid.io import pyplot, savefig_atomic
from privreid.log import progress_bar
from privreid.corruptions import check_severity, corrupt, resolve_corruptions

#: File types the preview can be written as (matplotlib's raster and vector back ends).
PREVIEW_SUFFIXES = (".png", ".jpg", ".jpeg", ".pdf", ".svg")


def save_preview(image: torch.Tensor, path: str | os.PathLike, *, names: str | Sequence[str] = "all",
                 severities: Sequence[int] = (1, 2, 3, 4, 5), seed: int = 0,
                 pixel_scale: float | str = 1.0, progress: bool = False) -> list[str]:
    """Draw ``image`` (``(3, H, W)`` in [0, 1]) under every corruption and severity; write the grid to ``path``.

    Every cell of a row uses the generator seed ``seed`` so columns differ by
    severity only.  Returns the corruption names drawn (the rows, in order).
    """
    plt = pyplot()
    suffix = os.path.splitext(str(path))[1].lower()
    if suffix not in PREVIEW_SUFFIXES:
        raise ConfigError(f"--out must end in one of {', '.join(PREVIEW_SUFFIXES)}, got {str(path)!r}")
    rows = resolve_corruptions(list(names) if not isinstance(names, str) else names)
    cols = [check_severity(s) for s in severities]
    if not cols:
        raise ConfigError("no severity given")
    h, w = image.shape[-2:]
    cell = 1.1
    fig, axes = plt.subplots(len(rows), len(cols) + 1, squeeze=False,
                             figsize=(cell * (len(cols) + 1) * max(w / h, 0.3) + 1.6, cell * len(rows)))
    batch = image[None].float()
    try:
        for r, name in enumerate(progress_bar(rows, desc="corrupting", unit="type", enabled=progress)):
            panels = [batch] + [corrupt(batch, name, s, generator=seed, pixel_scale=pixel_scale) for s in cols]
            for c, panel in enumerate(panels):
                ax = axes[r][c]
                ax.imshow(panel[0].permute(1, 2, 0).clamp(0, 1).cpu().numpy(), interpolation="nearest")
                ax.set_xticks([])
                ax.set_yticks([])
                if r == 0:
                    ax.set_title("clean" if c == 0 else f"severity {cols[c - 1]}", fontsize=7)
            axes[r][0].set_ylabel(name, rotation=0, ha="right", va="center", fontsize=7)
        fig.tight_layout(pad=0.3)
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        savefig_atomic(fig, path, dpi=150)
    finally:
        plt.close(fig)
    return rows
