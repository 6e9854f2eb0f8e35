"""``privreid corrupt``: preview the corruptions on one image (types as rows, severities as columns)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from privreid.errors import ConfigError
from privreid.commands.common import csv_list, csv_names, run_or_exit


def parse_severities(value: Optional[str]) -> list[int]:
    """``"1,3,5"`` -> ``[1, 3, 5]`` (each 1-5); ``None`` -> all five."""
    from privreid.corruptions import SEVERITIES

    out = []
    for item in csv_names(value, "--severities") or [str(s) for s in SEVERITIES]:
        if not item.isdigit() or int(item) not in SEVERITIES:
            raise ConfigError(f"severity must be an integer from 1 to 5, got {item!r}")
        out.append(int(item))
    return out


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
    from torchvision.transforms.functional import pil_to_tensor, resize

    from privreid.api import parse_pixel_scale
    from privreid.config import MAX_IMAGE_SIDE, too_large_image
    from privreid.corruptions.preview import save_preview
    from privreid.data.formats import read_image
    from privreid.rundir import check_output_file

    def go() -> list[str]:
        check_output_file(out, "--out", create_parents=True)  # save_preview creates them
        if seed < 0:
            raise ConfigError(f"--seed must be non-negative, got {seed}")
        scale = parse_pixel_scale(pixel_scale)
        levels = parse_severities(severities)
        from privreid.corruptions import resolve_corruptions

        rows = resolve_corruptions(csv_list(names) or "all")
        if size:  # checked before the image is read or anything is allocated
            try:
                h, w = (int(v) for v in size.lower().split("x"))
            except ValueError:
                raise ConfigError(f"--size must look like 128x64, got {size!r}") from None
            if h < 2 or w < 2:
                raise ConfigError(f"--size must be at least 2x2, got {size!r}")
            if max(h, w) > MAX_IMAGE_SIDE:
                raise ConfigError(f"--size {size}: {too_large_image(h, w)}")
        if not image.is_file():
            raise ConfigError(f"image not found: {image}")
        picture = pil_to_tensor(read_image(image)).float().div(255)
        if size:
            picture = resize(picture, [h, w], antialias=True).clamp(0, 1)
        return save_preview(picture, out, names=rows, severities=levels, seed=seed, pixel_scale=scale,
                            progress=True)

    rows = run_or_exit(go)
    typer.echo(f"wrote {out} ({len(rows)} corruptions)")
