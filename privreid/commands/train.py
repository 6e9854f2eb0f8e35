"""``privreid train``: one run (federated, centralised or standalone) from its options or a YAML preset."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from .common import params_with_preset, run_or_exit
from .options import CONFIG_OPTIONS, config_options, run_config

#: the run-configuration options of ``privreid train``: every one of :data:`~.options.CONFIG_OPTIONS`
TRAIN_OPTIONS = tuple(CONFIG_OPTIONS)


def train_config(p: dict):
    """The :class:`~privreid.config.RunConfig` of ``privreid train``'s parameters (after the preset is applied);
    ``--adversary`` / ``--malicious-clients`` go into ``train.adversary`` with the options ``--set`` gave it."""
    config = run_config(p, TRAIN_OPTIONS)
    if p.get("adversary"):
        count = (p.get("malicious_clients") or "1").strip()
        malicious = int(count) if count.isdigit() else [name.strip() for name in count.split(",")]
        config.train.adversary = {**config.train.adversary, "name": p["adversary"], "malicious": malicious}
    return config


@config_options(TRAIN_OPTIONS)
def train_command(
    ctx: typer.Context,
    config_file: Optional[Path] = typer.Option(None, "--config", help="YAML preset of train options (keys are "
                                               "the option names, e.g. `rounds: 300`); flags given on the "
                                               "command line override it. See configs/."),
    out: Path = typer.Option(Path("runs/latest"), help="Output directory (ckpt.pt, metrics.jsonl, summary.json)."),
    overwrite: bool = typer.Option(False, help="Replace a run already in --out."),
    resume: bool = typer.Option(False, help="Continue the run in --out from its checkpoint, with the configuration "
                                "it recorded (OUT/config.yaml): no other flag is needed. Flags given with it may "
                                "change only --rounds (to more), --eval-every, --workers, --device, --quiet and "
                                "--logger; any other change is refused, naming the field."),
    quiet: bool = typer.Option(False, help="No progress bars."),
    logger: str = typer.Option("none", help="Also mirror every metric record to tensorboard (OUT/tensorboard; "
                               "pip install 'privreid[tensorboard]') or wandb ('privreid[wandb]'); none."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Validate everything, train nothing, write nothing: print "
                                 "the resolved configuration, every parameter group's learning rate in every "
                                 "round, how each test set is ranked and the run's deviations."),
    adversary: Optional[str] = typer.Option(None, help="Poisoning attack run by --malicious-clients (docs/poisoning.md): "
                                            "label-flip, sign-flip, scaled; its options: --set train.adversary.KEY=V."),
    malicious_clients: Optional[str] = typer.Option(None, help="With --adversary: how many clients are malicious (the "
                                                    "last K of the federation; default 1), or their names (a,b)."),
    as_json: bool = typer.Option(False, "--json", help="With --dry-run: print the plan as one JSON object (keys "
                                 "config, lr_schedule, lr, evaluation, deviations)."),
    **options,
) -> None:
    """Train a model (federated, centralised or standalone).

    Example: privreid train --method centralized --rounds 5 --out runs/central
    Example: privreid train --config configs/fedpav-paper.yaml --data synth --dry-run
    """
    from ..provenance import train_preset
    from ..training import train_run

    if dry_run or as_json:
        run_or_exit(_dry_run, ctx, config_file, as_json)
        return

    def go() -> dict:
        p = train_params(ctx, config_file)
        return train_run(train_config(p), p["out"], overwrite=p["overwrite"], resume=p["resume"],
                         progress=not p["quiet"], echo=typer.echo, preset=train_preset(p), logger=p["logger"])

    summary = run_or_exit(go)
    typer.echo(json.dumps(_brief(summary), indent=2))


def train_params(ctx: typer.Context, config_file: Optional[Path]) -> dict:
    """``privreid train``'s parameters: the flags given, over ``--config``'s preset.

    With ``--resume`` and no ``--config``, the preset is the run's own
    ``config.yaml``: ``privreid train --out runs/x --resume`` continues the
    run as it was configured, and the flags given with it may change only
    what :data:`privreid.federated.resume.FREE_FIELDS` allows (anything else
    is refused, naming the field).
    """
    if config_file is None and ctx.params.get("resume"):
        recorded = Path(ctx.params["out"]) / "config.yaml"
        if recorded.is_file():
            config_file = recorded
    return params_with_preset(ctx, config_file)


def _dry_run(ctx: typer.Context, config_file: Optional[Path], as_json: bool) -> None:
    """``--dry-run``: the :func:`~privreid.run_plan.run_plan` of the run, after validating its data and --out."""
    from ..data.catalog import federation_for_config, load_datasets
    from ..errors import ConfigError
    from ..rundir import check_output_dir
    from ..run_plan import render_plan, run_plan
    from ..training import check_run_flags

    p = train_params(ctx, config_file)
    if not p["dry_run"]:
        raise ConfigError("--json prints the plan of --dry-run; give both")
    check_run_flags(p["overwrite"], p["resume"])
    check_output_dir(Path(p["out"]))
    config = train_config(p).validate()
    d = config.data
    datasets = {name: loaded.format for name, loaded in load_datasets(d.roots, d.format, d.synth_seed).items()}
    plan = run_plan(config, federation_for_config(config, verify=True), datasets)
    typer.echo(json.dumps(plan, indent=2) if as_json else render_plan(plan))


def _brief(summary: dict) -> dict:
    """``summary.json`` without its per-test-set tables (also inside the ``best`` block), for the terminal."""
    def drop(d: dict) -> dict:
        return {k: drop(v) if isinstance(v, dict) else v for k, v in d.items() if not k.endswith("per_testset")}

    return drop(summary)
