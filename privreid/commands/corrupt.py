"""``privreid corrupt``: preview the corruptions on one image (types as rows, severities as columns)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from privreid.errors import ConfigError
from privreid.commands.common import csv_list, csv_names, run_or_exit


def parse_severities(value: Optional[str]) -> Optional[list[int]]:
    """``"1,3,5"`` -> ``[1, 3, 5]`` (each 1-5); ``None`` -> ``None`` (all five)."""
    if value is None:
        return None
    items = csv_names(value, "--severities")
    for item in items:
        if not item.isdigit():
            raise ConfigError(f"severity must be an integer from 1 to 5, got {item!r}")
    return [int(item) for item in items]


def parse_size(value: Optional[str]) -> Optional[tuple[int, int]]:
    """``"128x64"`` -> ``(128, 64)``; ``None`` -> ``None``."""
    if not value:
        return None
    try:
        h, w = (int(v) for v in value.lower().split("x"))
    except ValueError:
        raise ConfigError(f"--size must look like 128x64, got {value!r}") from None
    return h, w


def corrupt_command(
    image: Path = typer.Option(..., "--image", help="Image file to corrupt (any format PIL reads)."),
    out: Path = typer.Option(Path("corruptions.png"), "--out", help="Grid to write (.png, .jpg, .pdf or .svg)."),
    names: Optional[str] = typer.Option(None, "--names", help="Comma-separated corruptions or families (noise, "
                                        "blur, weather, digital); default: all 20."),
    severities: Optional[str] = typer.Option(None, "--severities", help="Comma-separated severities 1-5 "
                                             "(default: all five)."),
    size: Optional[str] = typer.Option(None, "--size", help="Resize the image to HxW first (e.g. 128x64); "
                                       "default: its own size, as the evaluation corrupts it."),
    pixel_scale: str = typer.Option("1", "--pixel-scale", help="1 (default) takes ImageNet-C's pixel lengths "
                                    "literally, as CIL-ReID ran them; 'auto' scales them to the image "
                                    "(sqrt(H*W)/224; the scaled variant) and a number by that factor."),
    seed: int = typer.Option(0, help="Seed of the random corruptions (the same seed draws the same grid)."),
) -> None:
    """Draw an image under every corruption (rows) at every severity (columns), next to the clean image.

    Example: privreid corrupt --image person.jpg --out grid.png --names fog,rain,snow
    """
    from privreid.api import preview_corruptions

    rows = run_or_exit(lambda: preview_corruptions(image, out, names=csv_list(names) or "all",
                                                   severities=parse_severities(severities), size=parse_size(size),
                                                   pixel_scale=pixel_scale, seed=seed, progress=True))
    typer.echo(f"wrote {out} ({len(rows)} corruptions)")
