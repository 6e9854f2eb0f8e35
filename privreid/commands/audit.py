"""``privreid audit``: membership inference (image / identity level) and the empirical DP audit.

The audits themselves are :func:`privreid.auditing.run_audit` and
:func:`privreid.auditing.dp_audit.run_dp_audit`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from privreid.errors import ConfigError
from privreid.commands.common import (ArchOption, DeviceOption, HeightOption, MeanOption, StdOption, WidthOption, checkpoint_paths,
                     csv_list, load_models_or_exit, run_dir_or_exit, run_or_exit)


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
    from privreid.auditing import AuditSettings, run_audit
    from privreid.device import resolve_device
    from privreid.provenance import record_models

    echo = (lambda _: None) if quiet else typer.echo

    def go():
        paths = checkpoint_paths(model, models, more_models)
        loaded = load_models_or_exit(paths, arch=arch, height=height, width=width, mean=mean, std=std)
        if any(m.checkpoint is None for m in loaded):
            return _files(loaded)
        if data:
            raise ConfigError("--data names the training data of a model file from elsewhere; a privreid "
                              "checkpoint records its own")
        if dp_audit:
            return _dp(paths)
        settings = AuditSettings(levels=csv_list(level or "image,identity") or [], attacks=csv_list(method) or [],
                                 views=csv_list(view) or [], client=client, round=round_, shadows=shadows,
                                 probes_per_identity=probes_per_identity, max_per_class=max_per_class,
                                 extra_per_cam=extra_per_cam, bootstrap=bootstrap, seed=seed)
        return run_audit(paths, out, settings, device=device, progress=False, echo=echo)["records"]

    def _files(loaded):
        from privreid.auditing.given import GIVEN_ATTACKS, audit_files
        from privreid.models.evaluated import model_labels

        names = csv_list(method) or []
        if len(loaded) != sum(m.checkpoint is None for m in loaded):
            raise ConfigError("privreid audit takes privreid checkpoints or model files from elsewhere, not both "
                              "in one run")
        if dp_audit or view != "public" or client or round_ is not None or level not in (None, "identity"):
            raise ConfigError("a model file from elsewhere is audited at --level identity, --view public: the "
                              "image level, the server views and the DP audit need a privreid run")
        if not data:
            raise ConfigError("a model file from elsewhere records no training data: give --data, the data it "
                              "was trained on (its training identities are the members)")
        unknown = [a for a in names if a not in GIVEN_ATTACKS]
        if unknown:
            raise ConfigError(f"--method {','.join(unknown)}: a model file from elsewhere is audited with "
                              f"{' or '.join(GIVEN_ATTACKS)} (LiRA trains shadow models like a privreid run)")
        for m in loaded:
            if "loss" in names:
                m.require("classifier", "the loss attack", "use --method feature, which needs only features")
        records = audit_files(loaded, model_labels(loaded), data, out, attacks=names, bootstrap=bootstrap, seed=seed,
                              device=resolve_device(device))
        record_models(out, loaded)
        return records

    def _dp(ckpt_paths):
        from privreid.auditing.dp_audit import DPAuditSettings, run_dp_audit
        from privreid.auditing.report import write_report
        from privreid.checkpoint import Checkpoint, checkpoint_labels

        settings = DPAuditSettings(canaries=canaries, confidence=confidence, canary_norm=canary_norm,
                                   seed=seed).validate()
        ckpts = [Checkpoint.load(p) for p in ckpt_paths]
        labels = checkpoint_labels(ckpts)
        configs = [c.run_config for c in ckpts]
        for label, cfg in zip(labels, configs):
            if not (cfg.train.dp_sgd or cfg.train.client_dp):
                raise ConfigError(f"{label}: the DP audit needs a run trained with --dp-sgd or --client-dp")
        records = []
        for i, (label, cfg) in enumerate(zip(labels, configs)):
            echo(f"[{label}] DP audit: training once with {canaries} canaries")
            records.append(run_dp_audit(cfg, out / "cache" / "dp_audit" / f"run{i}", settings, label=label))
        write_report(out, [], [], dp=records)
        return records

    from privreid.auditing.report import table_rows, markdown_table
    from privreid.auditing.dp_audit import dp_table

    with run_dir_or_exit(out, "audit"):
        records = run_or_exit(go)
        typer.echo(dp_table(records) if dp_audit else markdown_table(table_rows(records)))
        typer.echo(f"wrote {out / 'report.md'}")
