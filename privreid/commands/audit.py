"""``privreid audit``: membership inference (image / identity level) and the empirical DP audit.

The audits themselves are :func:`privreid.auditing.run_audit` and
:func:`privreid.auditing.dp_audit.run_dp_audit`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from privreid.commands.common import (ArchOption, DeviceOption, HeightOption, MeanOption, StdOption, WidthOption,
                                      checkpoint_paths, run_dir_or_exit, run_or_exit)


def audit_command(
    model: Optional[Path] = typer.Option(None, "--model", help="The checkpoint to audit, or a model file from "
                                         "elsewhere with --data (docs/models.md)."),
    models: Optional[list[Path]] = typer.Option(None, "--models", help="Checkpoints to audit: --models a.pt b.pt "
                                                "(or repeat --models), or model files from elsewhere with --data "
                                                "(docs/models.md)."),
    more_models: Optional[list[Path]] = typer.Argument(None, metavar="[CKPT]...",
                                                       help="More checkpoints (what follows --models a.pt)."),
    level: Optional[str] = typer.Option(None, help="image (was this image trained on?), identity (was this "
                                        "person in the training data, judged from other images of them?), or both "
                                        "(default; a model file from elsewhere: identity)."),
    method: str = typer.Option("loss,feature", "--method", help="Membership attacks, a comma list of loss, feature, "
                               "lira-online, lira-offline; 'lira' = both LiRA variants; 'all'."),
    view: str = typer.Option("public", help="public (the released global model, or --client's personalised "
                             "model), server (the audited client's uploads, re-derived by replaying the run) and/or "
                             "server-aggregate (under secure aggregation: only the sum of each round's uploads)."),
    client: Optional[str] = typer.Option(None, help="The audited client (default: the global model; server view: "
                                         "the first client)."),
    round_: Optional[int] = typer.Option(None, "--round", help="Server views: only this round's upload (default: "
                                         "all rounds, scores averaged)."),
    shadows: int = typer.Option(4, help="LiRA: number K of shadow models (even); trained once and cached."),
    probes_per_identity: int = typer.Option(4, help="Identity level: non-training images per person."),
    max_per_class: Optional[int] = typer.Option(None, help="Cap members and non-members at N each (seeded)."),
    extra_per_cam: Optional[int] = typer.Option(None, help="Synthetic data: extra renders per training identity "
                                                "and camera (default: as many as in training)."),
    bootstrap: int = typer.Option(200, help="Bootstrap resamples for the confidence intervals (0 = none)."),
    dp_audit: bool = typer.Option(False, "--dp-audit", help="Instead: the empirical DP audit (Steinke et al. one "
                                  "run): retrain each checkpoint's DP configuration with canaries, report the "
                                  "epsilon lower bound next to the accounted epsilon."),
    canaries: int = typer.Option(40, help="DP audit: canaries, each included with probability 1/2."),
    confidence: float = typer.Option(0.95, help="DP audit: confidence of the epsilon lower bound."),
    canary_norm: float = typer.Option(1000.0, help="DP audit, client level: canary update norm in units of --clip."),
    seed: int = typer.Option(0, help="Seed of the samples, shadows and canaries."),
    device: DeviceOption = "auto",
    data: Optional[list[str]] = typer.Option(None, "--data", help="A model file from elsewhere: the data it was "
                                             "trained on; its training identities are the members, its test "
                                             "identities the non-members (identity level)."),
    arch: ArchOption = None,
    height: HeightOption = None,
    width: WidthOption = None,
    mean: MeanOption = None,
    std: StdOption = None,
    out: Path = typer.Option(Path("runs/audit"), help="Output directory: audit.json, roc.png, report.md, cache/."),
    quiet: bool = typer.Option(False, help="No progress messages."),
) -> None:
    """Audit privacy: can an adversary tell that an image, or a person, was in a site's training data?

    Membership inference (loss, feature statistics, LiRA with privreid-trained
    shadow models) at the image and identity level, against the released
    model or the server's view of one client's uploads; TPR at 0.1% and 1%
    FPR on log-log ROC curves.  With --dp-audit, an empirical lower bound on
    epsilon from one training run with canaries, next to the accounted epsilon.

    Example: privreid audit --models runs/central/ckpt.pt runs/fedpav/ckpt.pt --method loss,feature,lira --out runs/audit
    """
    from privreid.api import audit_run

    def go():
        return audit_run(checkpoint_paths(model, models, more_models), out, level=level, method=method, view=view,
                         client=client, round_=round_, shadows=shadows, probes_per_identity=probes_per_identity,
                         max_per_class=max_per_class, extra_per_cam=extra_per_cam, bootstrap=bootstrap,
                         dp_audit=dp_audit, canaries=canaries, confidence=confidence, canary_norm=canary_norm,
                         seed=seed, device=device, data=data, echo=None if quiet else typer.echo,
                         announce=typer.echo, arch=arch, height=height, width=width, mean=mean, std=std)

    from privreid.auditing.report import table_rows, markdown_table
    from privreid.auditing.dp_audit import dp_table

    with run_dir_or_exit(out, "audit"):
        records = run_or_exit(go)
        typer.echo(dp_table(records) if dp_audit else markdown_table(table_rows(records)))
        typer.echo(f"wrote {out / 'report.md'}")
