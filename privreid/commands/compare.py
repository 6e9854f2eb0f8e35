"""``privreid compare``: checkpoints on the same test sets, optionally the full report suite."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from privreid.retrieval_attacks import retrieval_attack_names
from privreid.errors import ConfigError
from privreid.commands.common import (DATA_HELP, ArchOption, DeviceOption, HeightOption, InterpolationOption, MeanOption, StdOption,
                     WidthOption, checkpoint_paths, csv_list, run_dir_or_exit, run_or_exit)


def compare_command(
    models: Optional[list[Path]] = typer.Argument(None, help="Checkpoints to compare (same data), or model files "
                                                  "from elsewhere (docs/models.md)."),
    model: Optional[Path] = typer.Option(None, "--model", help="One checkpoint (several: --models a.pt b.pt, or "
                                         "positionally)."),
    models_opt: Optional[list[Path]] = typer.Option(None, "--models", help="Checkpoints (alternative to the "
                                                    "positional list; --models a.pt b.pt)."),
    untrained: bool = typer.Option(True, help="Add a randomly initialised model of the same architecture."),
    device: DeviceOption = "auto",
    data: Optional[list[str]] = typer.Option(None, "--data", help=DATA_HELP + " Default: the first checkpoint's "
                                             "data (needed when no model is a privreid checkpoint)."),
    arch: ArchOption = None,
    height: HeightOption = None,
    width: WidthOption = None,
    mean: MeanOption = None,
    std: StdOption = None,
    interpolation: InterpolationOption = None,
    markdown: Optional[Path] = typer.Option(None, help="Also write the clean table to this Markdown file."),
    suite: Optional[str] = typer.Option(None, help="Run a report suite: comma list of clean, attacks, "
                                        "corruptions, inversion, audit (membership inference), poisoning (each backdoor trigger a run "
                                        "trained with, on every model) or 'all'; needs --out."),
    out: Optional[Path] = typer.Option(None, help="Report directory (report.md, CSVs, drops.png, inversion/)."),
    testsets: str = typer.Option("all", help="Suite test sets: all, seen or unseen."),
    attacks: str = typer.Option("all", help=f"Suite attacks: {', '.join([*retrieval_attack_names(), 'all'])} or a "
                                "comma list."),
    eps: str = typer.Option("8/255", help="Suite attack budget in [0, 1] pixels (a number or a fraction)."),
    steps: int = typer.Option(10, help="Suite attack iterations."),
    max_queries: Optional[int] = typer.Option(None, help="Suite: attack at most N queries per test set."),
    corruptions: str = typer.Option("noise,blur,weather,digital,all", help="Suite corruption units: families, "
                                    "names, or 'all' (the full CIL-ReID mix)."),
    repeats: int = typer.Option(10, help="Suite corruption repeats (CIL-ReID: 10; other counts are listed "
                                "as a deviation)."),
    pixel_scale: str = typer.Option("1", "--pixel-scale", help="Suite corruptions: 1 (CIL-ReID: literal pixel "
                                    "lengths) or 'auto' / a factor (the scaled variant, titled 'scaled')."),
    subjects: int = typer.Option(2, help="Suite inversion subjects."),
    iterations: int = typer.Option(200, help="Suite inversion iterations."),
    threat: str = typer.Option("full", metavar="THREAT", help="Suite inversion's threat model of one upload: "
                               "full, shared or shared-feature (`privreid invert --help` says what each observes)."),
    clients: Optional[list[str]] = typer.Option(None, "--clients", help="Suite inversion: the aggregate threat "
                                                "(what a server under secure aggregation sees) sums m clients' "
                                                "updates, e.g. --clients 2,4 (default: each run's clients per "
                                                "round)."),
    quiet: bool = typer.Option(False, help="No progress bars."),
) -> None:
    """Compare checkpoints on the same seen and unseen test sets (R1 / mAP / mINP); optionally a full report.

    The test sets are those of the first checkpoint's run configuration.  With
    --suite, also adversarial queries (Table IX layout), corruptions and
    gradient inversion, written to --out as report.md, CSVs and PNGs.

    Example: privreid compare --models runs/central/ckpt.pt runs/fedpav/ckpt.pt --suite all --out runs/report
    """
    from privreid.api import compare as compare_models
    from privreid.io import format_table, write_text_atomic
    from privreid.rundir import check_output_file

    paths = run_or_exit(checkpoint_paths, model, models_opt, models)
    run_or_exit(check_output_file, markdown, "--markdown")
    file_options = dict(arch=arch, height=height, width=width, mean=mean, std=std, interpolation=interpolation)

    def go():
        if suite is None:
            return compare_models(paths, data, untrained=untrained, device=device, announce=typer.echo, **file_options)
        from privreid.inversion.aggregate import parse_clients
        from privreid.retrieval_attacks.retrieval import resolve_methods
        from privreid.commands.attack import parse_fraction
        from privreid.api import parse_pixel_scale
        from privreid.comparison import SUITES

        if out is None:
            raise ConfigError("--suite needs --out")
        names = list(SUITES) if suite.strip() == "all" else csv_list(suite) or []
        return compare_models(paths, data, suites=names, out=out, device=device, progress=not quiet,
                              announce=typer.echo, **file_options, testsets=testsets,
                              attacks=resolve_methods(attacks), eps=parse_fraction(eps, "--eps"), steps=steps,
                              max_queries=max_queries, corruptions=csv_list(corruptions) or [],
                              corruption_repeats=repeats, pixel_scale=parse_pixel_scale(pixel_scale),
                              inversion_subjects=subjects, inversion_iterations=iterations, inversion_threat=threat,
                              inversion_clients=parse_clients(clients) if clients else None)

    with run_dir_or_exit(None if suite is None else out, "compare"):
        clean = run_or_exit(go).clean
        if clean:  # a suite without the clean evaluation has none
            typer.echo(format_table(clean))
            if markdown:
                run_or_exit(write_text_atomic, markdown, format_table(clean) + "\n")
        if suite is not None:
            typer.echo(f"wrote {out / 'report.md'}")
