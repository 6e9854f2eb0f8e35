"""``privreid attack``: retrieval under adversarial queries / gallery images, in L2RW+'s Table IX layout."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Optional

import typer

from privreid.retrieval_attacks import retrieval_attack_names
from privreid.errors import ConfigError
from privreid.commands.options import CompileOption, PrecisionOption
from privreid.commands.common import (ArchOption, DeviceOption, HeightOption, InterpolationOption, MeanOption,
                                      StdOption, WidthOption, checkpoint_paths, run_dir_or_exit, run_or_exit)

DATA_HELP = ("Dataset(s) to attack on: 'synth', a `privreid data synth` directory or a dataset root; "
             "repeatable. Default: the first checkpoint's data.")


def parse_fraction(text: str, option: str) -> float:
    """``"8/255"`` -> 8/255 and ``"0.03"`` -> 0.03, for ``--eps`` / ``--alpha``; :class:`ConfigError` otherwise."""
    parts = str(text).strip().split("/")
    try:
        values = [float(p) for p in parts]
    except ValueError:
        values = []
    if len(values) not in (1, 2) or not all(map(math.isfinite, values)) or (len(values) == 2 and values[1] == 0):
        raise ConfigError(f"{option} must be a number or a fraction like 8/255, got {text!r}")
    return values[0] / values[1] if len(values) == 2 else values[0]


def attack_command(
    model: Optional[Path] = typer.Option(None, "--model", help="Checkpoint (ckpt.pt) to attack, or a model file "
                                         "from elsewhere (docs/models.md; give --data)."),
    models: Optional[list[Path]] = typer.Option(
        None, "--models", help="Several checkpoints compared in one table: --models a.pt b.pt (or repeat --models)."),
    more_models: Optional[list[Path]] = typer.Argument(
        None, metavar="[CKPT]...", help="More checkpoints (what follows --models a.pt lands here)."),
    method: str = typer.Option("all", "--method",
                               help=f"{', '.join([*retrieval_attack_names(), 'all'])}, or a comma list."),
    eps: str = typer.Option("8/255", help="L_inf budget in [0, 1] pixel units; a number or a fraction like 8/255."),
    alpha: Optional[str] = typer.Option(None, help="Step size of the iterative attacks (pixel units; default "
                                        "2.5 eps / steps: torchattacks' 2/255 for 8/255 and 10 steps; FGSM ignores "
                                        "it)."),
    steps: int = typer.Option(10, help="Iterations of the iterative attacks (FGSM: 1)."),
    target: str = typer.Option("query", help="Which images are attacked: query, gallery or both."),
    client: Optional[str] = typer.Option(None, help="Attack this client's personalised model."),
    data: Optional[list[str]] = typer.Option(None, "--data", help=DATA_HELP),
    domains: Optional[str] = typer.Option(None, help="Comma-separated test sets (default: all)."),
    max_queries: Optional[int] = typer.Option(None, help="Use at most N queries per test set (evenly spaced)."),
    batch_size: int = typer.Option(32, help="Images attacked at a time."),
    examples: int = typer.Option(4, help="Example images per model in the PNG (0: no PNG)."),
    seed: int = typer.Option(0, help="Seed of the attacks' randomness (PGD start, TI input diversity)."),
    device: DeviceOption = "auto",
    precision: PrecisionOption = "fp32",
    compile_model: CompileOption = False,
    arch: ArchOption = None,
    height: HeightOption = None,
    width: WidthOption = None,
    mean: MeanOption = None,
    std: StdOption = None,
    interpolation: InterpolationOption = None,
    out: Optional[Path] = typer.Option(None, help="Write report.md, results.json, results.csv and "
                                                  "examples_<model>.png here."),
) -> None:
    """Clean vs adversarial retrieval (R1 / mAP / mINP and relative drop), L2RW+ Table IX layout.

    Each attack (FGSM, PGD, BIM, MI-FGSM, TI-FGSM; torchattacks with a
    feature-space loss, see privreid.retrieval_attacks.feature_attacks) perturbs the
    query and/or gallery images within an L_inf ball of radius eps in [0, 1]
    pixel space; features are re-extracted and the ranking re-evaluated.

    Example: privreid attack --models runs/central/ckpt.pt runs/fedpav/ckpt.pt --method all --eps 8/255 --out runs/attack
    """
    from privreid.api import attack_run, attack_settings
    from privreid.models.compilation import CompileClock, compile_line

    def validate() -> dict[str, Any]:
        settings = attack_settings(method=method, eps=parse_fraction(eps, "--eps"), steps=steps, target=target,
                                   alpha=None if alpha is None else parse_fraction(alpha, "--alpha"),
                                   precision=precision, max_queries=max_queries, batch_size=batch_size,
                                   examples=examples)
        settings["paths"] = checkpoint_paths(model, models, more_models)
        return settings

    settings = run_or_exit(validate)
    with run_dir_or_exit(out, "attack"):
        with CompileClock() as clock:
            report = run_or_exit(attack_run, settings, out, client=client, data=data, domains=domains,
                                 max_queries=max_queries, batch_size=batch_size, examples=examples, seed=seed,
                                 device=device, precision=precision, compile=compile_model, announce=typer.echo,
                                 arch=arch, height=height, width=width, mean=mean, std=std,
                                 interpolation=interpolation)
        typer.echo(report)
        if compile_model:
            typer.echo(compile_line(clock.seconds))
        if out is not None:
            typer.echo(f"wrote {out}")
