"""``privreid train``: one run (federated, centralised or standalone) from its options or a YAML preset."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import click
import typer

from privreid.errors import ConfigError
from privreid.commands.common import LOGGERS, params_with_preset, run_or_exit
from privreid.commands.options import CONFIG_OPTIONS, FEDERATION, OUTPUT, TRAINING, config_options, run_config

#: the run-configuration options of ``privreid train``: every one of :data:`~.options.CONFIG_OPTIONS`
TRAIN_OPTIONS = tuple(CONFIG_OPTIONS)


def train_config(p: dict):
    """The :class:`~privreid.config.RunConfig` of ``privreid train``'s parameters (after the preset is applied);
    ``--adversary`` / ``--malicious-clients`` go into ``robustness.adversary`` with the options ``--set`` gave it."""
    config = run_config(p, TRAIN_OPTIONS)
    if p.get("adversary"):
        count = (p.get("malicious_clients") or "1").strip()
        malicious = int(count) if count.isdigit() else [name.strip() for name in count.split(",")]
        config.robustness.adversary = {**config.robustness.adversary, "name": p["adversary"], "malicious": malicious}
    return config


@config_options(TRAIN_OPTIONS)
def train_command(
    ctx: typer.Context,
    config_file: Optional[Path] = typer.Option(
        None, "--config", rich_help_panel=TRAINING, help="YAML preset of train options (keys are the option names, "
        "e.g. `rounds: 300`); flags given on the command line override it. See configs/."),
    out: Path = typer.Option(Path("runs/latest"), rich_help_panel=OUTPUT,
                             help="Output directory (ckpt.pt, metrics.jsonl, summary.json)."),
    overwrite: bool = typer.Option(False, rich_help_panel=OUTPUT, help="Replace a run already in --out."),
    resume: bool = typer.Option(
        False, rich_help_panel=OUTPUT, help="Continue the run in --out from its checkpoint, with the configuration "
        "it recorded (OUT/config.yaml): no other flag is needed. Flags given with it may change only --rounds (to "
        "more), --eval-every, --workers, --device, --quiet and --logger; any other change is refused, naming the "
        "field."),
    quiet: bool = typer.Option(False, rich_help_panel=OUTPUT, help="No progress bars."),
    logger: str = typer.Option(
        "none", rich_help_panel=OUTPUT, click_type=click.Choice(LOGGERS), help="Also mirror every metric record to "
        "tensorboard (OUT/tensorboard; pip install 'privreid\\[tensorboard]') or wandb ('privreid\\[wandb]'); none."),
    dry_run: bool = typer.Option(
        False, "--dry-run", rich_help_panel=OUTPUT, help="Validate everything, train nothing, write nothing: print "
        "the resolved configuration, every parameter group's learning rate in every round, how each test set is "
        "ranked and the run's deviations."),
    as_json: bool = typer.Option(
        False, "--json", rich_help_panel=OUTPUT, help="With --dry-run: print the plan as one JSON object (keys "
        "config, lr_schedule, lr, evaluation, deviations)."),
    parallel_clients: Optional[int] = typer.Option(
        None, "--parallel-clients", rich_help_panel=FEDERATION, help="Train up to K clients of a round at the same "
        "time on Flower's simulation engine (Ray; pip install 'privreid\\[simulation]'), each with this process's "
        "thread count; same results as one at a time. A Ray cluster: set RAY_ADDRESS (docs/parallel-clients.md)."),
    adversary: Optional[str] = typer.Option(
        None, rich_help_panel=FEDERATION, help="Poisoning attack run by --malicious-clients (docs/poisoning.md): "
        "label-flip, sign-flip, scaled, backdoor, dba; its options: --set robustness.adversary.KEY=V."),
    malicious_clients: Optional[str] = typer.Option(
        None, rich_help_panel=FEDERATION, help="With --adversary: how many clients are malicious (the last K of the "
        "federation; default 1), or their names (a,b)."),
    **options,
) -> None:
    """Train a model (federated, centralised or standalone).

    Example: privreid train --method centralized --rounds 5 --out runs/central
    Example: privreid train --config configs/fedpav-paper.yaml --data synth --dry-run
    """
    from privreid.provenance import train_preset
    from privreid.training import train_run

    if dry_run or as_json:
        run_or_exit(_dry_run, ctx, config_file, as_json)
        return

    def go() -> dict:
        p = train_params(ctx, config_file)
        return train_run(train_config(p), p["out"], overwrite=p["overwrite"], resume=p["resume"],
                         progress=not p["quiet"], echo=typer.echo, preset=train_preset(p), logger=p["logger"],
                         parallel_clients=p["parallel_clients"])

    summary = run_or_exit(go)
    typer.echo(summary_text(summary))


def train_params(ctx: typer.Context, config_file: Optional[Path]) -> dict:
    """``privreid train``'s parameters: the flags given, over ``--config``'s preset.

    With ``--resume`` and no ``--config``, the preset is the run's own
    ``config.yaml``: ``privreid train --out runs/x --resume`` continues the
    run as it was configured, and the flags given with it may change only
    what :data:`privreid.federated.resume.FREE_FIELDS` allows (anything else
    is refused, naming the field).
    """
    if config_file is None and ctx.params.get("resume"):
        out = Path(ctx.params["out"])
        recorded = out / "config.yaml"
        if recorded.is_file() and recorded.stat().st_size:
            config_file = recorded
        elif any((out / f).exists() for f in ("ckpt.pt", "metrics.jsonl", "summary.json")):
            # the flags alone would be compared with the checkpoint's configuration: a wrong "configuration differs"
            raise ConfigError(f"--resume: the run's recorded options {recorded} are "
                              f"{'empty' if recorded.is_file() else 'missing'}; restore the file from a copy, or "
                              "give the run's options with --config")
    return params_with_preset(ctx, config_file)


def _dry_run(ctx: typer.Context, config_file: Optional[Path], as_json: bool) -> None:
    """``--dry-run``: the :func:`~privreid.run_plan.run_plan` of the run, after validating its data and --out."""
    from privreid.data.catalog import federation_for_config, load_datasets
    from privreid.rundir import check_output_dir
    from privreid.run_plan import render_plan, run_plan
    from privreid.training import check_run_flags
    from privreid.composition import method_of

    p = train_params(ctx, config_file)
    if not p["dry_run"]:
        raise ConfigError("--json prints the plan of --dry-run; give both")
    check_run_flags(p["overwrite"], p["resume"])
    check_output_dir(Path(p["out"]))
    config = train_config(p).validate()
    d = config.data
    datasets = {name: loaded.format for name, loaded in load_datasets(d.roots, d.format, d.synth_seed).items()}
    federation = federation_for_config(config, verify=True)
    plan = run_plan(config, method_of(config), federation, datasets)
    typer.echo(json.dumps(plan, indent=2) if as_json else render_plan(plan))


def summary_text(summary: dict) -> str:
    """What a finished run prints: method, rounds, time, the final rank-1 / mAP of each evaluated model and test
    set, the privacy guarantee, the run directory and where ``summary.json`` (everything else) is."""
    out = Path(summary["files"]["checkpoint"]).parent
    lines = [f"{summary['method']}: {summary['rounds']} round(s) in {summary['wall_time_s']:.1f} s"]
    for key, metrics in summary.items():
        if isinstance(metrics, dict) and {"rank1", "mAP"} <= set(metrics):
            model, _, testsets = key.partition("_")
            lines.append(f"  {model} model, {testsets} test sets: R1 {100 * metrics['rank1']:.1f}%  "
                         f"mAP {100 * metrics['mAP']:.1f}%")
    privacy = summary.get("privacy") or {}
    if privacy.get("epsilon") is not None:
        lines.append(f"  privacy: epsilon {privacy['epsilon']:.2f} ({privacy['guarantee']})")
    lines += [f"run directory: {out}", f"everything else: {out / 'summary.json'}"]
    return "\n".join(lines)
